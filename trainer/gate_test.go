package trainer

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/trainer/fit"
	"github.com/headroomhq/headroom/xgboost"
)

// gateSchema reads the two columns gateSamples' latency depends on.
var gateSchema = features.MustSchema("num_request_running", "input_token_length")

// gateSamples are TTFT samples of gateSchema's relation, y = 10 + running +
// prompt/20 ms with 10% noise, times scale.
func gateSamples(rng *rand.Rand, n int, scale float64) []features.Sample {
	s := make([]features.Sample, n)
	for i := range s {
		row := features.Row{NumRequestRunning: int64(rng.IntN(30)), InputTokenLength: int64(16 + rng.IntN(1000))}
		y := scale * (10 + float64(row.NumRequestRunning) + float64(row.InputTokenLength)/20) * math.Exp(0.1*rng.NormFloat64())
		s[i] = features.Sample{Row: row, ActualTTFTMs: y, Timestamp: time.Unix(1_800_000_000, 0).UTC()}
	}
	return s
}

func gateFit(t *testing.T, train []features.Sample) *model.TargetModel {
	t.Helper()
	cfg := fit.DefaultOptions()
	m, err := fit.Model(context.Background(), gateSchema, fit.BuildDataset(gateSchema, features.TTFT, train), fit.Dataset{}, cfg,
		fit.Inputs{Quantile: model.DefaultQuantile})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// altered returns a copy of m changed by f, prepared.
func altered(t *testing.T, m *model.TargetModel, f func(*model.TargetModel)) *model.TargetModel {
	t.Helper()
	c := *m
	f(&c)
	if err := c.Prepare(); err != nil {
		t.Fatal(err)
	}
	return &c
}

// gateCase is a model fitted on 400 generated samples, 200 more held out,
// and the training labels, from rng; rng goes on for the test's own.
func gateCase(t *testing.T, rng *rand.Rand) (good *model.TargetModel, holdout []features.Sample, labels []float64) {
	t.Helper()
	train, holdout := gateSamples(rng, 400, 1), gateSamples(rng, 200, 1)
	return gateFit(t, train), holdout, labelsOf(train, features.TTFT)
}

func TestGateJudge(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	good, holdout, labels := gateCase(t, rng)
	constant := func(ms float64) func(*model.TargetModel) {
		return func(m *model.TargetModel) { m.MinMs, m.MaxMs = ms, ms }
	}
	// A drift: latency tripled; the live samples say so, the holdout not yet.
	drifted := gateSamples(rng, 200, 3)
	driftFit := gateFit(t, gateSamples(rng, 400, 3))
	// The holdout a while after the drift began: the rows before, and 50
	// since, which a judged drift measures on.
	since := time.Unix(1_800_000_600, 0).UTC()
	after := gateSamples(rng, 50, 3)
	for i := range after {
		after[i].Timestamp = since.Add(time.Duration(i) * time.Second)
	}
	holdoutSince := append(append([]features.Sample(nil), holdout...), after...)
	fewSince := append(append([]features.Sample(nil), holdout...), after[:5]...)

	for _, tc := range []struct {
		name         string
		cand, served *model.TargetModel
		recent       []features.Sample
		holdout      []features.Sample // nil: holdout
		driftSince   time.Time
		reason       string // "" = passes
		holdoutRows  int    // rows measured; 0: len(holdout)
	}{
		{"first model, sane", good, nil, nil, nil, time.Time{}, "", 0},
		{"retrained, as good", gateFit(t, gateSamples(rng, 400, 1)), good, nil, nil, time.Time{}, "", 0},
		{"first model, every leaf 50", altered(t, good, constant(good.MaxMs)), nil, nil, nil, time.Time{}, GateOutOfBand, 0},
		{"served TPOT fell to 0.16 ms", altered(t, good, constant(0.16)), good, nil, nil, time.Time{}, GateOutOfBand, 0},
		{"twice too slow", altered(t, good, func(m *model.TargetModel) { m.LogShift = math.Log(2) }), good, nil, nil, time.Time{}, GateWorseThanServed, 0},
		{"first model, twice too slow", altered(t, good, func(m *model.TargetModel) { m.LogShift = math.Log(3) }), nil, nil, nil, time.Time{}, GateWorseThanConstant, 0},
		{"slightly worse", altered(t, good, func(m *model.TargetModel) { m.LogShift = 0.05 }), good, nil, nil, time.Time{}, "", 0},
		{"worse on live samples", altered(t, good, func(m *model.TargetModel) { m.LogShift = -math.Log(2) }), good, gateSamples(rng, 100, 1), nil, time.Time{}, GateWorseThanServed, 0},
		// A win on the live samples alone does not skip the holdout: one
		// burst can fill a live window (issue 26).
		{"a rise the live samples show, not judged a drift", driftFit, good, drifted, nil, time.Time{}, GateWorseThanServed, 0},
		{"first model, a rise not judged a drift", driftFit, nil, drifted, nil, time.Time{}, GateWorseThanConstant, 0},
		// A drift the trainer judged: measured on the holdout since.
		{"a drift the trainer judged", driftFit, good, drifted, holdoutSince, since, "", len(after)},
		{"the old model after a judged drift", good, driftFit, drifted, holdoutSince, since, GateWorseThanServed, len(after)},
		{"first model after a judged drift", driftFit, nil, drifted, holdoutSince, since, "", len(after)},
		{"a judged drift with too few rows since", driftFit, good, drifted, fewSince, since, GateWorseThanServed, len(fewSince)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := GateConfig{}
			g.setDefaults()
			ho := tc.holdout
			if ho == nil {
				ho = holdout
			}
			v := judge[*model.TargetModel](g, &podModels{tg: features.TTFT}, tc.cand, tc.served, nil, features.TTFT,
				gateEvidence{holdout: ho, labels: labels, recent: tc.recent, driftSince: tc.driftSince})
			if v.Passed != (tc.reason == "") || v.Reason != tc.reason {
				t.Fatalf("verdict %+v (served %+v); want reason %q", v, v.Served, tc.reason)
			}
			if !v.Passed && v.Detail == "" {
				t.Error("a refusal without a detail")
			}
			rows := tc.holdoutRows
			if rows == 0 {
				rows = len(holdout)
			}
			if v.Candidate.HoldoutRows != rows || (tc.served != nil) != (v.Served != nil) {
				t.Errorf("figures %+v, served %+v; want %d held-out rows", v.Candidate, v.Served, rows)
			}
		})
	}
}

