package trainer

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer/fit"
	"github.com/headroomhq/headroom/trainer/fit/fittest"
	"github.com/headroomhq/headroom/xgboost"
)

// syntheticSamples returns n TTFT samples whose latency grows with prompt
// length and load, plus noise.
func syntheticSamples(rng *rand.Rand, n int) []features.Sample {
	s := make([]features.Sample, n)
	for i := range s {
		row := features.Row{
			KVCachePercentage: rng.Float64() * 0.5, InputTokenLength: int64(rng.IntN(2000) + 10),
			NumRequestRunning: int64(rng.IntN(30)), NumRequestWaiting: int64(rng.IntN(3)),
		}
		ttft := (20 + 0.1*float64(row.InputTokenLength) + 2*float64(row.NumRequestRunning)) * (1 + 0.05*rng.NormFloat64())
		s[i] = features.Sample{Row: row, ActualTTFTMs: ttft, Timestamp: time.Unix(1_800_000_000+int64(i), 0).UTC()}
	}
	return s
}

type trainerFixture struct {
	dir string
	db  *store.DB
	rng *rand.Rand
}

func newFixture(t *testing.T) *trainerFixture {
	t.Helper()
	f := &trainerFixture{dir: t.TempDir(), rng: rand.New(rand.NewPCG(7, 8))}
	f.open(t)
	return f
}

func (f *trainerFixture) open(t *testing.T) {
	t.Helper()
	// Repeatable sides (a fixed secret), and the holdout the newest
	// HoldoutCapacity however fast a test adds: the trainer's tests are not
	// about the store's bound on a minute's share.
	db, err := store.Open(filepath.Join(f.dir, "samples.db"), store.Options{NoSync: true, HoldoutSpread: 1}.ForReplay())
	if err != nil {
		t.Fatal(err)
	}
	f.db = db
	t.Cleanup(func() { db.Close() })
}

func (f *trainerFixture) add(t *testing.T, n int) {
	t.Helper()
	if _, err := f.db.Add(syntheticSamples(f.rng, n)); err != nil {
		t.Fatal(err)
	}
}

