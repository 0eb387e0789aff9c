package fittest

import (
	"os/exec"
	"testing"

	"github.com/headroomhq/headroom/xgboost"
)

// XGBoost is the xgboost CLI with a temporary directory of the test's own;
// the test is skipped where the CLI is not installed.
func XGBoost(t testing.TB) *xgboost.CLI {
	t.Helper()
	if _, err := exec.LookPath("xgboost"); err != nil {
		t.Skip("xgboost CLI not installed (apt-get install xgboost)")
	}
	return &xgboost.CLI{Binary: "xgboost", TempDir: t.TempDir()}
}
