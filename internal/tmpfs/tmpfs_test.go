package tmpfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A mounted tmpfs refuses a write past its size with ENOSPC, the error a
// full disk gives: what the tests that use it rely on.
func TestMountFillsUp(t *testing.T) {
	dir := Mount(t, 64<<10)
	err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 1<<20), 0o600)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing 1 MiB to a 64 KiB tmpfs: %v, want ENOSPC", err)
	}
}
