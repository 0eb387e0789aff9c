package tmpfs

import (
	"strconv"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size bytes on a new directory and unmounts it at
// the end of the test; it skips the test where mounting is not permitted
// (not root, or no CAP_SYS_ADMIN in a container), saying why and that the
// caller's file-size-limit case covers the ground instead.
func Mount(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		t.Skipf("cannot mount a tmpfs for a real full disk (%v); the file-size-limit case still runs", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}
