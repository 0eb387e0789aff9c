package main

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSIGTERMFinishesInFlightAndClosesStore sends SIGTERM to a trainer in the
// middle of a large upload: the listener closes at once, the upload still
// completes with 202, the process exits 0, and the store is closed cleanly
// (it reopens at once, with every sample of the upload in it).
func TestSIGTERMFinishesInFlightAndClosesStore(t *testing.T) {
	dataDir := t.TempDir()
	addr := freeAddr(t)
	url := "http://" + addr
	p := startProc(t, nil, "trainer", "--data-dir", dataDir, "--trainer-listen", addr, "--no-xgboost",
		"--bucket-capacity", "100000", "--holdout-capacity", "100000", "--retrain-interval", "1h")
	p.waitHealthy(url, 20*time.Second)

	l := newLedger()
	b := l.newBatch(10000, 0)
	pr, pw := io.Pipe()
	req, err := http.NewRequest("POST", url+"/add_training_data_bulk", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(b.body))
	req.Header.Set("Content-Type", "application/json")
	type answer struct {
		status int
		body   []byte
		err    error
	}
	answered := make(chan answer, 1)
	// A connection of its own: the server treats a reused keep-alive
	// connection whose next request it has not read yet as idle, and
	// shutdown closes idle connections at once.
	upload := &http.Client{Transport: &http.Transport{}}
	go func() {
		resp, err := upload.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		answered <- answer{resp.StatusCode, body, err}
	}()

	// Half the body is on the wire (Write returns once the transport has
	// taken it).
	half := len(b.body) / 2
	if _, err := pw.Write(b.body[:half]); err != nil {
		t.Fatal(err)
	}
	// The kernel may hold that half before the server accepts the
	// connection. It accepts in order, so once a request on a later
	// connection is answered the upload's is accepted, and shutdown waits
	// for it.
	later := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	if resp, err := later.Get(url + "/healthz"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	waitFor(t, "the listener to close after SIGTERM", 5*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if p.exited() {
		t.Fatalf("the trainer exited with an upload in flight; log:\n%s", p.logs)
	}
	time.Sleep(200 * time.Millisecond) // the upload trickles on after the signal
	if _, err := pw.Write(b.body[half:]); err != nil {
		t.Fatalf("rest of the upload after SIGTERM: %v", err)
	}
	pw.Close()
	a := <-answered
	if a.err != nil || a.status != http.StatusAccepted {
		t.Fatalf("in-flight upload after SIGTERM: %d %v %.300s", a.status, a.err, a.body)
	}
	if err := l.record(b, a.status, a.body); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM; log:\n%s", code, p.logs)
	}
	took := time.Since(signalled)
	if !strings.Contains(p.logs.String(), "store closed") {
		t.Errorf("no \"store closed\" in the log:\n%s", p.logs)
	}
	// Closed cleanly: the file lock is free at once and nothing is lost.
	opts := durableStoreOptions
	opts.BucketCapacity, opts.HoldoutCapacity = 100000, 100000
	opts.Timeout = 100 * time.Millisecond
	c := l.check(t, filepath.Join(dataDir, "samples.db"), opts)
	if c.AckedFound != len(b.ids) {
		t.Errorf("%d of the %d samples of the in-flight upload are stored", c.AckedFound, len(b.ids))
	}
	t.Logf("SIGTERM mid-upload: %d-byte upload of %d samples finished with 202, exit 0 %v after the signal, all %d stored",
		len(b.body), len(b.ids), took.Round(time.Millisecond), c.AckedFound)
}
