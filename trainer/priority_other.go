//go:build !linux

package trainer

// runNiced runs f; per-thread niceness is a Linux feature.
func runNiced(nice int, f func()) { f() }

// setIdle does nothing: the idle scheduling class is Linux's.
func setIdle(pid int) {}
