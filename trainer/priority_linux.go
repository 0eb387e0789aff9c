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
// locked takes its thread with it. Goroutines f starts run at the normal
// priority. Failing to set the niceness only leaves f at the normal one.
func runNiced(nice int, f func()) {
	if nice <= 0 {
		f()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if syscall.Gettid() == syscall.Getpid() {
			// The main thread is not ended but parked for good by a
			// goroutine that exits locked to it, and would stay niced
			// where ps shows the process's niceness. Holding it, go one
			// level down: the new goroutine cannot run on a thread
			// locked to another, so it gets a thread of its own.
			runNiced(nice, f)
			runtime.UnlockOSThread() // not reniced: reusable
			return
		}
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), nice)
		f()
	}()
	<-done
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
