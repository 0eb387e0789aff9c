package trainer

import (
	"runtime"
	"syscall"
	"unsafe"
)

// runNiced runs f on an OS thread of its own at scheduling niceness nice
// (1-19; 0 runs f as it is), so that a fit yields the cores to predictions
// served beside it. Linux sets niceness per thread. The thread is never
// unlocked: an unprivileged process cannot make it less nice again, so it
// must not go back to the runtime's pool, and a goroutine that exits while
// locked takes its thread with it. The main thread is the exception (the
// runtime parks it for good instead, still niced, where ps shows the
// process's niceness), so it is not used; after a few tries that land on
// it, f runs at the normal priority. Goroutines f starts run at the normal
// priority. Failing to set the niceness only leaves f at the normal one.
func runNiced(nice int, f func()) {
	if nice <= 0 {
		f()
		return
	}
	const tries = 3
	for try := 1; ; try++ {
		ran := make(chan bool)
		go func() {
			runtime.LockOSThread()
			if syscall.Gettid() == syscall.Getpid() {
				runtime.UnlockOSThread() // still as nice as before: reusable
				if try < tries {
					ran <- false
					return
				}
				f()
				ran <- true
				return
			}
			_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), nice)
			f()
			ran <- true
		}()
		if <-ran {
			return
		}
	}
}

// schedIdle is Linux's SCHED_IDLE scheduling policy.
const schedIdle = 5

// setIdle moves process (or thread) pid to the idle scheduling class, where
// it runs only on CPU time no other thread wants. Failure leaves it as it
// was.
func setIdle(pid int) {
	var param struct{ priority int32 } // must be 0 for SCHED_IDLE
	_, _, _ = syscall.Syscall(syscall.SYS_SCHED_SETSCHEDULER, uintptr(pid), schedIdle, uintptr(unsafe.Pointer(&param)))
}
