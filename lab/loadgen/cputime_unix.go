//go:build unix

package loadgen

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time, user and system, this process has used; 0 if the
// system does not say.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
