package api

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
)

// waitService is a trainer handler with its own registry (to read the
// watcher gauge) and draining channel.
type waitService struct {
	*service
	reg       *prometheus.Registry
	drain     chan struct{}
	published int // publish calls so far: each sends entries of its own
}

func newWaitService(t *testing.T) *waitService {
	return newWaitServiceWith(t, TrainerOptions{})
}

// newWaitServiceWith is newWaitService with opts; its Registry and
// Draining are the service's own.
func newWaitServiceWith(t *testing.T, opts TrainerOptions) *waitService {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "samples.db"), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tr, err := trainer.New(trainer.Config{BundleDir: filepath.Join(dir, "bundles")}, db)
	if err != nil {
		t.Fatal(err)
	}
	s := &waitService{service: &service{db: db, trainer: tr}, reg: prometheus.NewRegistry(), drain: make(chan struct{})}
	opts.Registry, opts.Draining = s.reg, s.drain
	s.trainerH = NewTrainerHandler(tr, db, opts)
	return s
}

func (s *waitService) watchers() float64 {
	mfs, _ := s.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "headroom_bundle_watchers" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// publish ingests samples and retrains, publishing a new bundle version.
func (s *waitService) publish(t *testing.T) {
	t.Helper()
	var es []string
	for i := range 100 {
		// Distinct entries (identical ones count once): each with tokens
		// in flight of its own.
		e := entry(20+float64(i%30), 10+float64(i%30)/10, i%30)
		es = append(es, strings.Replace(e, "{", fmt.Sprintf(`{"prefill_tokens_in_flight":%d,`, s.published*1000+i), 1))
	}
	s.published++
	if w := do(s.trainerH, "POST", "/add_training_data_bulk", `{"entries":[`+strings.Join(es, ",")+`]}`); w.Code != 202 {
		t.Fatalf("ingest: %d %s", w.Code, w.Body)
	}
	if pub, err := s.trainer.Retrain(context.Background()); err != nil || pub == nil {
		t.Fatalf("retrain: %v %v", pub, err)
	}
}

// longPoll starts GET /model/bundle?wait=... and returns its recorder when
// it completes.
func (s *waitService) longPoll(wait, etag string) <-chan *httptest.ResponseRecorder {
	return s.longPollFrom("192.0.2.1:1234", wait, etag)
}

// longPollFrom is longPoll from the client address addr (host:port).
func (s *waitService) longPollFrom(addr, wait, etag string) <-chan *httptest.ResponseRecorder {
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		req := httptest.NewRequest("GET", "http://localhost:8000/model/bundle?wait="+wait, nil)
		req.RemoteAddr = addr
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		w := httptest.NewRecorder()
		s.trainerH.ServeHTTP(w, req)
		done <- w
	}()
	return done
}

func (s *waitService) waitWatching(t *testing.T, n float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for s.watchers() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%v bundle watchers after 20 s, want %v", s.watchers(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func result(t *testing.T, done <-chan *httptest.ResponseRecorder) *httptest.ResponseRecorder {
	t.Helper()
	select {
	case w := <-done:
		return w
	case <-time.After(30 * time.Second):
		t.Fatal("the long poll did not return within 30 s")
		return nil
	}
}

// A held request returns the new bundle as soon as it is published, both
// before the first bundle (no If-None-Match) and after (the client's ETag).
func TestBundleLongPollReturnsOnPublication(t *testing.T) {
	s := newWaitService(t)
	first := s.longPoll("50s", "")
	s.waitWatching(t, 1)
	s.publish(t)
	w := result(t, first)
	etag := w.Header().Get("ETag")
	if w.Code != 200 || etag == "" || w.Header().Get("X-Headroom-Bundle-Version") != "1" {
		t.Fatalf("long poll before the first bundle: %d, ETag %q, version %q", w.Code, etag, w.Header().Get("X-Headroom-Bundle-Version"))
	}

	next := s.longPoll("50s", etag)
	s.waitWatching(t, 1)
	s.publish(t)
	w = result(t, next)
	if w.Code != 200 || w.Header().Get("ETag") == etag || w.Header().Get("X-Headroom-Bundle-Version") != "2" {
		t.Fatalf("long poll with the old ETag: %d, ETag %q (old %q)", w.Code, w.Header().Get("ETag"), etag)
	}
	if s.watchers() != 0 {
		t.Errorf("%v watchers after every poll returned", s.watchers())
	}

	// A client with an old ETag gets the new bundle at once.
	if w := do(s.trainerH, "GET", "/model/bundle?wait=50s", "", "If-None-Match", etag); w.Code != 200 {
		t.Errorf("long poll with a stale ETag: %d, want 200 at once", w.Code)
	}
}

// With nothing published, the wait ends in the answer a plain GET gets:
// 404 before any bundle, 304 with the current ETag.
func TestBundleLongPollTimesOut(t *testing.T) {
	s := newWaitService(t)
	if w := result(t, s.longPoll("20ms", "")); w.Code != 404 {
		t.Fatalf("long poll without a bundle: %d, want 404", w.Code)
	}
	s.publish(t)
	etag := do(s.trainerH, "GET", "/model/bundle", "").Header().Get("ETag")
	if w := result(t, s.longPoll("0.02", etag)); w.Code != 304 || w.Body.Len() != 0 {
		t.Fatalf("long poll with the current ETag: %d with %d bytes, want 304", w.Code, w.Body.Len())
	}
	for _, bad := range []string{"soon", "-1s"} {
		w := do(s.trainerH, "GET", "/model/bundle?wait="+bad, "")
		if w.Code != 422 || !strings.Contains(w.Body.String(), `"loc":["query","wait"]`) {
			t.Errorf("wait=%s: %d %s; want 422 naming the query parameter", bad, w.Code, w.Body)
		}
	}
}

