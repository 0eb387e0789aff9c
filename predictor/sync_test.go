package predictor

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/internal/polltest"
)

// fakeTrainer serves a settable bundle on BundlePath with ETag support.
type fakeTrainer struct {
	mu       sync.Mutex
	pub      *bundle.Published
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

func (f *fakeTrainer) set(pub *bundle.Published, body []byte, down bool) {
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
	data, _ := bundle.Encode(b, s.SigningKey)
	ft.set(&bundle.Published{Bundle: b, Encoded: data}, nil, false)
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

// holdingTrainer answers long polls (?wait=) as the trainer does: a request
// whose If-None-Match names the bundle in service, or that comes before the
// first bundle, is held until the bundle changes or the wait has passed.
type holdingTrainer struct {
	mu       sync.Mutex
	pub      *bundle.Published
	changed  chan struct{} // closed and replaced by set
	held     atomic.Int32  // requests being held now
	requests atomic.Int32
	woken    atomic.Int32 // held requests answered with a new bundle
}

func newHoldingTrainer() *holdingTrainer { return &holdingTrainer{changed: make(chan struct{})} }

func (f *holdingTrainer) set(pub *bundle.Published) {
	f.mu.Lock()
	f.pub = pub
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *holdingTrainer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	wait, _ := time.ParseDuration(r.URL.Query().Get("wait"))
	expired := time.After(wait)
	for waited := false; ; waited = true {
		f.mu.Lock()
		pub, changed := f.pub, f.changed
		f.mu.Unlock()
		if pub != nil && r.Header.Get("If-None-Match") != pub.ETag() {
			if waited {
				f.woken.Add(1)
			}
			w.Header().Set("ETag", pub.ETag())
			w.Write(pub.Encoded)
			return
		}
		if wait <= 0 {
			break
		}
		f.held.Add(1)
		select {
		case <-changed:
			f.held.Add(-1)
			continue
		case <-expired:
		case <-r.Context().Done():
		}
		f.held.Add(-1)
		break
	}
	f.mu.Lock()
	pub := f.pub
	f.mu.Unlock()
	if pub == nil {
		http.Error(w, `{"detail":"no bundle published yet"}`, http.StatusNotFound)
		return
	}
	w.WriteHeader(http.StatusNotModified)
}

// runSyncer runs s until the test ends.
func runSyncer(t *testing.T, s *Syncer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not stop within 10 s of cancellation")
		}
	})
}

func serving(p *Predictor) uint64 {
	if pub, _ := p.Current(); pub != nil {
		return pub.Bundle.Version
	}
	return 0
}

// With the periodic poll an hour away, every bundle arrives through the
// long poll: the first one the trainer publishes, and each next one.
func TestSyncLongPollDeliversEachNewBundle(t *testing.T) {
	ft := newHoldingTrainer()
	srv := httptest.NewServer(ft)
	defer srv.Close()
	s, _, _ := newSyncer(t, srv.URL)
	s.Interval = time.Hour
	runSyncer(t, s)
	for v := uint64(1); v <= 3; v++ {
		polltest.Until(t, "long poll held by the trainer", 20*time.Second, func() bool { return ft.held.Load() == 1 })
		ft.set(testPublished(t, v, float64(100*v)))
		polltest.Until(t, fmt.Sprintf("version %d in service", v), 20*time.Second, func() bool { return serving(s.Predictor) == v })
	}
	if n := ft.requests.Load(); n > 10 {
		t.Errorf("%d requests for 3 bundles; want the first poll and one long poll per bundle", n)
	}
}

// A trainer that answers at once (an older release, or one shutting down)
// does not turn the long poll into a busy loop: it backs off, and the
// periodic poll keeps the bundle current. A busy loop would send thousands
// of requests in the second measured.
func TestSyncLongPollBacksOffFromATrainerThatDoesNotHold(t *testing.T) {
	ft := &fakeTrainer{}
	ft.set(testPublished(t, 1, 100), nil, false)
	srv := httptest.NewServer(ft)
	defer srv.Close()
	s, _, _ := newSyncer(t, srv.URL)
	s.Interval = time.Hour
	runSyncer(t, s)
	polltest.Until(t, "the first bundle", 20*time.Second, func() bool { return serving(s.Predictor) == 1 })
	start := ft.requests.Load()
	time.Sleep(time.Second)
	if n := ft.requests.Load() - start; n > 10 {
		t.Errorf("%d long polls in 1 s against a trainer that does not hold them; want a few, backing off", n)
	}
}

