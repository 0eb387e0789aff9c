package priority

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/headroomhq/headroom/internal/priority/prioritytest"
)

// threadNice reads the calling thread's niceness from /proc.
func threadNice(t *testing.T) int {
	t.Helper()
	n, err := prioritytest.Niceness("/proc/thread-self/stat")
	if err != nil {
		t.Skipf("no /proc/thread-self: %v", err)
	}
	return n
}

// RunNiced runs its function at the niceness asked for, and the niceness
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
		RunNiced(nice, func() { got = threadNice(t) })
		want := max(own, nice)
		if os.Geteuid() == 0 && nice > 0 {
			want = nice
		}
		if got != want {
			t.Errorf("RunNiced(%d): ran at niceness %d, want %d", nice, got, want)
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
			t.Fatalf("threads %v still run nicer than the process after RunNiced", nicer)
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
		n, err := prioritytest.Niceness("/proc/self/task/" + task.Name() + "/stat")
		if err != nil {
			continue // the thread exited meanwhile
		}
		if n != own {
			nicer = append(nicer, task.Name())
		}
	}
	return nicer
}

// SetIdle moves a child process into the idle scheduling class (policy 5,
// field 41 of /proc's stat).
func TestSetIdle(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the idle scheduling class is Linux's")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep to start: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	stat := fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid)
	if p, err := prioritytest.StatField(stat, 41); err != nil || p != "0" {
		t.Skipf("child's policy %q, %v; want 0 to start from", p, err)
	}
	SetIdle(cmd.Process.Pid)
	if p, err := prioritytest.StatField(stat, 41); err != nil || p != "5" {
		t.Errorf("after SetIdle the child's policy is %q, %v; want 5 (SCHED_IDLE)", p, err)
	}
	if p, err := prioritytest.StatField("/proc/self/stat", 41); err != nil || p != "0" {
		t.Errorf("the test's own policy is %q, %v; want it untouched", p, err)
	}
}
