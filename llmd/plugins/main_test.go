package plugins_test

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// TestMain gives llm-d's scheduler a logger, as llm-d's runner does in an
// EPP: until one is set, controller-runtime's delegating logger keeps a
// promise for every logger derived with WithValues (each request's), a
// heap that grows through a benchmark and that an EPP does not have.
func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}
