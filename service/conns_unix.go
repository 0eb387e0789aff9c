//go:build unix

package service

import "syscall"

// descriptorLimit is the process's soft limit on open descriptors. Go
// raises it to the hard limit at start, so it is what the operator's
// ulimit (or the container runtime) allows.
func descriptorLimit() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == 0 {
		return 1 << 16
	}
	return int(min(lim.Cur, 1<<20))
}