// A server shutting down answers held requests at once, so they do not
// hold the shutdown for its whole grace.
func TestBundleLongPollEndsWhenDraining(t *testing.T) {
	s := newWaitService(t)
	s.publish(t)
	etag := do(s.trainerH, "GET", "/model/bundle", "").Header().Get("ETag")
	held := s.longPoll("50s", etag)
	s.waitWatching(t, 1)
	close(s.drain)
	if w := result(t, held); w.Code != 304 {
		t.Fatalf("held request at shutdown: %d, want 304", w.Code)
	}
	if got := s.watchers(); got != 0 {
		t.Errorf("watchers after shutdown: %v", got)
	}
}

// A trainer whose bundles were wiped starts a new lineage at version 1. A
// predictor's long poll still naming the old lineage's v3 is held until
// that v1 is published, and gets it: a new bundle is one with another
// ETag, not a higher version. Status and info show the new epoch.
func TestBundleLongPollWakesForANewLineage(t *testing.T) {
	old := newWaitService(t)
	for range 3 {
		old.publish(t)
	}
	w := do(old.trainerH, "GET", "/model/bundle", "")
	oldETag, oldEpoch := w.Header().Get("ETag"), w.Header().Get("X-Headroom-Bundle-Epoch")
	if w.Header().Get("X-Headroom-Bundle-Version") != "3" || oldEpoch == "" || oldEpoch != old.trainer.Epoch() {
		t.Fatalf("old lineage: version %q epoch %q (trainer's %q)", w.Header().Get("X-Headroom-Bundle-Version"), oldEpoch, old.trainer.Epoch())
	}

	wiped := newWaitService(t) // another data directory on the same address
	held := wiped.longPoll("50s", oldETag)
	wiped.waitWatching(t, 1)
	wiped.publish(t)
	w = result(t, held)
	epoch := w.Header().Get("X-Headroom-Bundle-Epoch")
	if w.Code != 200 || w.Header().Get("X-Headroom-Bundle-Version") != "1" || epoch == "" || epoch == oldEpoch {
		t.Fatalf("long poll with the old lineage's ETag: %d, version %q, epoch %q (old %q)",
			w.Code, w.Header().Get("X-Headroom-Bundle-Version"), epoch, oldEpoch)
	}
	info := decode(t, do(wiped.trainerH, "GET", "/model/info", ""))
	if info["version"] != 1.0 || info["epoch"] != epoch {
		t.Errorf("/model/info: version %v epoch %v, want 1 and %q", info["version"], info["epoch"], epoch)
	}
	if got := decode(t, do(wiped.trainerH, "GET", "/status", ""))["bundle_epoch"]; got != epoch {
		t.Errorf("/status bundle_epoch %v, want %q", got, epoch)
	}
}

// Held long polls are bounded per client address (whatever its port) and
// in all. Past either bound a long poll is answered at once, 429 or 503,
// with a detail naming the bound, a Retry-After and the connection closed,
// so that refused clients hold no descriptor; a plain GET is never
// refused, and room frees as held polls end.
func TestBundleLongPollsAreBounded(t *testing.T) {
	s := newWaitServiceWith(t, TrainerOptions{MaxBundleWatchers: 3, MaxBundleWatchersPerClient: 2})
	s.publish(t)
	etag := do(s.trainerH, "GET", "/model/bundle", "").Header().Get("ETag")
	held := []<-chan *httptest.ResponseRecorder{
		s.longPollFrom("10.0.0.1:1001", "50s", etag),
		s.longPollFrom("10.0.0.1:1002", "50s", etag),
	}
	s.waitWatching(t, 2)
	refused := func(w *httptest.ResponseRecorder, code int, says string) {
		t.Helper()
		if w.Code != code || !strings.Contains(w.Body.String(), says) || w.Header().Get("Retry-After") == "" ||
			w.Header().Get("Connection") != "close" {
			t.Errorf("refused long poll: %d %s, Retry-After %q, Connection %q; want %d saying %q, a Retry-After and close",
				w.Code, w.Body, w.Header().Get("Retry-After"), w.Header().Get("Connection"), code, says)
		}
	}
	refused(result(t, s.longPollFrom("10.0.0.1:1003", "50s", etag)), 429, "2 long polls from 10.0.0.1")
	if w := do(s.trainerH, "GET", "/model/bundle", "", "If-None-Match", etag); w.Code != 304 {
		t.Errorf("a plain GET beside the held polls: %d, want 304", w.Code)
	}
	held = append(held, s.longPollFrom("10.0.0.2:1001", "50s", etag))
	s.waitWatching(t, 3)
	refused(result(t, s.longPollFrom("10.0.0.3:1001", "50s", etag)), 503, "3 long polls held")

	s.publish(t) // every held poll gets the new bundle; their places are free
	for _, h := range held {
		if w := result(t, h); w.Code != 200 {
			t.Errorf("held poll at publication: %d", w.Code)
		}
	}
	etag = do(s.trainerH, "GET", "/model/bundle", "").Header().Get("ETag")
	again := s.longPollFrom("10.0.0.1:1003", "20ms", etag)
	if w := result(t, again); w.Code != 304 {
		t.Errorf("a long poll once the others ended: %d, want 304 after its wait", w.Code)
	}
}
