//go:build unix

package procgroup

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cancelling an isolated command kills what it started too. The shell's
// background sleep holds the write end of a pipe; the read end reaches EOF
// only once every holder is dead, so the test waits on that event, not on a
// timer (the 20 s bound only turns a hang into a failure: without the group
// kill the sleep would hold the pipe for 60 s).
func TestIsolateKillsTheGroup(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", "sleep 60 & echo started; wait")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd.Stdout = w
	Isolate(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	lines := bufio.NewReader(r)
	if line, err := lines.ReadString('\n'); line != "started\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel()
	cmd.Wait()
	eof := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, lines); eof <- err }()
	select {
	case <-eof:
	case <-time.After(20 * time.Second):
		t.Fatal("pipe still open 20 s after the kill: the shell's sleep outlived it")
	}
}

// SetNice lowers the priority of the group's processes.
func TestSetNice(t *testing.T) {
	cmd := exec.CommandContext(context.Background(), "sh", "-c", "read _")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	Isolate(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	if err := SetNice(cmd.Process.Pid, 7); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ps", "-o", "nice=", "-p", strconv.Itoa(cmd.Process.Pid)).Output()
	if err != nil {
		t.Skipf("no ps to read the niceness with: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != "7" {
		t.Fatalf("niceness %q, want 7", got)
	}
}