// A trainer that refuses long polls for its bounds (429 or 503 with a
// Retry-After) is asked again when it says, not in the error backoff's
// second: a refused fleet of predictors must not hammer it. Each refusal
// is counted as busy.
func TestSyncLongPollWaitsWhenTheTrainerIsBusy(t *testing.T) {
	var longPolls atomic.Int32
	pub := testPublished(t, 1, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("wait") != "" {
			longPolls.Add(1)
			w.Header().Set("Retry-After", "3")
			http.Error(w, `{"detail":"16 long polls from 127.0.0.1 are held"}`, http.StatusTooManyRequests)
			return
		}
		if r.Header.Get("If-None-Match") == pub.ETag() {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", pub.ETag())
		w.Write(pub.Encoded)
	}))
	defer srv.Close()
	s, m, _ := newSyncer(t, srv.URL)
	s.Interval = time.Hour
	runSyncer(t, s)
	polltest.Until(t, "the first bundle, by the periodic poll", 20*time.Second, func() bool { return serving(s.Predictor) == 1 })
	polltest.Until(t, "a refused long poll", 20*time.Second, func() bool { return longPolls.Load() >= 1 })
	time.Sleep(1500 * time.Millisecond)
	if n := longPolls.Load(); n > 1 {
		t.Errorf("%d long polls within 1.5 s of a refusal saying Retry-After: 3; want 1", n)
	}
	if got := testutil.ToFloat64(m.syncs.WithLabelValues("busy")); got < 1 {
		t.Errorf("busy syncs counted: %v, want at least 1", got)
	}
}

