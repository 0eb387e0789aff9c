package priority

import (
	"runtime"
	"syscall"
	"unsafe"
)

// RunNiced runs f on an OS thread of its own at scheduling niceness nice
// (1-19; 0 runs f as it is), so that background work yields the cores to
// requests served beside it. Linux sets niceness per thread. Goroutines f
// starts run at the normal priority. Failing to set the niceness only
// leaves f at the normal one.
func RunNiced(nice int, f func()) {
	if nice <= 0 {
		f()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The thread is never unlocked: an unprivileged process cannot
		// raise its priority again, so it must not go back to the
		// runtime's pool, and a goroutine that exits while locked takes
		// its thread with it.
		runtime.LockOSThread()
		if syscall.Gettid() == syscall.Getpid() {
			// The main thread is not ended but parked for good by a
			// goroutine that exits locked to it, and would stay niced
			// where ps shows the process's priority. Holding it, go one
			// level down: the new goroutine cannot run on a thread
			// locked to another, so it gets a thread of its own.
			RunNiced(nice, f)
			runtime.UnlockOSThread() // not niced: reusable
			return
		}
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), nice)
		f()
	}()
	<-done
}

// schedIdle is Linux's SCHED_IDLE scheduling policy.
const schedIdle = 5

// SetIdle moves process (or thread) pid to the idle scheduling class, where
// it runs only on CPU time no other thread wants, and a thread that wakes
// takes the core from it at once (a niced one may keep it for the rest of
// its slice). Failure leaves it as it was. Meant for child processes: a
// thread of a Go program in the idle class can stall the whole program on a
// busy machine, since garbage collection and the locks it holds wait for
// it; and without privileges nothing can take it out of the class again.
func SetIdle(pid int) {
	var param struct{ priority int32 } // must be 0 for SCHED_IDLE
	_, _, _ = syscall.Syscall(syscall.SYS_SCHED_SETSCHEDULER, uintptr(pid), schedIdle, uintptr(unsafe.Pointer(&param)))
}
