package trainer

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
)

// Links of a made-up cluster, nearest first: bandwidth (bytes/s) and
// latency (ms).
var testLinks = [features.NumLinkClasses]struct{ bw, lat float64 }{
	{360e9, 0.005}, {40e9, 0.01}, {10e9, 0.05}, {3e9, 0.5}, {0.5e9, 20},
}

var testPlaces = [features.NumLinkClasses]features.Topology{
	features.SameNode:    {Node: "n0", Rack: "r0", Zone: "a", Region: "eu"},
	features.SameRack:    {Node: "n1", Rack: "r0", Zone: "a", Region: "eu"},
	features.SameZone:    {Node: "n2", Rack: "r1", Zone: "a", Region: "eu"},
	features.CrossZone:   {Node: "n3", Rack: "r0", Zone: "b", Region: "eu"},
	features.CrossRegion: {Node: "n4", Rack: "r0", Zone: "a", Region: "us"},
}

const testBPT = 160 << 10

// lawSamples draws n transfers over the given classes with tokens in
// [lo, hi], up to 4 sharing the link equally, 5% noise, and every
// unknownEvery-th not reporting its concurrency (0: all report it).
func lawSamples(rng *rand.Rand, n int, classes []features.LinkClass, lo, hi int64, unknownEvery int) []features.Sample {
	out := make([]features.Sample, n)
	for i := range out {
		c := classes[rng.IntN(len(classes))]
		tokens := lo + rng.Int64N(hi-lo+1)
		k := 1 + rng.Int64N(4)
		ms := testLinks[c].lat + 1000*float64(tokens)*testBPT/testLinks[c].bw*float64(k)
		ms *= math.Exp(0.05 * rng.NormFloat64())
		reported := k
		if unknownEvery > 0 && i%unknownEvery == 0 {
			reported = 0
		}
		out[i] = features.Sample{
			Row: features.Row{InputTokenLength: tokens},
			Transfer: &features.Transfer{Ms: ms, Tokens: tokens, Concurrent: reported,
				Prefill: testPlaces[features.SameNode], Decode: testPlaces[c]},
		}
	}
	return out
}

func medianBias(t *testing.T, m *model.TransferModel, samples []features.Sample) float64 {
	t.Helper()
	var signed []float64
	for _, s := range samples {
		y, ok := m.Predict(s.Transfer.Class(), s.Transfer.Tokens, 0, s.Transfer.Concurrent)
		if !ok {
			t.Fatalf("no prediction for a seen class %s", s.Transfer.Class())
		}
		signed = append(signed, 100*(y-s.Transfer.Ms)/s.Transfer.Ms)
	}
	sort.Float64s(signed)
	return signed[len(signed)/2]
}

func TestFitTransferLearnsTheLinks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	all := []features.LinkClass{features.SameNode, features.SameRack, features.SameZone, features.CrossZone, features.CrossRegion}
	train := lawSamples(rng, 3000, all, 16, 8192, 0)
	holdout := lawSamples(rng, 400, all, 16, 8192, 0)
	m, err := FitTransfer(context.Background(), train, holdout, TransferConfig{BytesPerToken: testBPT})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Classes) != int(features.NumLinkClasses) {
		t.Fatalf("%d classes fitted, want all 5", len(m.Classes))
	}
	for _, k := range m.Classes {
		c, _ := features.ParseLinkClass(k.Class)
		if r := k.BytesPerSec / testLinks[c].bw; r < 0.95 || r > 1.05 {
			t.Errorf("%s: bandwidth %.3g B/s, true %.3g", c, k.BytesPerSec, testLinks[c].bw)
		}
		if k.Contention < 0.9 || k.Contention > 1.1 {
			t.Errorf("%s: contention %.3f, true 1 (equal sharing)", c, k.Contention)
		}
	}
	t.Logf("holdout MAPE %.2f%%, p90 coverage %+v", m.Holdout.MAPE, m.HoldoutCoverage)
	if m.Holdout.MAPE > 6 || m.Holdout.Rows != 400 {
		t.Errorf("holdout MAPE %.2f%% on %d rows, want about the 4%% of 5%% noise on 400", m.Holdout.MAPE, m.Holdout.Rows)
	}
	if c := m.HoldoutCoverage; c == nil || c.Percent < 82 || c.Percent > 97 {
		t.Errorf("holdout coverage of p90 %+v, want near 90%%", c)
	}
	if m.DefaultBytesPerToken != testBPT || m.TrainSamples != 3000 {
		t.Errorf("default bytes per token %v, trained on %d", m.DefaultBytesPerToken, m.TrainSamples)
	}
}

// The law learned on short transfers predicts long ones: the bandwidth
// is what it learns, not the sizes it saw.
func TestFitTransferExtrapolatesAcrossPromptLengths(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	classes := []features.LinkClass{features.SameRack, features.SameZone, features.CrossZone}
	train := lawSamples(rng, 1500, classes, 32, 1024, 7)
	long := lawSamples(rng, 600, classes, 2049, 32768, 7)
	m, err := FitTransfer(context.Background(), train, nil, TransferConfig{BytesPerToken: testBPT})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		var of []features.Sample
		for _, s := range long {
			if s.Transfer.Class() == c {
				of = append(of, s)
			}
		}
		if b := medianBias(t, m, of); math.Abs(b) > 5 {
			t.Errorf("%s: median bias %.1f%% on transfers of 2,049-32,768 tokens, trained on ≤ 1,024", c, b)
		}
	}
}

