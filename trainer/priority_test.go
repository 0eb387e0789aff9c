package trainer

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// threadNice reads the calling thread's niceness from /proc.
func threadNice(t *testing.T) int {
	t.Helper()
	stat, err := os.ReadFile("/proc/thread-self/stat")
	if err != nil {
		t.Skipf("no /proc/thread-self: %v", err)
	}
	return procNice(t, string(stat))
}

// runNiced runs its function at the niceness asked for, and the niceness
// does not leak into the threads other goroutines run on afterwards.
func TestRunNiced(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("per-thread niceness is Linux's")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	own := threadNice(t)
	for _, nice := range []int{0, 12} {
		got := -1
		runNiced(nice, func() { got = threadNice(t) })
		want := max(own, nice)
		if os.Geteuid() == 0 && nice > 0 {
			want = nice
		}
		if got != want {
			t.Errorf("runNiced(%d): ran at niceness %d, want %d", nice, got, want)
		}
	}
	// The niced thread goes away (the runtime ends it soon after its
	// goroutine): no thread of the process stays nicer.
	deadline := time.Now().Add(10 * time.Second) // generous: a loaded machine may delay the exit
	for {
		nicer := nicerThreads(t, own)
		if len(nicer) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads %v still run nicer than the process after runNiced", nicer)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nicerThreads lists the process's threads whose niceness is not own.
func nicerThreads(t *testing.T, own int) []string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skipf("no /proc/self/task: %v", err)
	}
	var nicer []string
	for _, task := range tasks {
		stat, err := os.ReadFile("/proc/self/task/" + task.Name() + "/stat")
		if err != nil {
			continue // the thread exited meanwhile
		}
		if procNice(t, string(stat)) != own {
			nicer = append(nicer, task.Name())
		}
	}
	return nicer
}
