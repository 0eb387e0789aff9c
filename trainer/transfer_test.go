package trainer

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/trainer/fit"
	"github.com/headroomhq/headroom/trainer/fit/fittest"
)

// The transfer target rides the trainer's cadence: fitted when its samples
// change, gated, published in the bundle beside TTFT and TPOT, and shown
// in the status; a TTFT sample's transfer is not in its TTFT label.
func TestRetrainPublishesTheTransferModel(t *testing.T) {
	f := newFixture(t)
	newTrainer := func() *Trainer {
		opts := fit.DefaultOptions()
		opts.XGBoost = nil // linear: this is about the transfer target
		tr, err := New(Config{Fit: opts, BundleDir: f.dir + "/bundles", Transfer: fit.TransferOptions{BytesPerToken: fittest.BytesPerToken}}, f.db)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	tr := newTrainer()
	rng := rand.New(rand.NewPCG(9, 10))
	classes := []features.LinkClass{features.SameRack, features.CrossZone}
	pd := func(n int) []features.Sample {
		s := fittest.TransferSamples(rng, n, classes, 64, 4096, 0)
		// Each also measured its TTFT: 20 ms + 0.1 ms per prompt token on
		// the pods, plus the transfer, which depends on the link and the
		// contention, neither of which the TTFT model sees.
		for i := range s {
			s[i].ActualTTFTMs = 20 + 0.1*float64(s[i].Row.InputTokenLength) + s[i].Transfer.Ms
		}
		return s
	}
	// Twelve transfers over five classes: enough samples, but no class has
	// five to learn a law from. A wait, not a failure.
	few := fittest.TransferSamples(rng, 12, []features.LinkClass{features.SameNode, features.SameRack, features.SameZone,
		features.CrossZone, features.CrossRegion}, 64, 4096, 0)
	for i := range few {
		few[i].Transfer.Decode = fittest.Places[i%5]
	}
	if _, err := f.db.Add(few); err != nil {
		t.Fatal(err)
	}
	if pub := retrain(t, tr); pub != nil {
		t.Fatalf("published %+v from 12 transfers of five classes", pub.Bundle)
	}
	if st := tr.Status().Targets["kv_transfer"]; st.Runs != 0 || st.Failures != 0 || !strings.Contains(st.LastSkipReason, "no link class has 5") {
		t.Fatalf("kv_transfer status after too few: %+v", st)
	}
	if _, err := f.db.Add(pd(400)); err != nil {
		t.Fatal(err)
	}
	pub := retrain(t, tr)
	if pub == nil || pub.Bundle.Transfer == nil || pub.Bundle.TTFT == nil {
		t.Fatalf("after 400 P/D samples: %+v", pub)
	}
	m := pub.Bundle.Transfer
	if len(m.Classes) != 2 || m.Holdout.Rows == 0 || m.Holdout.MAPE > 8 || m.StoreGeneration != f.db.Generation(features.KVTransfer) {
		t.Fatalf("transfer model: %d classes, holdout %+v, generation %d", len(m.Classes), m.Holdout, m.StoreGeneration)
	}
	if q := pub.Bundle.TTFT.Holdout; q.MAPE > 2 {
		t.Errorf("TTFT holdout MAPE %.1f%%: the transfer leaked into the TTFT labels", q.MAPE)
	}
	st := tr.Status().Targets["kv_transfer"]
	if st.Runs != 1 || st.Gate == nil || !st.Gate.Published || st.TrainedOnGen != m.StoreGeneration {
		t.Fatalf("kv_transfer status %+v", st)
	}
	if again := retrain(t, tr); again != nil {
		t.Fatal("retrained without new samples")
	}

	// Arriving transfers are scored live against the model in service.
	tr.ObserveServed(pd(50))
	live := tr.Status().Targets["kv_transfer"].Live
	if live == nil || live.Model == nil || live.Model.Rows != 50 || live.Model.MAPE > 10 || live.HoldoutMAPE != m.Holdout.MAPE ||
		live.Model.Coverage == nil {
		t.Fatalf("kv_transfer live status %+v", live)
	}

	// New transfers: a new transfer model; the per-pod models retrain on
	// their own thresholds.
	if _, err := f.db.Add(pd(200)); err != nil {
		t.Fatal(err)
	}
	pub = retrain(t, tr)
	if pub == nil || pub.Bundle.Version != 2 || pub.Bundle.Transfer == m {
		t.Fatalf("after 200 more: %+v", pub)
	}
	// The bundle as a predictor reads it.
	got, err := bundle.Decode(pub.Encoded, nil)
	if err != nil || got.Transfer == nil {
		t.Fatalf("published bundle reads back as %+v, %v", got, err)
	}
	if y, ok := got.Transfer.Predict(features.CrossZone, 2048, 0, 1); !ok ||
		math.Abs(y-(0.5+1000*2048*fittest.BytesPerToken/3e9))/y > 0.1 {
		t.Errorf("cross-zone 2,048 tokens alone: %v ms (%v)", y, ok)
	}

	// A restart keeps the model and does not refit the same samples.
	tr = newTrainer()
	if cur := tr.Current(); cur == nil || cur.Bundle.Transfer == nil {
		t.Fatal("transfer model lost in the restart")
	}
	if again := retrain(t, tr); again != nil {
		t.Fatal("retrained after a restart without new samples")
	}
}

// judgeTransfer is the gate's verdict on a transfer model (served nil for
// a first one).
func judgeTransfer(g GateConfig, cand, served *model.TransferModel, holdout []features.Sample, labels []float64) GateVerdict {
	return judge[*model.TransferModel](g, &transferModels{tg: features.KVTransfer}, cand, served, nil, features.KVTransfer,
		gateEvidence{holdout: holdout, labels: labels})
}

func TestGateJudgesTransferModels(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	classes := []features.LinkClass{features.SameRack, features.CrossZone}
	train := fittest.TransferSamples(rng, 500, classes, 64, 4096, 0)
	holdout := fittest.TransferSamples(rng, 100, classes, 64, 4096, 0)
	good, err := fit.TransferLaw(context.Background(), train, holdout, fit.TransferOptions{BytesPerToken: fittest.BytesPerToken}, model.DefaultQuantile)
	if err != nil {
		t.Fatal(err)
	}
	var g GateConfig
	g.setDefaults()
	labels := labelsOf(train, features.KVTransfer)
	if v := judgeTransfer(g, good, nil, holdout, labels); !v.Passed || v.Candidate.HoldoutRows != 100 || v.ConstantMAPE <= v.Candidate.HoldoutMAPE {
		t.Fatalf("a good first model: %+v", v)
	}
	if v := judgeTransfer(g, good, good, holdout, labels); !v.Passed || v.Served == nil {
		t.Fatalf("a model against itself: %+v", v)
	}

	broken := func(edit func(k *model.TransferClass)) *model.TransferModel {
		m := *good
		m.Classes = append([]model.TransferClass(nil), good.Classes...)
		for i := range m.Classes {
			edit(&m.Classes[i])
		}
		if err := m.Prepare(); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	slow := broken(func(k *model.TransferClass) { k.BytesPerSec /= 1e4 })
	if v := judgeTransfer(g, slow, good, holdout, labels); v.Passed || v.Reason != GateOutOfBand {
		t.Errorf("bandwidth off by 10^4: %+v", v)
	}
	worse := broken(func(k *model.TransferClass) { k.BytesPerSec /= 2.5 })
	if v := judgeTransfer(g, worse, good, holdout, labels); v.Passed || v.Reason != GateWorseThanServed {
		t.Errorf("bandwidth off by 2.5: %+v", v)
	}
}

// Split requests whose transfer is not timed, as llm-d reports them, give
// no transfer model but a split-TTFT law: fitted, gated, published in the
// bundle, shown in the status and scored live, by the same lifecycle.
func TestRetrainPublishesTheSplitTTFTLaw(t *testing.T) {
	f := newFixture(t)
	opts := fit.DefaultOptions()
	opts.XGBoost = nil
	tr, err := New(Config{Fit: opts, BundleDir: f.dir + "/bundles", Transfer: fit.TransferOptions{BytesPerToken: fittest.BytesPerToken}}, f.db)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(13, 14))
	classes := []features.LinkClass{features.SameRack, features.CrossZone}
	if _, err := f.db.Add(fittest.SplitSamples(rng, 400, classes, 64, 4096)); err != nil {
		t.Fatal(err)
	}
	pub := retrain(t, tr)
	if pub == nil || pub.Bundle.SplitTTFT == nil || pub.Bundle.Transfer != nil {
		t.Fatalf("after 400 untimed split requests: %+v", pub)
	}
	m := pub.Bundle.SplitTTFT
	if len(m.Classes) != 2 || m.Holdout.Rows == 0 || m.Holdout.MAPE > 8 || m.StoreGeneration != f.db.Generation(features.SplitTTFT) {
		t.Fatalf("split-TTFT law: %d classes, holdout %+v, generation %d", len(m.Classes), m.Holdout, m.StoreGeneration)
	}
	if st := tr.Status().Targets["split_ttft"]; st.Runs != 1 || st.Gate == nil || !st.Gate.Published {
		t.Fatalf("split_ttft status %+v", st)
	}
	got, err := bundle.Decode(pub.Encoded, nil)
	if err != nil || got.SplitTTFT == nil || !got.Has(features.SplitTTFT) || got.Has(features.KVTransfer) {
		t.Fatalf("published bundle reads back as %+v, %v", got, err)
	}
	y, ok := got.SplitTTFT.Predict(features.CrossZone, 2048, 0, 1)
	if y += got.SplitTTFT.SharedMs(&features.Row{InputTokenLength: 2048}, nil); !ok || got.SplitTTFT.Shared == nil ||
		math.Abs(y-(fittest.SplitPrefillMs(2048)+0.5+1000*2048*fittest.BytesPerToken/3e9))/y > 0.1 {
		t.Errorf("cross-zone 2,048 tokens alone: %v ms (%v)", y, ok)
	}
	tr.ObserveServed(fittest.SplitSamples(rng, 50, classes, 64, 4096))
	if live := tr.Status().Targets["split_ttft"].Live; live == nil || live.Model == nil || live.Model.Rows != 50 || live.Model.MAPE > 10 {
		t.Fatalf("split_ttft live status %+v", live)
	}
}
