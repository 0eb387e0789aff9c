package trainer

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
)

// fitSchema is a small schema for fit tests: load, prompt.
var fitSchema = features.MustSchema("num_request_running", "input_token_length")

// fitRows returns rows of fitSchema with y = (10 + running + prompt/20)
// times log-normal noise of spread sd; stall(i, x) may multiply a row.
func fitRows(rng *rand.Rand, n int, sd float64, stall func(x []float64) float64) Dataset {
	var d Dataset
	for range n {
		x := []float64{float64(rng.IntN(30)), float64(16 + rng.IntN(1000))}
		y := (10 + x[0] + x[1]/20) * math.Exp(sd*rng.NormFloat64())
		if stall != nil {
			y *= stall(x)
		}
		d.X, d.Y = append(d.X, x), append(d.Y, y)
	}
	return d
}

func TestRelativeErrorShiftMinimisesRelativeError(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	r := make([]float64, 501)
	for i := range r {
		r[i] = 0.1*rng.NormFloat64() + 0.05*rng.ExpFloat64() // skewed
	}
	mape := func(d float64) float64 {
		var s float64
		for _, v := range r {
			s += math.Abs(1 - math.Exp(d-v))
		}
		return s
	}
	d := relativeErrorShift(r)
	for _, eps := range []float64{-0.01, -0.001, 0.001, 0.01} {
		if mape(d+eps) < mape(d) {
			t.Errorf("shift %v has relative error %v; %v does better (%v)", d, mape(d), d+eps, mape(d+eps))
		}
	}
	if got := relativeErrorShift([]float64{0, math.Log(2), math.Log(4)}); got != 0 {
		t.Errorf("shift of ratios 1, 2, 4 = %v, want 0 (weights 1, 1/2, 1/4)", got)
	}
	if relativeErrorShift(nil) != 0 {
		t.Error("shift of nothing is not 0")
	}
}

func TestTreeShrinkFollowsForwardEvidence(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	forward := func(n int, treesRight bool) []ForwardSample {
		var f []ForwardSample
		for range n {
			base, treeLog := 50+50*rng.Float64(), 0.3*rng.NormFloat64()
			actual := base * math.Exp(0.02*rng.NormFloat64())
			if treesRight {
				actual *= math.Exp(treeLog)
			}
			f = append(f, ForwardSample{Actual: actual, Base: base, TreeLog: treeLog})
		}
		return f
	}
	tests := []struct {
		name string
		f    []ForwardSample
		want float64
	}{
		{"trees helped", forward(200, true), 0},
		{"trees hurt", forward(200, false), 1},
		{"too few to judge", forward(20, false), 0},
		{"linear models only", []ForwardSample{{Actual: 2, Base: 1}, {Actual: 1, Base: 1}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := treeShrink(tt.f, 50); got != tt.want {
				t.Errorf("shrink %v, want %v", got, tt.want)
			}
		})
	}
}

// The calibration comes from the residuals most like the errors the model
// will make in service, in order: forward samples, the holdout, the
// line's cross-validated residuals. Never in-sample.
func TestCalibrationSource(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	train := fitRows(rng, 300, 0.1, nil)
	var forward []ForwardSample
	for range 60 {
		forward = append(forward, ForwardSample{Actual: 100 * math.Exp(0.3*rng.NormFloat64()), Base: 100})
	}
	tests := []struct {
		name    string
		holdout int
		forward []ForwardSample
		want    string
	}{
		{"forward", 100, forward, "forward"},
		{"holdout", 100, forward[:10], "holdout"},
		{"cross-validation", 10, nil, "cross-validation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultFitConfig()
			cfg.Forward = tt.forward
			m, err := Fit(context.Background(), fitSchema, train, fitRows(rng, tt.holdout, 0.1, nil), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if m.Calibration.Source != tt.want {
				t.Fatalf("calibration source %q, want %q", m.Calibration.Source, tt.want)
			}
			// Residual spread: 0.3 forward, 0.1 otherwise; the 95% point
			// of a normal is 1.645 sd.
			sd := 0.1
			if tt.want == "forward" {
				sd = 0.3
			}
			if got := m.Calibration.LogResidual(0.95); math.Abs(got-1.645*sd) > 0.5*sd {
				t.Errorf("95%% log residual %.3f, want about %.3f", got, 1.645*sd)
			}
		})
	}
}