// A few absurd labels (a stalled transfer, a unit error) move neither the
// bandwidth nor the median.
func TestFitTransferIsRobust(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	train := lawSamples(rng, 1000, []features.LinkClass{features.SameRack}, 64, 4096, 0)
	for i := 0; i < len(train); i += 20 {
		train[i].Transfer.Ms *= 100
	}
	m, err := FitTransfer(context.Background(), train, nil, TransferConfig{BytesPerToken: testBPT})
	if err != nil {
		t.Fatal(err)
	}
	k := m.Class(features.SameRack)
	if r := k.BytesPerSec / testLinks[features.SameRack].bw; r < 0.9 || r > 1.1 {
		t.Fatalf("bandwidth %.3g B/s with 5%% of labels ×100, true %.3g", k.BytesPerSec, testLinks[features.SameRack].bw)
	}
}

func TestFitTransferClassesAndDefaults(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	// Same-rack and cross-zone seen; same-zone has too few samples.
	train := lawSamples(rng, 500, []features.LinkClass{features.SameRack, features.CrossZone}, 64, 4096, 0)
	train = append(train, lawSamples(rng, 3, []features.LinkClass{features.SameZone}, 64, 4096, 0)...)
	for i := range train {
		train[i].Transfer.BytesPerToken = testBPT // reported by the samples, no pool setting
	}
	m, err := FitTransfer(context.Background(), train, nil, TransferConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if m.DefaultBytesPerToken != testBPT {
		t.Errorf("default bytes per token %v, want the samples' %v", m.DefaultBytesPerToken, testBPT)
	}
	if m.Seen(features.SameZone) || !m.Seen(features.SameRack) || !m.Seen(features.CrossZone) {
		t.Fatalf("classes %+v", m.Classes)
	}
	zone, ok := m.Predict(features.SameZone, 2000, 0, 1)
	cross, _ := m.Predict(features.CrossZone, 2000, 0, 1)
	if !ok || zone != cross {
		t.Errorf("unseen same-zone: %v (%v), want cross-zone's %v", zone, ok, cross)
	}
	if _, ok := m.Predict(features.CrossRegion, 2000, 0, 1); ok {
		t.Error("cross-region predicted with nothing seen beyond it")
	}

	// Only unknown concurrency: the effective bandwidth, no sharing claimed.
	blind := lawSamples(rng, 300, []features.LinkClass{features.SameRack}, 64, 4096, 1)
	m, err = FitTransfer(context.Background(), blind, nil, TransferConfig{BytesPerToken: testBPT})
	if err != nil {
		t.Fatal(err)
	}
	if k := m.Class(features.SameRack); k.Contention != 0 || k.UnknownContention != 1 ||
		k.BytesPerSec > testLinks[features.SameRack].bw {
		t.Errorf("without concurrency: %+v, want contention 0, factor 1, bandwidth under the link's (it was shared)", k)
	}

	if _, err := FitTransfer(context.Background(), lawSamples(rng, 4, []features.LinkClass{features.SameRack}, 1, 10, 0), nil,
		TransferConfig{}); !errors.Is(err, ErrTooFewTransfers) || !strings.Contains(err.Error(), "no link class has") {
		t.Errorf("4 samples: %v", err)
	}
	if _, err := FitTransfer(context.Background(), []features.Sample{{ActualTTFTMs: 5}}, nil, TransferConfig{}); !errors.Is(err, ErrTooFewTransfers) {
		t.Errorf("fitted without any transfer: %v", err)
	}
}

// The transfer target rides the trainer's cadence: fitted when its samples
// change, gated, published in the bundle beside TTFT and TPOT, and shown
// in the status; a TTFT sample's transfer is not in its TTFT label.
func TestRetrainPublishesTheTransferModel(t *testing.T) {
	f := newFixture(t)
	newTrainer := func() *Trainer {
		fit := DefaultFitConfig()
		fit.XGBoost = nil // linear: this is about the transfer target
		tr, err := New(Config{Fit: fit, BundleDir: f.dir + "/bundles", Transfer: TransferConfig{BytesPerToken: testBPT}}, f.db)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	tr := newTrainer()
	rng := rand.New(rand.NewPCG(9, 10))
	classes := []features.LinkClass{features.SameRack, features.CrossZone}
	pd := func(n int) []features.Sample {
		s := lawSamples(rng, n, classes, 64, 4096, 0)
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
	few := lawSamples(rng, 12, []features.LinkClass{features.SameNode, features.SameRack, features.SameZone,
		features.CrossZone, features.CrossRegion}, 64, 4096, 0)
	for i := range few {
		few[i].Transfer.Decode = testPlaces[i%5]
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
	got, err := model.Decode(pub.Encoded, nil)
	if err != nil || got.Transfer == nil {
		t.Fatalf("published bundle reads back as %+v, %v", got, err)
	}
	if y, ok := got.Transfer.Predict(features.CrossZone, 2048, 0, 1); !ok ||
		math.Abs(y-(0.5+1000*2048*testBPT/3e9))/y > 0.1 {
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
	return judge[*model.TransferModel](g, &transferModels{}, cand, served, features.KVTransfer,
		gateEvidence{holdout: holdout, labels: labels})
}

func TestGateJudgesTransferModels(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	classes := []features.LinkClass{features.SameRack, features.CrossZone}
	train := lawSamples(rng, 500, classes, 64, 4096, 0)
	holdout := lawSamples(rng, 100, classes, 64, 4096, 0)
	good, err := FitTransfer(context.Background(), train, holdout, TransferConfig{BytesPerToken: testBPT})
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
