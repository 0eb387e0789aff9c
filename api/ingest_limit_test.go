package api

import (
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

// An upload over the concurrent-ingest limit waits for a slot, gets 503 when
// none frees up in time, stores nothing, and the slot comes back when the
// upload holding it ends.
func TestConcurrentIngestLimit(t *testing.T) {
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
	h := NewTrainerHandler(tr, db, TrainerOptions{Registry: reg, MaxConcurrentIngest: 1, IngestWait: wait})
	stored := func() int { c := db.Counts(); return c.Train(features.TTFT) + c.Holdout(features.TTFT) }

	// The first upload holds the only slot while its body trickles in.
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

	// A waiting upload gets the slot as soon as it frees.
	waiting := make(chan *httptest.ResponseRecorder)
	go func() { waiting <- do(h, "POST", "/samples", entry(42, 0, 3)) }()
	time.Sleep(wait / 3)
	io.WriteString(pw, `]}`)
	pw.Close()
	if w := <-slowDone; w.Code != 202 {
		t.Fatalf("the upload holding the slot: %d %s", w.Code, w.Body)
	}
	if w := <-waiting; w.Code != 202 {
		t.Fatalf("the upload waiting for the slot: %d %s", w.Code, w.Body)
	}
	if n := stored(); n != 2 {
		t.Errorf("store holds %d TTFT samples, want 2 (the refused upload's must be absent)", n)
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
