package trainer

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/trainer/fit"
	"github.com/headroomhq/headroom/xgboost"
)

// coldTrainer is a trainer with the service's fit configuration (trees
// from MinTreeRows rows) whose tick never comes during a test: whatever it
// publishes, it publishes because samples arrived.
func (f *trainerFixture) coldTrainer(t *testing.T, xgb *xgboost.CLI) *Trainer {
	t.Helper()
	opts := fit.DefaultOptions()
	opts.XGBoost = xgb
	opts.Params.Rounds = 20
	tr, err := New(Config{Interval: time.Hour, Fit: opts, BundleDir: filepath.Join(f.dir, "bundles")}, f.db)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// runTrainer runs tr.Run until the test ends.
func runTrainer(t *testing.T, tr *Trainer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// nextPublication waits for the publication after the one whose channel
// ch is, failing the test after a generous timeout (a loaded machine).
func nextPublication(t *testing.T, tr *Trainer, ch <-chan struct{}, what string) *bundle.Published {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("no publication within 30 s: %s", what)
	}
	return tr.Current()
}

// arrive stores n samples and tells the trainer, as the ingest route does.
func (f *trainerFixture) arrive(t *testing.T, tr *Trainer, n int) {
	t.Helper()
	s := syntheticSamples(f.rng, n)
	if _, err := f.db.Add(s); err != nil {
		t.Fatal(err)
	}
	tr.ObserveServed(s)
}

// A target's first model is published as soon as it has MinSamplesFresh
// samples (held-out ones counted), without waiting for the tick, as a line;
// with rows enough for trees and an xgboost, the trees follow in the next
// version, again without a tick.
func TestFirstModelWithoutTick(t *testing.T) {
	for _, tt := range []struct {
		name      string
		samples   int
		xgb       bool
		wantTrees bool
	}{
		{"ten samples, linear", 10, true, false},
		{"enough for trees", 300, true, true},
		{"no xgboost", 300, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			var xgb *xgboost.CLI
			if tt.xgb {
				xgb = realXGBoost(t)
			}
			tr := f.coldTrainer(t, xgb)
			runTrainer(t, tr)
			ch := tr.Published()
			f.arrive(t, tr, tt.samples)
			counts := f.db.Counts()
			first := nextPublication(t, tr, ch, "the first model")
			if first.Bundle.Version != 1 || first.Bundle.TTFT == nil || first.Bundle.TTFT.Kind != model.KindLinear {
				t.Fatalf("first bundle %+v; want version 1 with a linear TTFT model", first.Bundle)
			}
			if first.Bundle.TPOT != nil {
				t.Error("a TPOT model from samples without a TPOT label")
			}
			if got, want := first.Bundle.TTFT.TrainSamples, counts.Train(features.TTFT); got != want {
				t.Errorf("first model trained on %d samples, want the %d training samples", got, want)
			}
			if !tt.wantTrees {
				if st := tr.Status().Targets["ttft"]; !st.ServingLinear {
					t.Errorf("status %+v does not say the target serves a line", st)
				}
				return
			}
			second := first
			if second.Bundle.Version == 1 { // the trees may be in already
				second = nextPublication(t, tr, tr.Published(), "the trees after the first line")
			}
			m := second.Bundle.TTFT
			if second.Bundle.Version != 2 || m.Kind != model.KindResidual || m.Trees == nil {
				t.Fatalf("second bundle version %d, TTFT kind %s; want version 2 with trees on the line",
					second.Bundle.Version, m.Kind)
			}
			if st := tr.Status().Targets["ttft"]; st.ServingLinear || st.Runs != 2 {
				t.Errorf("status %+v; want 2 runs, trees in service", st)
			}
		})
	}
}

// The tenth sample counts even when it was held out: 10 samples posted are
// enough, whichever of them the holdout took.
func TestFreshThresholdCountsHoldout(t *testing.T) {
	f := newFixture(t)
	tr := f.coldTrainer(t, nil)
	for n := 0; ; n++ {
		f.add(t, 1)
		c := f.db.Counts()
		if c.Holdout(features.TTFT) > 0 {
			break
		}
		if n > 200 {
			t.Fatal("test bug: no sample was held out")
		}
	}
	for {
		c := f.db.Counts()
		total := c.Train(features.TTFT) + c.Holdout(features.TTFT)
		due := tr.firstModelsDue()
		any := len(due) > 0
		if want := total >= 10; any != want || slices.Contains(due, features.TTFT) != want {
			t.Fatalf("%d samples (%d held out): first model due %v, want %v", total, c.Holdout(features.TTFT), any, want)
		}
		if total >= 10 {
			break
		}
		f.add(t, 1)
	}
	tr.firstModels(context.Background())
	if cur := tr.Current(); cur == nil || cur.Bundle.TTFT == nil {
		t.Fatal("no first model")
	}
}

// Once every target has a model, arriving samples no longer wake Run:
// later models keep the tick and MinSamples.
func TestLaterModelsKeepTheTick(t *testing.T) {
	f := newFixture(t)
	tr := f.coldTrainer(t, nil)
	f.arrive(t, tr, 20)
	tr.firstModels(context.Background())
	if cur := tr.Current(); cur == nil || cur.Bundle.TTFT == nil {
		t.Fatal("no first TTFT model")
	}
	<-tr.arrived // the wake-up of the samples above
	// TPOT has no model yet: arrivals still wake Run, and nothing is due.
	f.arrive(t, tr, 200)
	select {
	case <-tr.arrived:
	default:
		t.Fatal("arrivals did not wake Run while TPOT has no model")
	}
	if due := tr.firstModelsDue(); len(due) > 0 {
		t.Fatal("a first model due for a target that has one")
	}
	tr.firstModels(context.Background())
	if v := tr.Current().Bundle.Version; v != 1 {
		t.Fatalf("firstModels published version %d for a target with a model", v)
	}
	// With both targets served, arrivals do not wake Run at all.
	b := *tr.Current().Bundle
	b.TPOT = b.TTFT
	tr.wakeForFirstModels(&b)
	select {
	case <-tr.arrived:
		t.Fatal("arrivals woke Run though every target has a model")
	default:
	}
}

// Below MinSamples a target that has a model retrains when its training
// samples have grown earlyGrowth times past its model's, so the line of
// the first ten samples does not serve until the hundredth; from
// MinSamples on, every tick with new samples retrains as before.
func TestEarlyRetrainsAsTheStoreGrows(t *testing.T) {
	f := newFixture(t)
	tr := f.coldTrainer(t, nil)
	ctx := context.Background()
	f.add(t, 12)
	tr.firstModels(ctx)
	first := tr.Current().Bundle.TTFT
	if first == nil {
		t.Fatal("no first model")
	}
	served := first.TrainSamples
	for range 200 {
		f.add(t, 1)
		pub, err := tr.Retrain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		train := f.db.Counts().Train(features.TTFT)
		m := tr.Current().Bundle.TTFT
		refitted := m.TrainSamples != served
		due := train >= min(earlyGrowth*served, DefaultMinSamples)
		if refitted != due {
			t.Fatalf("%d training samples, model in service trained on %d: refitted %v (published %v), want %v (%s)",
				train, served, refitted, pub != nil, due, tr.Status().Targets["ttft"].LastSkipReason)
		}
		if refitted {
			if m.TrainSamples != train {
				t.Fatalf("refitted on %d samples, the store holds %d", m.TrainSamples, train)
			}
			served = m.TrainSamples
		}
		if train > DefaultMinSamples+5 {
			return
		}
	}
	t.Fatal("the store never reached MinSamples")
}