// Coverage on the holdout is measured on rows the calibration did not
// come from, so it can disagree with q; on well-behaved data it is near q.
func TestHoldoutCoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	cfg := DefaultFitConfig()
	cfg.CoverageQuantile = 0.8
	m, err := Fit(context.Background(), fitSchema, fitRows(rng, 500, 0.1, nil), fitRows(rng, 2000, 0.1, nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := m.HoldoutCoverage
	if c == nil || c.Quantile != 0.8 || c.Rows != 2000 || math.Abs(c.Percent-80) > 3 {
		t.Fatalf("holdout coverage %+v, want about 80%% of 2000 rows", c)
	}
	// Calibrated elsewhere (too narrow forward residuals), the holdout
	// shows the shortfall instead of hiding it.
	var forward []ForwardSample
	for range 100 {
		forward = append(forward, ForwardSample{Actual: 100 * math.Exp(0.01*rng.NormFloat64()), Base: 100})
	}
	cfg.Forward = forward
	m, err = Fit(context.Background(), fitSchema, fitRows(rng, 500, 0.1, nil), fitRows(rng, 500, 0.1, nil), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c := m.HoldoutCoverage; c == nil || c.Percent > 70 {
		t.Errorf("holdout coverage %+v of a too-narrow calibration; want well under 80%%", c)
	}
}

func TestFitTreesOnlyWithEnoughRows(t *testing.T) {
	x := realXGBoost(t)
	rng := rand.New(rand.NewPCG(5, 5))
	cfg := DefaultFitConfig()
	cfg.XGBoost = x
	cfg.Params.Rounds = 20
	for _, n := range []int{cfg.MinTreeRows - 1, cfg.MinTreeRows} {
		m, err := Fit(context.Background(), fitSchema, fitRows(rng, n, 0.1, nil), Dataset{}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if want := n >= cfg.MinTreeRows; (m.Kind == model.KindResidual) != want || (m.Trees != nil) != want {
			t.Errorf("%d rows: kind %s; trees wanted: %v", n, m.Kind, want)
		}
	}
}

// A burst of stalled requests (30 times slower, no feature says why) in one
// corner of the feature space must not grow leaves that multiply ordinary
// predictions there: the trees' labels are clipped.
func TestTreeLabelClipResistsStalls(t *testing.T) {
	x := realXGBoost(t)
	stalled := func(x []float64) bool { return x[0] >= 10 && x[0] < 13 }
	stall := func(rng *rand.Rand) func([]float64) float64 {
		return func(x []float64) float64 {
			if stalled(x) && rng.Float64() < 0.25 {
				return 30
			}
			return 1
		}
	}
	ratio := func(clip float64) float64 {
		rng := rand.New(rand.NewPCG(6, 6))
		cfg := DefaultFitConfig()
		cfg.XGBoost = x
		cfg.TreeLabelClip = clip
		m, err := Fit(context.Background(), fitSchema, fitRows(rng, 1500, 0.05, stall(rng)), Dataset{}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var r []float64
		for _, running := range []float64{10, 11, 12} {
			for prompt := 100.0; prompt < 1000; prompt += 100 {
				r = append(r, m.Predict([]float64{running, prompt})/(10+running+prompt/20))
			}
		}
		return medianOf(r)
	}
	if got := ratio(3); got > 1.15 {
		t.Errorf("with clipping, ordinary requests near the stalls predicted %.2fx their latency", got)
	}
	if got := ratio(0); got < 1.3 {
		t.Errorf("without clipping the stalls move predictions only %.2fx: the test shows nothing", got)
	}
}

// The trainer feeds the fit what its models predicted for samples before
// training on them (ObserveServed), and the fit calibrates on them.
func TestTrainerCalibratesOnForwardSamples(t *testing.T) {
	f := newFixture(t)
	tr, err := New(Config{Drift: DriftConfig{Window: 200}}, f.db) // linear only
	if err != nil {
		t.Fatal(err)
	}
	f.add(t, 300)
	if pub := retrain(t, tr); pub == nil || pub.Bundle.TTFT.Calibration.Source == "forward" {
		t.Fatalf("first model: %+v", pub)
	}
	next := syntheticSamples(f.rng, 300)
	if _, err := f.db.Add(next); err != nil {
		t.Fatal(err)
	}
	tr.ObserveServed(next)
	pub := retrain(t, tr)
	if pub == nil {
		t.Fatal("no retrain after 300 new samples")
	}
	if c := pub.Bundle.TTFT.Calibration; c.Source != "forward" || c.Rows != 200 {
		t.Errorf("calibration %s on %d rows, want forward on the window's 200", c.Source, c.Rows)
	}
}
