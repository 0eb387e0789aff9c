//go:build !linux

package tmpfs

import (
	"runtime"
	"testing"
)

// Mount skips the test: mounting a tmpfs is Linux's. The caller's
// file-size-limit case covers the ground instead.
func Mount(t *testing.T, size int) string {
	t.Helper()
	t.Skipf("no tmpfs to mount on %s; the file-size-limit case still runs", runtime.GOOS)
	return ""
}