// A trainer whose bundles were wiped comes back on the same address and
// publishes version 1 of a new lineage. The predictor, serving version 3 of
// the old one, gets it through the long poll it holds (the periodic poll is
// an hour away), counts the change, and keeps only the new lineage on disk,
// so that a restart does not bring the old one back. An older version of
// the new lineage is then refused, and counted as stale.
func TestSyncFollowsATrainerWhoseBundlesWereWiped(t *testing.T) {
	ft := newHoldingTrainer()
	srv := httptest.NewServer(ft)
	defer srv.Close()
	s, m, _ := newSyncer(t, srv.URL)
	s.Interval = time.Hour
	runSyncer(t, s)
	for v := uint64(1); v <= 3; v++ {
		polltest.Until(t, "long poll held by the trainer", 20*time.Second, func() bool { return ft.held.Load() == 1 })
		ft.set(lineagePublished(t, "old", v, float64(100*v)))
		polltest.Until(t, fmt.Sprintf("version %d in service", v), 20*time.Second, func() bool { return serving(s.Predictor) == v })
	}

	polltest.Until(t, "long poll held by the trainer", 20*time.Second, func() bool { return ft.held.Load() == 1 })
	woken := ft.woken.Load()
	ft.set(lineagePublished(t, "new", 1, 500))
	polltest.Until(t, "the new lineage's version 1 in service", 20*time.Second, func() bool {
		cur, _ := s.Predictor.Current()
		return cur.Bundle.Epoch == "new"
	})
	if n := ft.woken.Load() - woken; n != 1 {
		t.Errorf("%d held polls answered with the new lineage's v1; want it delivered by the poll already held", n)
	}
	// The sync counts a bundle after putting it in service: wait for the
	// count, then hold it and the gauge to their values.
	polltest.Until(t, "the new lineage counted", 20*time.Second, func() bool { return testutil.ToFloat64(m.epochChanges) >= 1 })
	if got := testutil.ToFloat64(m.epochChanges); got != 1 {
		t.Errorf("epoch changes counted: %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.bundleVersion); got != 1 {
		t.Errorf("bundle version gauge %v, want 1", got)
	}
	// The copy is saved after the swap: wait for it.
	saved := func(want ...uint64) func() bool {
		return func() bool { vs, _ := bundle.Versions(s.SaveDir); return slices.Equal(vs, want) }
	}
	polltest.Until(t, "only the new lineage's v1 saved", 20*time.Second, saved(1))
	restarted, _ := New(Mean, 0.9)
	if pub, err := LoadDir(restarted, s.SaveDir, nil); err != nil || pub == nil || pub.Bundle.Epoch != "new" {
		t.Fatalf("a restarted predictor loads %v, %v; want the new lineage", pub != nil && pub.Bundle.Epoch == "new", err)
	}

	ft.set(lineagePublished(t, "new", 2, 600))
	polltest.Until(t, "version 2 of the new lineage", 20*time.Second, func() bool { return serving(s.Predictor) == 2 })
	polltest.Until(t, "v2 and v1 saved", 20*time.Second, saved(2, 1))
	ft.set(lineagePublished(t, "new", 1, 500)) // a stale answer of the same lineage
	if _, err := s.SyncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if cur, _ := s.Predictor.Current(); cur.Bundle.Epoch != "new" || cur.Bundle.Version != 2 {
		t.Errorf("after an older version of the lineage in service: serving %q v%d, want new v2", cur.Bundle.Epoch, cur.Bundle.Version)
	}
	if got := testutil.ToFloat64(m.syncs.WithLabelValues("stale")); got < 1 {
		t.Errorf("stale syncs %v, want at least 1", got)
	}
	if got := testutil.ToFloat64(m.epochChanges); got != 1 {
		t.Errorf("epoch changes counted: %v, want still 1", got)
	}
}

// madePublished is a bundle of lineage epoch at version, made at made.
func madePublished(t testing.TB, epoch string, version uint64, made time.Time) *bundle.Published {
	t.Helper()
	b := testPublished(t, version, float64(version)).Bundle
	b.Epoch, b.CreatedAt = epoch, made
	data, err := bundle.Encode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle.Published{Bundle: b, Encoded: data}
}

// Bundles are current, not only genuine. A predictor serving lineage B
// refuses a replay of the lineage B replaced (genuine, of a higher
// version) and a bundle from the future, counts each, and leaves the
// copies of B on disk, so a restart serves B too. Only an operator's
// reload with accept_older takes the older bundle, and then keeps only it.
// Before: any other lineage was taken and the newer one's copies deleted,
// so one replay rolled every predictor back across restarts (issue 26).
func TestSyncRefusesAnOlderLineageUnlessTheOperatorSaysSo(t *testing.T) {
	now := time.Now().UTC()
	old := bundle.NewEpoch(now.Add(-3 * time.Hour))
	current := bundle.NewEpoch(now.Add(-10 * time.Minute))
	ft := &fakeTrainer{}
	srv := httptest.NewServer(ft)
	defer srv.Close()
	s, m, _ := newSyncer(t, srv.URL)
	sync := func() {
		t.Helper()
		if _, err := s.SyncOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	serving := func(epoch string, v uint64) {
		t.Helper()
		if cur, _ := s.Predictor.Current(); cur == nil || cur.Bundle.Epoch != epoch || cur.Bundle.Version != v {
			t.Fatalf("serving %v, want %s v%d", cur != nil, epoch, v)
		}
	}
	saved := func(want ...uint64) {
		t.Helper()
		if vs, _ := bundle.Versions(s.SaveDir); !slices.Equal(vs, want) {
			t.Fatalf("saved versions %v, want %v", vs, want)
		}
	}
	restartServes := func(epoch string, v uint64) {
		t.Helper()
		p, _ := New(Mean, 0.9)
		pub, err := LoadDir(p, s.SaveDir, nil)
		if err != nil || pub == nil || pub.Bundle.Epoch != epoch || pub.Bundle.Version != v {
			t.Fatalf("a restarted predictor loads %+v, %v; want %s v%d", pub, err, epoch, v)
		}
	}

	ft.set(madePublished(t, current, 2, now.Add(-5*time.Minute)), nil, false)
	sync()
	serving(current, 2)
	saved(2)

	ft.set(madePublished(t, old, 57, now.Add(-2*time.Hour)), nil, false) // the replay
	sync()
	serving(current, 2)
	saved(2)
	restartServes(current, 2)
	if got := testutil.ToFloat64(m.syncs.WithLabelValues("older_lineage")); got != 1 {
		t.Errorf("older_lineage syncs %v, want 1", got)
	}

	ft.set(madePublished(t, bundle.NewEpoch(now.Add(time.Hour)), 1, now.Add(time.Hour)), nil, false) // a forged future
	sync()
	serving(current, 2)
	if got := testutil.ToFloat64(m.syncs.WithLabelValues("future")); got != 1 {
		t.Errorf("future syncs %v, want 1", got)
	}

	ft.set(madePublished(t, old, 57, now.Add(-2*time.Hour)), nil, false)
	if swapped, err := s.Reload(context.Background(), true); err != nil || !swapped {
		t.Fatalf("reload accepting older: %v, %v", swapped, err)
	}
	serving(old, 57)
	saved(57)
	restartServes(old, 57)
}

// A restart chooses among the saved copies by succession, not by version
// number: a crash between saving a new lineage's v1 and removing the old
// lineage's v57 brings back the new lineage.
func TestLoadDirChoosesTheNewestLineage(t *testing.T) {
	now := time.Now().UTC()
	dir := t.TempDir()
	for _, pub := range []*bundle.Published{
		madePublished(t, bundle.NewEpoch(now.Add(-3*time.Hour)), 57, now.Add(-2*time.Hour)),
		madePublished(t, bundle.NewEpoch(now.Add(-time.Hour)), 1, now.Add(-50*time.Minute)),
	} {
		if _, err := bundle.Write(dir, pub.Bundle.Version, pub.Encoded); err != nil {
			t.Fatal(err)
		}
	}
	p, _ := New(Mean, 0.9)
	if pub, err := LoadDir(p, dir, nil); err != nil || pub == nil || pub.Bundle.Version != 1 {
		t.Fatalf("loaded %+v, %v; want the newer lineage's v1", pub, err)
	}
}
