//go:build !linux

package priority

// RunNiced runs f; per-thread niceness is a Linux feature.
func RunNiced(nice int, f func()) { f() }

// SetIdle does nothing: the idle scheduling class is Linux's.
func SetIdle(pid int) {}
