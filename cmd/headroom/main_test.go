package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the headroom binary: started with
// envRunAsHeadroom=1 it runs main() on its arguments instead of the tests.
// Tests that must crash, signal or limit a real process (kill -9, SIGTERM,
// a full disk) start it that way: the code under test is exactly main's,
// nothing is built, and under `go test -race` the child runs with the race
// detector too.
const (
	envRunAsHeadroom = "HEADROOM_TEST_RUN_AS_HEADROOM"
	// envFileSizeLimit sets RLIMIT_FSIZE (bytes) in the child before main
	// runs: writes past it fail with EFBIG, as on a full disk. Go ignores
	// the SIGXFSZ that comes with them.
	envFileSizeLimit = "HEADROOM_TEST_RLIMIT_FSIZE"
)

func TestMain(m *testing.M) {
	if os.Getenv(envRunAsHeadroom) == "1" {
		if v := os.Getenv(envFileSizeLimit); v != "" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err == nil {
				err = syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: n, Max: n})
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s=%s: %v\n", envFileSizeLimit, v, err)
				os.Exit(3)
			}
		}
		main()
		return
	}
	os.Exit(m.Run())
}

// longTests reports whether the long soak, kill and fuzz runs were asked for.
func longTests() bool { return os.Getenv("HEADROOM_LONG_TESTS") == "1" }

// proc is a headroom subcommand running as a child process.
type proc struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	logs *lockedBuffer
	done chan struct{} // closed when the process has exited
	err  error         // Wait's error; valid after done
}

// startProc starts `headroom args...` with extra environment variables, and
// kills it at the end of the test if it is still running.
func startProc(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: args[0], logs: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(exe, args...)
	p.cmd.Env = append(append(os.Environ(), envRunAsHeadroom+"=1"), env...)
	p.cmd.Stdout = p.logs
	p.cmd.Stderr = p.logs
	dieWithParent(p.cmd)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start headroom %s: %v", args[0], err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and returns the exit code, failing the test if the
// process does not exit within timeout.
func (p *proc) stop(timeout time.Duration) int {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	return p.wait(timeout)
}

func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		// SIGQUIT makes the Go runtime print every goroutine's stack and
		// exit: the log then shows where the process was stuck.
		p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
		p.t.Fatalf("headroom %s did not exit within %v; log, with its stacks at that moment:\n%s", p.name, timeout, p.logs)
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) {
		return exit.ExitCode()
	}
	return 0
}

// waitHealthy waits for GET url/healthz to answer 200, failing fast if the
// process exits first.
func (p *proc) waitHealthy(url string, timeout time.Duration) {
	p.t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for {
		if p.exited() {
			p.t.Fatalf("headroom %s exited (%v) before it was healthy; log:\n%s", p.name, p.err, p.logs)
		}
		if resp, err := client.Get(url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("headroom %s not healthy at %s within %v; log:\n%s", p.name, url, timeout, p.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rssBytes is the process's resident set size, from /proc.
func (p *proc) rssBytes() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", p.pid())
}

// lockedBuffer collects a child's output from two pipes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// httpDo sends one request and returns the status and body; err is set when
// no response arrived.
func httpDo(ctx context.Context, client *http.Client, method, url string, body []byte, header ...string) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, out, nil
}
