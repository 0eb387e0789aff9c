package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/headroomhq/headroom/internal/tmpfs"
)

// fillDisk writes a ballast file in dir until the file system is full.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	// A last, smaller write takes the space left below one chunk.
	for n := len(chunk) / 2; n >= 512; n /= 2 {
		f.Write(chunk[:n])
	}
	return path
}

// bundleVersion is the version of the bundle the trainer serves, 0 if none.
func bundleVersion(url string) uint64 {
	resp, err := http.Get(url + "/model/bundle")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	v, _ := strconv.ParseUint(resp.Header.Get("X-Headroom-Bundle-Version"), 10, 64)
	return v
}

// metricValue reads one unlabelled sample of a Prometheus text exposition.
func metricValue(url, name string) float64 {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return -1
}

// ingestUntilRefused posts large batches until one is refused, and returns
// that answer; every answer goes into the ledger.
func ingestUntilRefused(t *testing.T, l *ledger, url string, size, attempts int) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	for range attempts {
		b := l.newBatch(size, 0)
		status, body, err := httpDo(context.Background(), client, "POST", url+"/add_training_data_bulk", b.body)
		if err != nil {
			t.Fatalf("ingest on a full disk: no answer: %v", err)
		}
		if err := l.record(b, status, body); err != nil {
			t.Fatal(err)
		}
		if status != http.StatusAccepted {
			return status, string(body)
		}
	}
	t.Fatalf("%d uploads of %d samples all acknowledged on a full disk", attempts, size)
	return 0, ""
}

func mustIngest(t *testing.T, l *ledger, url string, n int) {
	t.Helper()
	b := l.newBatch(n, 0)
	status, err := l.post(context.Background(), http.DefaultClient, url, b)
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("ingest of %d samples: status %d, %v", n, status, err)
	}
}

// TestDiskFull fills the disk under a running trainer. Ingest must answer an
// error, never 202, for what it could not make durable, and lose nothing it
// acknowledged; a bundle that cannot be written must leave the previous one
// in service and on disk, and be retried when space returns.
func TestDiskFull(t *testing.T) {
	t.Run("tmpfs full (ENOSPC)", func(t *testing.T) {
		dataDir := tmpfs.Mount(t, 8<<20)
		addr := freeAddr(t)
		url := "http://" + addr
		// Retrains 1 s apart leave time to fill the disk between two.
		p := startProc(t, nil, durableTrainerArgs(dataDir, addr, "--no-xgboost", "--retrain-interval", "1s",
			"--log-level", "info")...)
		p.waitHealthy(url, 20*time.Second)
		l := newLedger()
		mustIngest(t, l, url, 500)
		waitFor(t, "the first bundle", 10*time.Second, func() bool { return bundleVersion(url) == 1 })

		// New samples, then a full disk before the next retrain: that
		// retrain cannot write its bundle.
		mustIngest(t, l, url, 200)
		ballast := fillDisk(t, dataDir)
		waitFor(t, "a failed bundle write", 10*time.Second, func() bool {
			return metricValue(url, "headroom_bundle_publish_failures_total") >= 1
		})
		if v := bundleVersion(url); v != 1 {
			t.Errorf("serving bundle %d after a failed write, want 1", v)
		}
		var status struct {
			Training map[string]struct {
				LastError string `json:"last_error"`
			} `json:"training"`
		}
		if _, err := getJSON(url+"/status", &status); err != nil || !strings.Contains(status.Training["ttft"].LastError, "no space left") {
			t.Errorf("/status does not report the failed write: %+v %v", status, err)
		}
		if !strings.Contains(p.logs.String(), "no space left") {
			t.Errorf("the log does not report the failed write:\n%s", p.logs)
		}
		bundles := filepath.Join(dataDir, "bundles")
		if newest, tmp := checkBundleDir(t, bundles, 1); newest != 1 || tmp != 0 {
			t.Errorf("bundle directory on a full disk: newest %d, %d temporary files; want 1 and none", newest, tmp)
		}

		code, detail := ingestUntilRefused(t, l, url, 3000, 20)
		if code != http.StatusInsufficientStorage || !strings.Contains(detail, "no space left") {
			t.Errorf("ingest on a full disk: %d %s; want 507 naming the cause", code, detail)
		}
		if code, _ := getJSON(url+"/healthz", nil); code != 200 {
			t.Errorf("/healthz on a full disk: %d", code)
		}

		// Space returns: the bundle is written without waiting for new
		// samples, and ingest works again.
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the bundle retried after space returned", 10*time.Second, func() bool { return bundleVersion(url) >= 2 })
		mustIngest(t, l, url, 300)
		if code := p.stop(20 * time.Second); code != 0 {
			t.Fatalf("exit %d; log:\n%s", code, p.logs)
		}
		checkBundleDir(t, bundles, 2)
		c := l.check(t, filepath.Join(dataDir, "samples.db"), durableStoreOptions)
		t.Logf("ENOSPC: %d samples acknowledged, %d found; %d refused with %d, none found; bundle write failed and kept v1, v2 written after space returned",
			c.Acked, c.AckedFound, c.Refused, code)
	})

	t.Run("file size limit (EFBIG)", func(t *testing.T) {
		dataDir := t.TempDir()
		addr := freeAddr(t)
		url := "http://" + addr
		const limit = 2 << 20
		p := startProc(t, []string{fmt.Sprintf("%s=%d", envFileSizeLimit, limit)},
			durableTrainerArgs(dataDir, addr, "--no-xgboost", "--retrain-interval", "1h")...)
		p.waitHealthy(url, 20*time.Second)
		l := newLedger()
		mustIngest(t, l, url, 100)
		code, detail := ingestUntilRefused(t, l, url, 3000, 40)
		if code != http.StatusInsufficientStorage || !strings.Contains(detail, "too large") {
			t.Errorf("ingest past the file size limit: %d %s; want 507 naming the cause", code, detail)
		}
		if code, _ := getJSON(url+"/healthz", nil); code != 200 {
			t.Errorf("/healthz at the file size limit: %d", code)
		}
		if code := p.stop(20 * time.Second); code != 0 {
			t.Fatalf("exit %d at the file size limit; log:\n%s", code, p.logs)
		}
		// Restarted without the limit, it opens the same file and goes on.
		p = startProc(t, nil, durableTrainerArgs(dataDir, addr, "--no-xgboost", "--retrain-interval", "1h")...)
		p.waitHealthy(url, 20*time.Second)
		mustIngest(t, l, url, 3000)
		if code := p.stop(20 * time.Second); code != 0 {
			t.Fatalf("exit %d; log:\n%s", code, p.logs)
		}
		c := l.check(t, filepath.Join(dataDir, "samples.db"), durableStoreOptions)
		t.Logf("EFBIG: %d samples acknowledged, %d found; %d refused, none found", c.Acked, c.AckedFound, c.Refused)
	})
}
