package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
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
	stored := func() int { c := db.Counts(); return c.Train(features.TTFT) + c.Holdout(features.TTFT) }
	handler := func(wait time.Duration) (http.Handler, *prometheus.Registry) {
		o := opts
		o.Registry, o.IngestWait = prometheus.NewRegistry(), wait
		return NewTrainerHandler(tr, db, o), o.Registry
	}
	// hold starts an upload that holds the room while its body trickles in,
	// and returns once the handler has it (it is reading the body); finish
	// sends the rest and returns the response.
	hold := func(h http.Handler, id int) (finish func() *httptest.ResponseRecorder) {
		pr, pw := io.Pipe()
		slow := httptest.NewRequest("POST", "/add_training_data_bulk", pr)
		slow.Header.Set("Content-Type", "application/json")
		done := make(chan *httptest.ResponseRecorder)
		go func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, slow)
			done <- w
		}()
		if _, err := io.WriteString(pw, `{"entries":[`+entry(float64(id), 0, id)); err != nil {
			t.Fatal(err)
		}
		return func() *httptest.ResponseRecorder {
			io.WriteString(pw, `]}`)
			pw.Close()
			return <-done
		}
	}

	// Refused: no room frees up within the wait.
	const wait = 150 * time.Millisecond
	h, reg := handler(wait)
	finish := hold(h, 1)
	start := time.Now()
	w := do(h, "POST", "/add_training_data_bulk", `{"entries":[`+entry(41, 0, 2)+`]}`)
	waited := time.Since(start)
	if w.Code != 503 || w.Header().Get("Retry-After") == "" || !strings.Contains(decode(t, w)["detail"].(string), "concurrent") {
		t.Fatalf("upload over the limit: %d %v %s; want 503 with Retry-After and a detail", w.Code, w.Header(), w.Body)
	}
	if waited < wait {
		t.Errorf("refused after %v, before the %v wait", waited, wait)
	}
	if got := metricValue(t, reg, "headroom_ingest_shed_total"); got != 1 {
		t.Errorf("headroom_ingest_shed_total = %v, want 1", got)
	}
	// Routes other than ingest are not limited.
	if w := do(h, "GET", "/data/status", ""); w.Code != 200 {
		t.Errorf("/data/status while ingest is full: %d", w.Code)
	}
	if w := finish(); w.Code != 202 {
		t.Fatalf("the upload holding the room: %d %s", w.Code, w.Body)
	}

	// Admitted: a waiting upload gets the room as soon as it frees. The
	// wait is far longer than the test, so nothing but the release can
	// end it, however slow the machine; the release comes only once the
	// upload is seen waiting.
	h, reg = handler(time.Hour)
	finish = hold(h, 3)
	waiting := make(chan *httptest.ResponseRecorder)
	go func() { waiting <- do(h, "POST", "/samples", entry(42, 0, 4)) }()
	waitUntil(t, "the second upload queued behind the first", func() bool {
		return metricValue(t, reg, "headroom_ingest_waiting") == 1
	})
	if w := finish(); w.Code != 202 {
		t.Fatalf("the upload holding the room: %d %s", w.Code, w.Body)
	}
	if w := <-waiting; w.Code != 202 {
		t.Fatalf("the upload waiting for the room: %d %s", w.Code, w.Body)
	}
	if got := metricValue(t, reg, "headroom_ingest_waiting"); got != 0 {
		t.Errorf("headroom_ingest_waiting = %v after admission, want 0", got)
	}
	if n := stored(); n != 3 {
		t.Errorf("store holds %d TTFT samples, want 3 (the refused upload's must be absent)", n)
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
		waitUntil(t, fmt.Sprintf("%d uploads queued", want), func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			return len(l.queue) == want
		})
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

// metricValue reads an unlabelled counter or gauge from reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			m := f.GetMetric()[0]
			if m.Gauge != nil {
				return m.Gauge.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// waitUntil polls cond, which reads state another goroutine changes, until
// it holds; what names the state for the failure after 10 s (a bound on a
// hang, not a timing assertion).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("not reached in 10 s: %s", what)
		}
	}
}