func TestProbeGrid(t *testing.T) {
	got := probeGrid([]model.Range{{Min: 0, Max: 10}, {Min: -math.MaxFloat64, Max: math.MaxFloat64}})
	want := [][]float64{{5, 0}, {0, 0}, {10, 0}, {5, -math.MaxFloat64}, {5, math.MaxFloat64}}
	if len(got) != len(want) {
		t.Fatalf("%d probes, want %d", len(got), len(want))
	}
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Errorf("probe %d = %v, want %v", i, got[i], want[i])
			}
		}
	}
}

// Issue 11 row 4: an xgboost run that writes a well-formed model whose
// every leaf is 50 was published (holdout MAPE 734,697%, TTFT predictions
// of 507 s). The gate keeps the bundle in service, says why in Status,
// counts the refusal; --publish-force publishes it anyway.
func TestGateRefusesAbsurdTrees(t *testing.T) {
	realXGBoost(t)
	dir := t.TempDir()
	mode := filepath.Join(dir, "mode")
	script := filepath.Join(dir, "xgboost")
	// leaf50 writes a model that matches the run's rounds, features (the
	// num_col of its binary matrix, a uint64 74 bytes in: xgboost/matrix.go)
	// and base score (the checks xgboost.Train makes) but whose every tree
	// is a single leaf of 50.
	body := `#!/bin/sh
case "$(cat ` + mode + ` 2>/dev/null)" in
leaf50) ;;
*) exec xgboost "$@" ;;
esac
rounds=$(sed -n 's/^num_round = //p' "$1")
base=$(sed -n 's/^base_score = //p' "$1")
features=$(od -An -t u8 -j 74 -N 8 train.dmatrix | tr -d ' ')
tree='{"id":ID,"left_children":[-1],"right_children":[-1],"split_indices":[0],"split_conditions":[50],"default_left":[0],"split_type":[0],"categories":[],"categories_nodes":[],"categories_segments":[],"categories_sizes":[],"tree_param":{"num_nodes":"1","size_leaf_vector":"0"}}'
trees=""; info=""; i=0
while [ $i -lt $rounds ]; do
	[ $i -gt 0 ] && trees="$trees," && info="$info,"
	trees="$trees$(echo "$tree" | sed "s/ID/$i/")"; info="${info}0"; i=$((i + 1))
done
printf '{"learner":{"learner_model_param":{"base_score":"%s","num_class":"0","num_feature":"%s","num_target":"1"},"objective":{"name":"reg:squarederror"},"gradient_booster":{"name":"gbtree","model":{"gbtree_model_param":{"num_parallel_tree":"1","num_trees":"%s","size_leaf_vector":"0"},"tree_info":[%s],"trees":[%s]}}}}' "$base" "$features" "$rounds" "$info" "$trees" > model.json
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	setMode := func(m string) {
		if err := os.WriteFile(mode, []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	newTrainer := func(f *trainerFixture, force bool) (*Trainer, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		opts := fit.DefaultOptions()
		opts.Params.Rounds = 20
		opts.MinTreeRows = 1
		opts.XGBoost = &xgboost.CLI{Binary: script, TempDir: t.TempDir(), Timeout: time.Minute}
		// Self-tuning off: it would score the absurd trees against the
		// line on the newest rows and choose the line, and this is the
		// gate's test.
		tr, err := New(Config{Fit: opts, BundleDir: filepath.Join(f.dir, "bundles"), Metrics: NewMetrics(reg),
			Gate: GateConfig{Force: force}, Logger: slog.New(slog.DiscardHandler), Select: SelectConfig{Off: true}}, f.db)
		if err != nil {
			t.Fatal(err)
		}
		return tr, reg
	}
	rejections := func(tr *Trainer) float64 {
		return testutil.ToFloat64(tr.cfg.Metrics.gateRejections.WithLabelValues("ttft", GateOutOfBand))
	}

	t.Run("first model", func(t *testing.T) {
		setMode("leaf50")
		f := newFixture(t)
		tr, _ := newTrainer(f, false)
		f.add(t, 200)
		pub, err := tr.Retrain(context.Background())
		if pub != nil || tr.Current() != nil {
			t.Fatalf("published %+v", pub.Bundle.TTFT)
		}
		if err != nil {
			t.Errorf("retrain error %v: a refusal is not a failure", err)
		}
		st := tr.Status().Targets["ttft"]
		if st.Rejected == nil || st.Rejected.Reason != GateOutOfBand || st.GateRejections != 1 || st.Rejected.Published {
			t.Fatalf("status %+v", st.Rejected)
		}
		if st.LastSuccess != (time.Time{}) {
			t.Errorf("last success %v of a model never served", st.LastSuccess)
		}
		if n := rejections(tr); n != 1 {
			t.Errorf("rejections counter %v", n)
		}
		// Same samples, same verdict: not fitted again.
		if pub, _ := tr.Retrain(context.Background()); pub != nil || tr.Status().Targets["ttft"].Runs != 1 {
			t.Error("the refused samples were fitted again")
		}
	})

	t.Run("replacing a good model", func(t *testing.T) {
		setMode("")
		f := newFixture(t)
		tr, _ := newTrainer(f, false)
		f.add(t, 200)
		good := retrain(t, tr)
		if good == nil || good.Bundle.TTFT.Trees == nil {
			t.Fatal("no tree model from the real xgboost")
		}
		setMode("leaf50")
		f.add(t, 150)
		if pub, _ := tr.Retrain(context.Background()); pub != nil || tr.Current() != good {
			t.Fatal("the absurd model replaced the good one")
		}
		st := tr.Status().Targets["ttft"]
		if st.Rejected == nil || st.Rejected.Served == nil || st.Rejected.Candidate.MaxPredictedMs <= st.Rejected.LabelBandMs[1] {
			t.Fatalf("status %+v", st.Rejected)
		}
		t.Logf("refused: %s (%s); candidate holdout MAPE %.0f%%, served %.1f%%", st.Rejected.Reason, st.Rejected.Detail,
			st.Rejected.Candidate.HoldoutMAPE, st.Rejected.Served.HoldoutMAPE)
		if st.ServingLinear || !st.LastSuccess.Equal(tr.Status().Targets["ttft"].LastSuccess) {
			t.Errorf("status describes the refused model: %+v", st)
		}
		// xgboost is sane again: the next samples publish.
		setMode("")
		f.add(t, 150)
		if pub := retrain(t, tr); pub == nil || tr.Status().Targets["ttft"].Gate.Passed != true {
			t.Fatal("a sane model after a refusal was not published")
		}
	})

	t.Run("forced", func(t *testing.T) {
		setMode("leaf50")
		f := newFixture(t)
		tr, _ := newTrainer(f, true)
		f.add(t, 200)
		pub, _ := tr.Retrain(context.Background())
		if pub == nil {
			t.Fatal("--publish-force did not publish")
		}
		v := tr.Status().Targets["ttft"].Gate
		if v == nil || v.Passed || !v.Forced || !v.Published || rejections(tr) != 1 {
			t.Errorf("verdict %+v", v)
		}
	})
}

// The gate's live window takes at most a tenth of its rows from one
// minute of arrivals: one burst of 500, however it is split into uploads,
// leaves the rows of the minutes before in the window, and under steady
// traffic the window is the newest rows, as a plain ring would be. Before
// issue 26 the burst alone was the window, and decided the verdict.
func TestRecentSamplesBoundOneMinute(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	start := time.Unix(1_800_000_000, 0)
	r := recentSamples{size: 500, spread: 10}
	for m := range 20 { // steady: 30 rows a minute
		r.add(gateSamples(rng, 30, 1), features.TTFT, start.Add(time.Duration(m)*time.Minute))
	}
	if n := len(r.get()); n != 500 {
		t.Fatalf("%d rows after 600 steady ones, want 500", n)
	}
	burstAt := start.Add(20 * time.Minute)
	for range 5 { // the burst: five uploads of 100 rows, TTFT x 20
		r.add(gateSamples(rng, 100, 20), features.TTFT, burstAt)
	}
	got := r.get()
	burst := 0
	for _, s := range got {
		if s.ActualTTFTMs > 200 {
			burst++
		}
	}
	if len(got) != 500 || burst > 50 {
		t.Fatalf("%d rows, %d of them the burst's; want 500, at most 50", len(got), burst)
	}
	// The burst's newest rows are the ones kept, the minutes before it
	// next: the window ends with 50 burst rows.
	for _, s := range got[len(got)-50:] {
		if s.ActualTTFTMs <= 200 {
			t.Fatal("the window does not end with the burst's newest rows")
		}
	}
	// Unlabelled samples are not kept.
	r.add([]features.Sample{{Row: features.Row{InputTokenLength: 10}}}, features.TTFT, burstAt.Add(time.Minute))
	if n := len(r.get()); n != 500 {
		t.Fatalf("%d rows after an unlabelled sample", n)
	}
}

// A minute of poisoned rows can be most of a young store's holdout: the
// candidate trained on them is refused for what it does to the rows of
// the minute before, although over the whole holdout the poisoned minute
// hides it (92% against 78% there). Before, it was published.
func TestGateJudgesEveryMinuteOfTheHoldout(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	train := gateSamples(rng, 400, 1)
	good := gateFit(t, train)
	poison := gateSamples(rng, 160, 20)
	for i := range poison {
		poison[i].Timestamp = poison[i].Timestamp.Add(5 * time.Minute)
	}
	holdout := append(gateSamples(rng, 40, 1), poison...)
	labels := labelsOf(append(train, gateSamples(rng, 400, 20)...), features.TTFT)
	cand := altered(t, good, func(m *model.TargetModel) { m.LogShift += math.Log(2) })
	g := GateConfig{}
	g.setDefaults()
	v := judge[*model.TargetModel](g, &podModels{tg: features.TTFT}, cand, good, nil, features.TTFT,
		gateEvidence{holdout: holdout, labels: labels})
	if v.Served == nil || g.muchWorse(v.Candidate.HoldoutMAPE, v.Served.HoldoutMAPE) {
		t.Fatalf("figures %+v against %+v: the whole holdout should not refuse it", v.Candidate, v.Served)
	}
	if v.Passed || v.Reason != GateWorseThanServed || !strings.Contains(v.Detail, "held-out rows of") {
		t.Fatalf("verdict %+v; want refused for the first minute's rows", v)
	}
	// The same candidate judged on one minute's rows alone: the whole
	// holdout's rule, nothing more.
	v = judge[*model.TargetModel](g, &podModels{tg: features.TTFT}, cand, good, nil, features.TTFT,
		gateEvidence{holdout: poison, labels: labels})
	if !v.Passed {
		t.Fatalf("verdict %+v on the poisoned minute alone", v)
	}
}

// A burst may buy the model in steps, each within the rule against the
// model just before it; not past the rule against the model in service
// when the burst began. Before, four such steps took the clean MAPE from
// 13% to 37%.
func TestGateJudgesAgainstTheModelBeforeABurst(t *testing.T) {
	good, holdout, labels := gateCase(t, rand.New(rand.NewPCG(7, 8)))
	shifted := func(f float64) *model.TargetModel {
		return altered(t, good, func(m *model.TargetModel) { m.LogShift += math.Log(f) })
	}
	step, cand := shifted(1.3), shifted(1.45)
	g := GateConfig{}
	g.setDefaults()
	judgeIt := func(before *model.TargetModel) GateVerdict {
		return judge[*model.TargetModel](g, &podModels{tg: features.TTFT}, cand, step, before, features.TTFT,
			gateEvidence{holdout: holdout, labels: labels})
	}
	if v := judgeIt(nil); !v.Passed {
		t.Fatalf("against the step before alone: %+v; want passed", v)
	}
	v := judgeIt(good)
	if v.Passed || v.Reason != GateWorseThanServed || !strings.Contains(v.Detail, "when the burst began") {
		t.Fatalf("against the model before the burst: %+v; want refused", v)
	}
}

// While a burst goes on, a candidate's bounds may not be bought either:
// one whose quantile lies far wider of its predictions than that of the
// model in service when the burst began is refused, its central
// predictions unchanged; a little wider passes, and outside a burst the
// rule does not apply. Before, one upload of 500 rows with TTFT x 20
// widened the reported 95% bound from 2.2 to 28 times the prediction.
func TestGateRefusesBoundsABurstWidened(t *testing.T) {
	good, holdout, labels := gateCase(t, rand.New(rand.NewPCG(9, 10)))
	// widened scales the calibration's residual quantiles from the
	// from-th percentile on.
	widened := func(by float64, from int) *model.TargetModel {
		return altered(t, good, func(m *model.TargetModel) {
			r := make([]float64, len(m.Calibration.LogResiduals))
			for i, v := range m.Calibration.LogResiduals {
				r[i] = v
				if i+1 >= from {
					r[i] = v * by
				}
			}
			c, err := model.NewCalibration(m.Calibration.Source, r)
			if err != nil {
				t.Fatal(err)
			}
			m.Calibration = c
		})
	}
	g := GateConfig{}
	g.setDefaults()
	judgeIt := func(cand, before *model.TargetModel) GateVerdict {
		return judge[*model.TargetModel](g, &podModels{tg: features.TTFT}, cand, good, before, features.TTFT,
			gateEvidence{holdout: holdout, labels: labels, quantile: 0.9})
	}
	wide := widened(10, 0)
	if v := judgeIt(wide, good); v.Passed || v.Reason != GateWiderBounds || !strings.Contains(v.Detail, "when the burst began") {
		t.Fatalf("bounds ten times as wide during a burst: %+v; want refused", v)
	}
	// The quantile served unmoved, the 95% bound reported beside it far
	// wider: refused too.
	if v := judgeIt(widened(10, 93), good); v.Passed || v.Reason != GateWiderBounds || !strings.Contains(v.Detail, "quantile 0.95") {
		t.Fatalf("the 95%% bound ten times as wide during a burst: %+v; want refused", v)
	}
	if v := judgeIt(widened(1.1, 0), good); !v.Passed {
		t.Errorf("bounds a tenth wider during a burst: %+v; want passed", v)
	}
	following := judge[*model.TargetModel](g, &podModels{tg: features.TTFT}, wide, good, good, features.TTFT,
		gateEvidence{holdout: holdout, labels: labels, quantile: 0.9, boundsMayWiden: true})
	if !following.Passed {
		t.Errorf("bounds ten times as wide in the burst after a drift: %+v; want passed (the drift's)", following)
	}
	if v := judgeIt(wide, nil); !v.Passed {
		t.Errorf("bounds ten times as wide with no burst going on: %+v; want passed (a drift may widen them)", v)
	}
}

// The bounds rule applies while a burst goes on, but not for a ShiftSpan
// after a drift, nor ever when bursts are trusted, as a replay does: its
// rows arrive faster than the trainer's clock, so no rise in it lasts the
// minutes a drift needs, and a load ramp replayed was judged a burst that
// held every later TTFT model to the first young model's bounds.
func TestBoundsMayWiden(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	span := 10 * time.Minute
	for _, tc := range []struct {
		name      string
		trust     bool
		lastDrift time.Time
		want      bool
	}{
		{"a burst, no drift judged", false, time.Time{}, false},
		{"a burst within a span of a drift", false, now.Add(-span / 2), true},
		{"a burst a span past a drift", false, now.Add(-2 * span), false},
		{"bursts trusted", true, time.Time{}, true},
		{"bursts trusted, a span past a drift", true, now.Add(-2 * span), true},
	} {
		cfg := DriftConfig{ShiftSpan: span, TrustBursts: tc.trust}
		if got := boundsMayWiden(cfg, tc.lastDrift, now); got != tc.want {
			t.Errorf("%s: boundsMayWiden = %v, want %v", tc.name, got, tc.want)
		}
	}
}
