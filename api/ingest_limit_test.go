package api

import (
	"context"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
)

// An upload over the concurrent-ingest limits, by count or by body bytes,
// waits for room, gets 503 when none frees up in time, stores nothing, and
// the room comes back when the upload holding it ends. The upload holding it
// sends no Content-Length, so it reserves the largest body accepted.
func TestConcurrentIngestLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts TrainerOptions
	}{
		{"count", TrainerOptions{MaxConcurrentIngest: 1}},
		{"bytes", TrainerOptions{MaxIngestBytes: 4096, Limits: Limits{MaxBodyBytes: 4096}}},
	} {
		t.Run(tc.name, func(t *testing.T) { testConcurrentIngestLimit(t, tc.opts) })
	}
}

func testConcurrentIngestLimit(t *testing.T, opts TrainerOptions) {
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "samples.db"), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tr, err := trainer.New(trainer.Config{}, db)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	const wait = 150 * time.Millisecond
	opts.Registry, opts.IngestWait = reg, wait
	h := NewTrainerHandler(tr, db, opts)
	stored := func() int { c := db.Counts(); return c.Train(features.TTFT) + c.Holdout(features.TTFT) }

	// The first upload holds the room while its body trickles in.
	pr, pw := io.Pipe()
	slow := httptest.NewRequest("POST", "/add_training_data_bulk", pr)
	slow.Header.Set("Content-Type", "application/json")
	slowDone := make(chan *httptest.ResponseRecorder)
	go func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, slow)
		slowDone <- w
	}()
	if _, err := io.WriteString(pw, `{"entries":[`+entry(40, 0, 1)); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	w := do(h, "POST", "/add_training_data_bulk", `{"entries":[`+entry(41, 0, 2)+`]}`)
	waited := time.Since(start)
	if w.Code != 503 || w.Header().Get("Retry-After") == "" || !strings.Contains(decode(t, w)["detail"].(string), "concurrent") {
		t.Fatalf("upload over the limit: %d %v %s; want 503 with Retry-After and a detail", w.Code, w.Header(), w.Body)
	}
	if waited < wait {
		t.Errorf("refused after %v, before the %v wait", waited, wait)
	}
	if got := counterValue(t, reg, "headroom_ingest_shed_total"); got != 1 {
		t.Errorf("headroom_ingest_shed_total = %v, want 1", got)
	}
	// Routes other than ingest are not limited.
	if w := do(h, "GET", "/data/status", ""); w.Code != 200 {
		t.Errorf("/data/status while ingest is full: %d", w.Code)
	}

	// A waiting upload gets the room as soon as it frees.
	waiting := make(chan *httptest.ResponseRecorder)
	go func() { waiting <- do(h, "POST", "/samples", entry(42, 0, 3)) }()
	time.Sleep(wait / 3)
	io.WriteString(pw, `]}`)
	pw.Close()
	if w := <-slowDone; w.Code != 202 {
		t.Fatalf("the upload holding the room: %d %s", w.Code, w.Body)
	}
	if w := <-waiting; w.Code != 202 {
		t.Fatalf("the upload waiting for the room: %d %s", w.Code, w.Body)
	}
	if n := stored(); n != 2 {
		t.Errorf("store holds %d TTFT samples, want 2 (the refused upload's must be absent)", n)
	}
}

// The limiter admits by count and by bytes, first come first served: a
// small upload does not overtake a large one waiting, and a waiter that
// gives up lets those behind it in.
func TestIngestLimiterOrder(t *testing.T) {
	l := newIngestLimiter(3, 100, time.Second, prometheus.NewRegistry())
	granted := func(ctx context.Context, n int64) <-chan bool {
		c := make(chan bool, 1)
		go func() { _, ok := l.reserve(ctx, n); c <- ok }()
		return c
	}
	queued := func(want int) { // waits until want uploads are queued
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			l.mu.Lock()
			n := len(l.queue)
			l.mu.Unlock()
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d waiting, want %d", n, want)
			}
		}
	}
	result := func(c <-chan bool) bool {
		t.Helper()
		select {
		case ok := <-c:
			return ok
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter was neither admitted nor refused")
			return false
		}
	}

	if n, ok := l.reserve(context.Background(), 500); !ok || n != 100 {
		t.Fatalf("idle limiter: reserved %d, %v; want all 100 bytes (clamped)", n, ok)
	}
	l.free(100)
	if _, ok := l.reserve(context.Background(), 60); !ok {
		t.Fatal("60 of 100 bytes refused")
	}
	bigCtx, giveUp := context.WithCancel(context.Background())
	big := granted(bigCtx, 60) // does not fit beside the first
	queued(1)
	small := granted(context.Background(), 10) // would fit, but queues behind big
	queued(2)
	giveUp()
	if result(big) {
		t.Fatal("the waiter that gave up was admitted")
	}
	if !result(small) {
		t.Fatal("the waiter behind the one that gave up was not admitted")
	}
	queued(0)

	// Count: 60 and 10 bytes held by two uploads; a third fits, a fourth waits.
	if _, ok := l.reserve(context.Background(), 1); !ok {
		t.Fatal("third upload refused")
	}
	fourth := granted(context.Background(), 1)
	queued(1)
	l.free(60)
	if !result(fourth) {
		t.Fatal("the fourth upload was not admitted when one ended")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.uploads != 3 || l.bytes != 12 {
		t.Errorf("holding %d uploads, %d bytes; want 3 and 12", l.uploads, l.bytes)
	}
}

// counterValue reads an unlabelled counter from reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("counter %s not registered", name)
	return 0
}
