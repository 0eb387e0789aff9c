package predictor

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/headroomhq/headroom/model"
)

// fakeTrainer serves a settable bundle on BundlePath with ETag support.
type fakeTrainer struct {
	mu       sync.Mutex
	pub      *model.Published
	body     []byte // overrides pub.Encoded when set
	down     bool
	requests atomic.Int32
	fullGets atomic.Int32
}

func (f *fakeTrainer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.down:
		http.Error(w, `{"detail":"down"}`, http.StatusServiceUnavailable)
	case r.URL.Path != BundlePath:
		http.NotFound(w, r)
	case f.pub == nil:
		http.Error(w, `{"detail":"no bundle published yet"}`, http.StatusNotFound)
	case r.Header.Get("If-None-Match") == f.pub.ETag():
		w.WriteHeader(http.StatusNotModified)
	default:
		f.fullGets.Add(1)
		w.Header().Set("ETag", f.pub.ETag())
		body := f.pub.Encoded
		if f.body != nil {
			body = f.body
		}
		w.Write(body)
	}
}

func (f *fakeTrainer) set(pub *model.Published, body []byte, down bool) {
	f.mu.Lock()
	f.pub, f.body, f.down = pub, body, down
	f.mu.Unlock()
}

func newSyncer(t *testing.T, url string) (*Syncer, *Metrics, *prometheus.Registry) {
	p, _ := New(Mean, 0.9)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	return &Syncer{TrainerURL: url, Predictor: p, Metrics: m, SaveDir: filepath.Join(t.TempDir(), "saved")}, m, reg
}

// The same whether bundles load at the process's priority or on a niced
// thread of their own (Syncer.Nice).
func TestSyncFetchesOnlyWhenChanged(t *testing.T) {
	for _, nice := range []int{0, 12} {
		t.Run(fmt.Sprintf("nice %d", nice), func(t *testing.T) { testSyncFetchesOnlyWhenChanged(t, nice) })
	}
}

func testSyncFetchesOnlyWhenChanged(t *testing.T, nice int) {
	ft := &fakeTrainer{}
	srv := httptest.NewServer(ft)
	defer srv.Close()
	s, m, _ := newSyncer(t, srv.URL)
	s.Nice = nice
	ctx := context.Background()

	if changed, err := s.SyncOnce(ctx); changed || err != nil || s.Predictor.Ready() {
		t.Fatalf("trainer without a bundle: changed=%v err=%v ready=%v", changed, err, s.Predictor.Ready())
	}
	ft.set(testPublished(t, 1, 100), nil, false)
	if changed, err := s.SyncOnce(ctx); !changed || err != nil {
		t.Fatalf("first bundle: changed=%v err=%v", changed, err)
	}
	for i := 0; i < 3; i++ {
		if changed, err := s.SyncOnce(ctx); changed || err != nil {
			t.Fatalf("unchanged bundle: changed=%v err=%v", changed, err)
		}
	}
	if n := ft.fullGets.Load(); n != 1 {
		t.Errorf("%d full downloads for one bundle; If-None-Match should make the rest 304", n)
	}
	if got := testutil.ToFloat64(m.syncs.WithLabelValues("not_modified")); got != 3 {
		t.Errorf("not_modified syncs %v, want 3", got)
	}
	ft.set(testPublished(t, 2, 100), nil, false)
	if changed, _ := s.SyncOnce(ctx); !changed {
		t.Fatal("new version not fetched")
	}
	if pub, _ := s.Predictor.Current(); pub.Bundle.Version != 2 {
		t.Fatalf("serving version %d, want 2", pub.Bundle.Version)
	}
	// A restarted predictor serves the saved copy before the trainer answers.
	p2, _ := New(Mean, 0.9)
	if pub, err := LoadDir(p2, s.SaveDir, nil); err != nil || pub == nil || pub.Bundle.Version != 2 {
		t.Fatalf("saved bundle: %v, %v", pub, err)
	}
}

func TestSyncKeepsServingWhenTrainerIsDownOrBad(t *testing.T) {
	ft := &fakeTrainer{}
	srv := httptest.NewServer(ft)
	defer srv.Close()
	s, m, _ := newSyncer(t, srv.URL)
	ctx := context.Background()
	good := testPublished(t, 1, 100)
	ft.set(good, nil, false)
	if _, err := s.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}

	ft.set(testPublished(t, 2, 100), nil, true) // trainer answering 503
	if _, err := s.SyncOnce(ctx); err == nil {
		t.Error("a 503 from the trainer was not reported")
	}
	corrupt := testPublished(t, 3, 100)
	ft.set(corrupt, bytes.Replace(corrupt.Encoded, []byte(`"intercept":100`), []byte(`"intercept":1`), 1), false)
	if _, err := s.SyncOnce(ctx); err == nil {
		t.Error("a bundle failing its checksum was accepted")
	}
	if got := testutil.ToFloat64(m.syncs.WithLabelValues("refused")); got != 1 {
		t.Errorf("refused syncs %v, want 1", got)
	}
	srv.Close() // trainer gone entirely
	if _, err := s.SyncOnce(ctx); err == nil {
		t.Error("an unreachable trainer was not reported")
	}
	if pub, _ := s.Predictor.Current(); pub.Bundle.Checksum != good.Bundle.Checksum {
		t.Fatal("the predictor stopped serving its last good bundle")
	}
}

func TestSyncRequiresSignatureWhenKeyed(t *testing.T) {
	ft := &fakeTrainer{}
	srv := httptest.NewServer(ft)
	defer srv.Close()
	s, _, _ := newSyncer(t, srv.URL)
	s.SigningKey = []byte("shared-secret-0123456789")
	ft.set(testPublished(t, 1, 100), nil, false) // unsigned
	if _, err := s.SyncOnce(context.Background()); err == nil || s.Predictor.Ready() {
		t.Fatalf("unsigned bundle accepted by a keyed predictor: %v", err)
	}
	b := testPublished(t, 2, 100).Bundle
	data, _ := b.Encode(s.SigningKey)
	ft.set(&model.Published{Bundle: b, Encoded: data}, nil, false)
	if _, err := s.SyncOnce(context.Background()); err != nil || !s.Predictor.Ready() {
		t.Fatalf("signed bundle refused: %v", err)
	}
}

func TestRunPollsUntilCancelled(t *testing.T) {
	ft := &fakeTrainer{}
	ft.set(testPublished(t, 1, 100), nil, false)
	srv := httptest.NewServer(ft)
	defer srv.Close()
	s, _, _ := newSyncer(t, srv.URL)
	s.Interval = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for ft.requests.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not stop on cancellation")
	}
	if !s.Predictor.Ready() || ft.requests.Load() < 3 {
		t.Fatalf("ready=%v after %d polls", s.Predictor.Ready(), ft.requests.Load())
	}
}