func (f *trainerFixture) trainer(t *testing.T, xgb *xgboost.CLI) *Trainer {
	t.Helper()
	opts := fit.DefaultOptions()
	opts.XGBoost = xgb
	opts.Params.Rounds = 20
	opts.MinTreeRows = 1 // trees from the first model: these tests check the composition
	tr, err := New(Config{Fit: opts, BundleDir: filepath.Join(f.dir, "bundles")}, f.db)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func realXGBoost(t *testing.T) *xgboost.CLI { return fittest.XGBoost(t) }

func retrain(t *testing.T, tr *Trainer) *bundle.Published {
	t.Helper()
	pub, err := tr.Retrain(context.Background())
	if err != nil {
		t.Fatalf("retrain: %v", err)
	}
	return pub
}

func TestRetrainThresholdsAndNewSamplesOnly(t *testing.T) {
	f := newFixture(t)
	tr := f.trainer(t, realXGBoost(t))

	f.add(t, 5)
	if pub := retrain(t, tr); pub != nil || tr.Current() != nil {
		t.Fatal("published a model from 5 samples; the first model needs 10")
	}
	f.add(t, 40)
	pub := retrain(t, tr)
	if pub == nil || pub.Bundle.Version != 1 || pub.Bundle.TTFT == nil || pub.Bundle.TPOT != nil {
		t.Fatalf("after 45 TTFT samples: %+v; want version 1 with a TTFT model only", pub)
	}
	if pub.Bundle.TTFT.Kind != model.KindResidual || pub.Bundle.TTFT.Trees == nil {
		t.Errorf("TTFT model kind %s; want trees on a line", pub.Bundle.TTFT.Kind)
	}
	if again := retrain(t, tr); again != nil {
		t.Fatal("retrained without new samples")
	}
	f.add(t, 30)
	if again := retrain(t, tr); again != nil {
		t.Fatal("retrained a target that has a model on fewer than 100 samples")
	}
	f.add(t, 200)
	pub = retrain(t, tr)
	if pub == nil || pub.Bundle.Version != 2 {
		t.Fatalf("after 275 samples: %+v; want version 2", pub)
	}
	if q := pub.Bundle.TTFT.Holdout; q.Rows == 0 || q.MAPE > 20 {
		t.Errorf("holdout %+v: the model did not learn a noisy line", q)
	}

	// A restart loads the saved bundle and keeps its version sequence.
	f.db.Close()
	f.open(t)
	tr2 := f.trainer(t, realXGBoost(t))
	if cur := tr2.Current(); cur == nil || cur.Bundle.Version != 2 {
		t.Fatalf("after restart: current bundle %+v, want version 2", cur)
	}
	if again := retrain(t, tr2); again != nil {
		t.Fatal("retrained after a restart with no new samples")
	}
	f.add(t, 150)
	if pub := retrain(t, tr2); pub == nil || pub.Bundle.Version != 3 {
		t.Fatalf("after restart and 150 new samples: %+v, want version 3", pub)
	}
}

// When xgboost starts failing, the tree model in service stays in service,
// and the failure is visible in the status.
func TestRetrainKeepsLastGoodBundleWhenXGBoostFails(t *testing.T) {
	realXGBoost(t)
	f := newFixture(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "broken")
	script := filepath.Join(dir, "xgboost")
	body := "#!/bin/sh\nif [ -e " + marker + " ]; then echo 'simulated crash' >&2; exit 3; fi\nexec xgboost \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	tr := f.trainer(t, &xgboost.CLI{Binary: script, TempDir: t.TempDir()})
	f.add(t, 200)
	first := retrain(t, tr)
	if first == nil || first.Bundle.TTFT.Trees == nil {
		t.Fatal("no tree model from a working xgboost")
	}
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.add(t, 200)
	pub, err := tr.Retrain(context.Background())
	if err == nil || !strings.Contains(err.Error(), "simulated crash") {
		t.Fatalf("retrain with a crashing xgboost: %v; want the crash reported", err)
	}
	if pub != nil || tr.Current() != first {
		t.Fatal("a failed retrain replaced the bundle in service")
	}
	st := tr.Status().Targets["ttft"]
	if st.Failures != 1 || !strings.Contains(st.LastError, "simulated crash") {
		t.Errorf("status %+v does not report the failure", st)
	}
	// It retries on the next cycle and recovers.
	os.Remove(marker)
	if pub := retrain(t, tr); pub == nil || pub.Bundle.Version != 2 {
		t.Fatalf("after xgboost recovered: %+v, want version 2", pub)
	}
}

func TestMissingXGBoostTrainsLinear(t *testing.T) {
	f := newFixture(t)
	tr := f.trainer(t, &xgboost.CLI{Binary: filepath.Join(t.TempDir(), "no-such-xgboost")})
	if st := tr.Status(); st.XGBoostAvailable || st.XGBoostError == "" {
		t.Fatalf("status %+v does not say xgboost is missing", st)
	}
	f.add(t, 100)
	pub := retrain(t, tr)
	if pub == nil || !pub.Bundle.XGBoostMissing || pub.Bundle.TTFT.Kind != model.KindLinear {
		t.Fatalf("bundle %+v; want a linear model marked xgboost-missing", pub)
	}
	if !tr.Status().Targets["ttft"].ServingLinear {
		t.Error("status does not say the target serves a linear model")
	}
}

// The epoch names the lineage of one bundle directory: a restart keeps it,
// a wiped directory gets a new one (and starts again at version 1), a
// directory of bundles that no longer load (a rotated signing key) gets a
// new one numbered above them, and a bundle of a release without epochs is
// continued under a new epoch.
func TestEpochFollowsTheBundleDirectory(t *testing.T) {
	f := newFixture(t)
	bundles := filepath.Join(f.dir, "bundles")
	tr := f.trainer(t, nil)
	first := tr.Epoch()
	if first == "" {
		t.Fatal("a new trainer has no epoch")
	}
	f.add(t, 50)
	if pub := retrain(t, tr); pub == nil || pub.Bundle.Version != 1 || pub.Bundle.Epoch != first {
		t.Fatalf("first bundle %+v; want version 1 of epoch %q", pub, first)
	}
	f.add(t, 150)
	retrain(t, tr)

	restarted := f.trainer(t, nil)
	if restarted.Epoch() != first {
		t.Errorf("after a restart: epoch %q, want %q", restarted.Epoch(), first)
	}
	f.add(t, 150)
	if pub := retrain(t, restarted); pub == nil || pub.Bundle.Version != 3 || pub.Bundle.Epoch != first {
		t.Fatalf("after a restart: %+v; want version 3 of epoch %q", pub, first)
	}

	if err := os.RemoveAll(bundles); err != nil {
		t.Fatal(err)
	}
	wiped := f.trainer(t, nil)
	second := wiped.Epoch()
	if second == "" || second == first {
		t.Fatalf("after the bundles were wiped: epoch %q (before %q), want a new one", second, first)
	}
	if pub := retrain(t, wiped); pub == nil || pub.Bundle.Version != 1 || pub.Bundle.Epoch != second {
		t.Fatalf("after the bundles were wiped: %+v; want version 1 of epoch %q", pub, second)
	}

	// Bundles that no longer verify: the new lineage numbers above them,
	// so that pruning by version keeps its bundles and not theirs.
	if err := os.RemoveAll(bundles); err != nil {
		t.Fatal(err)
	}
	for v := uint64(7); v <= 9; v++ {
		if _, err := bundle.Write(bundles, v, []byte(`{"format":"headroom-bundle/1"}`)); err != nil {
			t.Fatal(err)
		}
	}
	unreadable := f.trainer(t, nil)
	third := unreadable.Epoch()
	if third == second || third == first {
		t.Fatalf("over unreadable bundles: epoch %q, want a new one", third)
	}
	for want := uint64(10); want <= 15; want++ {
		f.add(t, 150)
		if pub := retrain(t, unreadable); pub == nil || pub.Bundle.Version != want || pub.Bundle.Epoch != third {
			t.Fatalf("over unreadable bundles 7-9: %+v; want version %d of epoch %q", pub, want, third)
		}
	}
	if again := f.trainer(t, nil); again.Epoch() != third || again.Current().Bundle.Version != 15 {
		t.Errorf("restart after the new lineage's 6 bundles: epoch %q version %d, want %q and 15", again.Epoch(), again.Current().Bundle.Version, third)
	}

	// A bundle of a release without epochs: its numbering continues.
	if err := os.RemoveAll(bundles); err != nil {
		t.Fatal(err)
	}
	legacy := *unreadable.Current().Bundle
	legacy.Epoch, legacy.Version = "", 57
	data, err := bundle.Encode(&legacy, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bundle.Write(bundles, 57, data); err != nil {
		t.Fatal(err)
	}
	upgraded := f.trainer(t, nil)
	if e := upgraded.Epoch(); e == "" || e == third || upgraded.Current().Bundle.Version != 57 {
		t.Fatalf("over a bundle without an epoch: epoch %q, serving %+v", e, upgraded.Current())
	}
	f.add(t, 150)
	if pub := retrain(t, upgraded); pub == nil || pub.Bundle.Version != 58 || pub.Bundle.Epoch != upgraded.Epoch() {
		t.Fatalf("after a bundle without an epoch: %+v; want version 58 of epoch %q", pub, upgraded.Epoch())
	}
}

func TestPublishedChannelFires(t *testing.T) {
	f := newFixture(t)
	tr := f.trainer(t, nil)
	ch := tr.Published()
	f.add(t, 50)
	retrain(t, tr)
	select {
	case <-ch:
	default:
		t.Fatal("publication did not close the channel taken before it")
	}
}

func TestStatusLastSuccess(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := Status{Targets: map[string]TargetStatus{"ttft": {}, "tpot": {}}}
	if last := s.LastSuccess(); !last.IsZero() {
		t.Errorf("no retrain yet, last success %v", last)
	}
	s.Targets["ttft"] = TargetStatus{LastSuccess: at}
	s.Targets["kv_transfer"] = TargetStatus{LastSuccess: at.Add(time.Minute)}
	if last := s.LastSuccess(); !last.Equal(at.Add(time.Minute)) {
		t.Errorf("last success %v, want the latest target's %v", last, at.Add(time.Minute))
	}
}

// Await returns at once without a wait; otherwise a bundle the caller
// does not hold as soon as there is one, published before or during the
// wait, and what is current when the wait ends, the context ends or stop
// closes.
func TestAwait(t *testing.T) {
	f := newFixture(t)
	tr := f.trainer(t, nil)
	never := func(*bundle.Published) bool { return false }
	if pub := tr.Await(t.Context(), 0, nil, never); pub != nil {
		t.Fatalf("no wait before the first bundle: %+v", pub)
	}
	if pub := tr.Await(t.Context(), time.Millisecond, nil, never); pub != nil {
		t.Fatalf("wait ran out before the first bundle: %+v", pub)
	}
	stop := make(chan struct{})
	close(stop)
	if pub := tr.Await(t.Context(), time.Hour, stop, never); pub != nil {
		t.Fatalf("stopped before the first bundle: %+v", pub)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if pub := tr.Await(ctx, time.Hour, nil, never); pub != nil {
		t.Fatalf("context done before the first bundle: %+v", pub)
	}

	f.add(t, 50)
	first := retrain(t, tr)
	if pub := tr.Await(t.Context(), time.Hour, nil, never); pub != first {
		t.Fatalf("a bundle not held: %+v, want %+v", pub, first)
	}
	held := func(p *bundle.Published) bool { return p == first }
	waiting, stopWaiting := context.WithCancel(t.Context())
	defer stopWaiting()
	next := make(chan *bundle.Published, 1)
	go func() { next <- tr.Await(waiting, time.Hour, nil, held) }()
	f.add(t, 150)
	second := retrain(t, tr)
	if second == nil || second == first {
		stopWaiting()
		t.Fatalf("the second retrain published %+v", second)
	}
	if pub := <-next; pub != second {
		t.Fatalf("awaited %+v, want the next publication %+v", pub, second)
	}
	if pub := tr.Await(t.Context(), time.Millisecond, nil, func(*bundle.Published) bool { return true }); pub != second {
		t.Fatalf("wait ran out holding everything: %+v, want the current %+v", pub, second)
	}
}

// A fit reads at most MaxTrainRows training samples per target; negative
// means all of them.
func TestRetrainCapsTrainingRows(t *testing.T) {
	for _, tt := range []struct{ max, want int }{{150, 150}, {-1, 0}} {
		f := newFixture(t)
		f.add(t, 600)
		opts := fit.DefaultOptions()
		tr, err := New(Config{Fit: opts, MaxTrainRows: tt.max, BundleDir: filepath.Join(f.dir, "bundles")}, f.db)
		if err != nil {
			t.Fatal(err)
		}
		pub := retrain(t, tr)
		want := tt.want
		if want == 0 {
			want = f.db.Counts().Train(features.TTFT)
		}
		if got := pub.Bundle.TTFT.TrainSamples; got != want {
			t.Errorf("MaxTrainRows %d: trained on %d samples, want %d", tt.max, got, want)
		}
	}
}

// A target's xgboost runs go to the idle class only once it has a model to
// serve meanwhile, the first running niced, and stay out of it for a
// minute after one was starved there.
func TestFitConfigIdleOnlyWithAModel(t *testing.T) {
	f := newFixture(t)
	xgb := realXGBoost(t)
	xgb.Idle = true
	tr := f.trainer(t, xgb)
	now := time.Unix(1_900_000_000, 0)
	tr.cfg.Now = func() time.Time { return now }
	served := func(tg features.Target) *model.TargetModel { return tr.Current().Target(tg) }
	idle := func(tg features.Target) bool { return tr.fitConfig(served(tg)).XGBoost.Idle }
	if idle(features.TTFT) || idle(features.TPOT) {
		t.Error("idle-class xgboost before any model")
	}
	f.add(t, 45) // TTFT samples only
	if pub := retrain(t, tr); pub == nil || pub.Bundle.TTFT == nil {
		t.Fatal("no TTFT model")
	}
	if !idle(features.TTFT) || idle(features.TPOT) {
		t.Errorf("idle TTFT %v, TPOT %v; want true once TTFT has a model, false for TPOT without one",
			idle(features.TTFT), idle(features.TPOT))
	}
	if !tr.cfg.Fit.XGBoost.Idle {
		t.Error("fitConfig changed the trainer's own configuration")
	}

	tr.fitConfig(served(features.TTFT)).XGBoost.Starved() // as runAttempts does
	if idle(features.TTFT) {
		t.Error("idle-class xgboost right after a starved run")
	}
	now = now.Add(idleBackoff - time.Second)
	if idle(features.TTFT) {
		t.Error("idle-class xgboost within a minute of a starved run")
	}
	now = now.Add(time.Second)
	if !idle(features.TTFT) {
		t.Error("no idle-class xgboost a minute after a starved run")
	}
}

// New refuses what no default stands for, saying what it refused; zero
// takes the default.
func TestNewValidatesConfig(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{MinSamples: -1}, "min samples -1"},
		{Config{Interval: -time.Second}, "interval"},
		{Config{MinSamplesFresh: -3}, "min samples fresh -3"},
		{Config{Drift: DriftConfig{Quantile: 1.5}}, "quantile 1.5"},
	} {
		if _, err := New(tc.cfg, f.db); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
	tr, err := New(Config{}, f.db)
	if err != nil {
		t.Fatal(err)
	}
	if c := tr.cfg; c.Interval != DefaultInterval || c.MinSamples != DefaultMinSamples || c.MinSamplesFresh != DefaultMinSamplesFresh ||
		tr.drift.cfg.Quantile != model.DefaultQuantile {
		t.Errorf("defaults %v %d %d %v", c.Interval, c.MinSamples, c.MinSamplesFresh, tr.drift.cfg.Quantile)
	}
}
