package trainer

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/trainer/fit"
	"github.com/headroomhq/headroom/wire"
)

// The trainer chooses a target's configuration at its first retrain with
// enough rows, keeps it while it is fresh, chooses again when the rows
// have doubled, after Every models and after a drift, records every
// choice in the model (so /model/info shows it), and a restarted trainer
// resumes the choice of the bundle it loads.
func TestTrainerChoosesAndKeepsConfigurations(t *testing.T) {
	xgb := realXGBoost(t)
	f := newFixture(t)
	clock := &stepClock{at: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), step: time.Minute}
	newTrainer := func() *Trainer {
		opts := fit.DefaultOptions()
		opts.XGBoost = xgb
		opts.Params.Rounds = 20
		tr, err := New(Config{Fit: opts, BundleDir: filepath.Join(f.dir, "bundles"), Now: clock.now,
			Select: SelectConfig{Every: 3}}, f.db)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	// Each retrain a minute after the last: choices are due by count and
	// by rows, not held back by SelectConfig.MinInterval (tested below).
	tr := newTrainer()
	ttft := func(pub *bundle.Published) *model.Selection {
		t.Helper()
		if pub == nil || pub.Bundle.TTFT == nil {
			t.Fatal("no TTFT model published")
		}
		return pub.Bundle.TTFT.Selection
	}

	f.add(t, 150) // about 135 training rows: blocks of 27, too few to score
	if s := ttft(retrain(t, tr)); s != nil {
		t.Fatalf("a choice from %d rows: %+v", s.TrainRows, s)
	}
	f.add(t, 300)
	first := ttft(retrain(t, tr))
	if first == nil || first.Reason != "first" || first.RetrainsSince != 0 || len(first.Candidates) != len(fit.DefaultCandidates(fit.DefaultOptions())) {
		t.Fatalf("first choice %+v", first)
	}
	if err := first.Validate(); err != nil {
		t.Fatal(err)
	}
	info := wire.NewModelInfo(tr.Current(), first.At, first.At, nil)
	if s := info.Pod(features.TTFT).Selection; s == nil || s.Chosen != first.Chosen {
		t.Errorf("/model/info selection %+v, want %q", s, first.Chosen)
	}

	f.add(t, 50)
	kept := ttft(retrain(t, tr))
	if kept.At != first.At || kept.RetrainsSince != 1 || kept.Chosen != first.Chosen {
		t.Errorf("second model's selection %+v; want the first choice, one model on", kept)
	}

	// A restart resumes the choice from the bundle.
	tr = newTrainer()
	f.add(t, 50)
	if s := ttft(retrain(t, tr)); s.At != first.At || s.RetrainsSince != 2 {
		t.Errorf("after a restart: %+v; want the first choice, two models on", s)
	}
	f.add(t, 50)
	if s := ttft(retrain(t, tr)); s.Reason != "every 3 retrains" || s.RetrainsSince != 0 {
		t.Errorf("fourth model: %+v; want a new choice, every 3", s)
	}
	// From here a second between readings: the drift's choice is not
	// held back by MinInterval, and the doubled rows after it are.
	clock.step = time.Second
	f.add(t, 50)
	tr.tuneAfterDrift()
	if s := ttft(retrain(t, tr)); s.Reason != "drift" {
		t.Errorf("after a drift: reason %q", s.Reason)
	}
	f.add(t, 1000)
	if s := ttft(retrain(t, tr)); s.Reason != "drift" || s.RetrainsSince != 1 {
		t.Errorf("doubled rows a second after a choice: %+v; want the drift's choice kept", s)
	}
	clock.step = time.Minute
	f.add(t, 50)
	if s := ttft(retrain(t, tr)); s.Reason != "rows grew" {
		t.Errorf("after the rows doubled: reason %q", s.Reason)
	}

	// Off, nothing is chosen or recorded.
	opts := fit.DefaultOptions()
	opts.XGBoost = xgb
	opts.Params.Rounds = 20
	off, err := New(Config{Fit: opts, Select: SelectConfig{Off: true}}, f.db)
	if err != nil {
		t.Fatal(err)
	}
	if s := ttft(retrain(t, off)); s != nil || off.Current().Bundle.TTFT.Kind != model.KindResidual {
		t.Errorf("self-tuning off: selection %+v, kind %s", s, off.Current().Bundle.TTFT.Kind)
	}
}

// stepClock is a trainer clock that moves by step at every reading.
type stepClock struct {
	mu   sync.Mutex
	at   time.Time
	step time.Duration
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = c.at.Add(c.step)
	return c.at
}
