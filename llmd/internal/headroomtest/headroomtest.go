// Package headroomtest starts what the llmd module's tests need of
// Headroom's own module: its binary, built once from the repository this
// module sits in (the module imports none of its packages), and loopback
// ports to serve it on.
package headroomtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// Binary is the headroom command: $HEADROOM_BIN (scripts/test.sh builds it
// once for every package), or built once per test binary from the
// repository's cmd/headroom.
func Binary(t testing.TB) string {
	t.Helper()
	if b := os.Getenv("HEADROOM_BIN"); b != "" {
		return b
	}
	buildOnce.Do(func() {
		_, here, _, _ := runtime.Caller(0)
		repo := filepath.Join(filepath.Dir(here), "..", "..", "..")
		dir, err := os.MkdirTemp("", "headroom-llmd-test-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "headroom")
		cmd := exec.Command("go", "build", "-o", binary, "./cmd/headroom")
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build headroom in %s: %v\n%s", repo, err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// FreePort is a loopback address nothing listens on now.
func FreePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
