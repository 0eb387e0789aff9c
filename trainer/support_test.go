package trainer

import (
	"path/filepath"
	"testing"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/trainer/fit"
)

// The first retrain after loading a bundle whose models have no spreads
// (an older trainer's) measures and does not choose; the next chooses and
// carries what it measured: never both in one retrain (docs/PERFORMANCE.md).
// A later retrain that chooses carries too, and the one after measures.
func TestUpgradeMeasuresThenChooses(t *testing.T) {
	xgb := realXGBoost(t)
	f := newFixture(t)
	f.add(t, 800)
	old := f.trainer(t, xgb)
	pub := retrain(t, old)
	if pub == nil || pub.Bundle.TTFT.Selection == nil || pub.Bundle.TTFT.Support == nil {
		t.Fatalf("first bundle %+v: want a choice and spreads", pub)
	}
	// The same bundle as an older trainer would have written it.
	legacy := *pub.Bundle
	m := *legacy.TTFT
	m.Support, m.Selection = nil, nil
	legacy.TTFT = &m
	legacy.Version++
	encoded, err := bundle.Encode(&legacy, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bundle.Write(filepath.Join(f.dir, "bundles"), legacy.Version, encoded); err != nil {
		t.Fatal(err)
	}

	opts := fit.DefaultOptions()
	opts.XGBoost = xgb
	opts.Params.Rounds = 20
	opts.Support.MinInterval = 0 // every retrain may measure
	tr, err := New(Config{Fit: opts, BundleDir: filepath.Join(f.dir, "bundles")}, f.db)
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.Current().Bundle.TTFT; got.Support != nil || got.Selection != nil {
		t.Fatal("the legacy bundle did not load")
	}
	step := func(what string, drift bool) *model.TargetModel {
		t.Helper()
		f.add(t, 50)
		if drift {
			tr.tuneAfterDrift()
		}
		pub := retrain(t, tr)
		if pub == nil {
			t.Fatalf("%s: nothing published", what)
		}
		return pub.Bundle.TTFT
	}
	up := step("upgrade", false)
	if up.Selection != nil || up.Support == nil || up.Support.Rows == 0 {
		t.Fatalf("upgrade retrain: selection %+v, support %+v; want spreads measured and no choice", up.Selection, up.Support)
	}
	chose := step("next", false)
	if s := chose.Selection; s == nil || s.Reason != "first" || s.RetrainsSince != 0 {
		t.Fatalf("retrain after the upgrade: selection %+v, want the first choice", s)
	}
	if s := chose.Support; s == nil || s.Rows != 0 || !s.MeasuredAt.Equal(up.Support.MeasuredAt) {
		t.Fatalf("a retrain that chose measured: %+v", s)
	}
	measured := step("after the choice", false)
	if s := measured.Support; s.Rows == 0 || measured.Selection.RetrainsSince == 0 {
		t.Fatalf("retrain after a choice: support %+v, selection %+v; want measured, the choice kept", s, measured.Selection)
	}
	drift := step("drift", true)
	if s := drift.Support; drift.Selection.Reason != "drift" || s.Rows != 0 {
		t.Fatalf("a retrain choosing after a drift: selection %+v, support rows %d; want chosen and carried", drift.Selection, s.Rows)
	}
}
