package fit

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/trainer/fit/fittest"
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
// will make in service: forward samples when there are enough, else the
// holdout, pooled with cross-fitted training residuals when it is small.
// Never in-sample.
func TestCalibrationSource(t *testing.T) {
	in := serviceInputs
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
		rows    int
	}{
		{"forward", 100, forward, CalibrationForward, 60},
		{"holdout and cross-fit", 100, forward[:10], CalibrationHoldoutCrossFit, 400},
		{"cross-fit alone", 0, nil, CalibrationCrossFit, 300},
		{"full holdout", 1000, nil, CalibrationHoldout, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultOptions()
			in.Forward = tt.forward
			m, err := Model(context.Background(), fitSchema, train, fitRows(rng, tt.holdout, 0.1, nil), cfg, in)
			if err != nil {
				t.Fatal(err)
			}
			if c := m.Calibration; c.Source != tt.want || c.Rows != tt.rows {
				t.Fatalf("calibration %s on %d rows, want %s on %d", c.Source, c.Rows, tt.want, tt.rows)
			}
			// Residual spread: 0.3 forward, 0.1 otherwise; the 95% point
			// of a normal is 1.645 sd.
			sd := 0.1
			if tt.want == CalibrationForward {
				sd = 0.3
			}
			if got := m.Calibration.LogResidual(0.95); math.Abs(got-1.645*sd) > 0.5*sd {
				t.Errorf("95%% log residual %.3f, want about %.3f", got, 1.645*sd)
			}
		})
	}
}

// Trees fitted to 150 rows follow their noise, so their in-sample residuals
// are much narrower than their errors on new rows. Cross-fitted residuals
// are errors on rows each fold's model did not see: quantiles calibrated on
// them cover new rows as often as they claim, where in-sample ones do not.
func TestCrossFitCalibrationCoversNewRows(t *testing.T) {
	in := serviceInputs
	x := fittest.XGBoost(t)
	rng := rand.New(rand.NewPCG(8, 8))
	cfg := DefaultOptions()
	cfg.XGBoost = x
	cfg.Params.MaxDepth = 6
	cfg.Params.Lambda = 0.1
	train := fitRows(rng, 150, 0.1, nil)
	m, err := Model(context.Background(), fitSchema, train, Dataset{}, cfg, in)
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != model.KindResidual || m.Calibration.Source != CalibrationCrossFit {
		t.Fatalf("model %s calibrated on %s, want trees calibrated by cross-fit", m.Kind, m.Calibration.Source)
	}
	inSample, err := model.NewCalibration("train", logResiduals(m, train))
	if err != nil {
		t.Fatal(err)
	}
	fresh := fitRows(rng, 4000, 0.1, nil)
	coverage := func(c model.Calibration, q float64) float64 {
		hit := 0
		for i, x := range fresh.X {
			if math.Log(fresh.Y[i]/m.Predict(x)) <= c.LogResidual(q) {
				hit++
			}
		}
		return 100 * float64(hit) / float64(len(fresh.Y))
	}
	for _, q := range []float64{0.1, 0.9, 0.95} {
		// 150 calibration rows: the q quantile's own sampling error is a
		// few points.
		if got := coverage(m.Calibration, q); math.Abs(got-100*q) > 5 {
			t.Errorf("cross-fitted q=%v covers %.1f%% of new rows", q, got)
		}
	}
	if got := coverage(inSample, 0.9); got > 85 {
		t.Errorf("in-sample q=0.9 covers %.1f%% of new rows: the trees did not overfit, the test shows nothing", got)
	}
}

// The shift a model is given is the relative-error shift shrunk toward 0
// by its standard error: gone within one, nearly whole many away, never
// larger than the shift nor of the other sign.
func TestShrunkShiftDropsNoiseAndKeepsSignal(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 25))
	normal := func(n int, offset, sd float64) []float64 {
		r := make([]float64, n)
		for i := range r {
			r[i] = offset + sd*rng.NormFloat64()
		}
		return r
	}
	for _, tt := range []struct {
		name string
		r    []float64
		want func(raw, got float64) bool
	}{
		// δ = −1 (weights e, 0.95, 0.37), robust sd 1.41: se 1.02 > |δ|.
		{"within its standard error", []float64{-1, 0.05, 1}, func(_, got float64) bool { return got == 0 }},
		// δ = −0.1, robust sd 0.148, se √(π/2)·0.148/√5 = 0.0831: 1 − se²/δ² = 0.309.
		{"two standard errors off", []float64{-0.4, -0.1, 0, 0.1, 0.4}, func(_, got float64) bool { return math.Abs(got+0.030937) < 1e-5 }},
		{"sixty standard errors off", normal(400, 0.2, 0.05), func(raw, got float64) bool { return math.Abs(got/raw-1) < 0.001 }},
		{"nothing", nil, func(_, got float64) bool { return got == 0 }},
	} {
		raw, got := relativeErrorShift(tt.r), shrunkShift(tt.r)
		if !tt.want(raw, got) {
			t.Errorf("%s: shift %v shrunk to %v", tt.name, raw, got)
		}
	}
	for k := range 200 {
		r := normal(5+k, rng.NormFloat64()*0.1, 0.05+rng.Float64())
		raw, got := relativeErrorShift(r), shrunkShift(r)
		if math.Abs(got) > math.Abs(raw) || got*raw < 0 {
			t.Fatalf("%d residuals: shift %v shrunk to %v", len(r), raw, got)
		}
	}
}

// Forward samples that came out 10% above what earlier models predicted
// (latency drifting up) move the new model's shift up by ForwardShiftGain
// of that, over the shift its training rows alone give.
func TestForwardShiftFollowsDrift(t *testing.T) {
	in := serviceInputs
	rng := rand.New(rand.NewPCG(9, 9))
	train, holdout := fitRows(rng, 400, 0.05, nil), fitRows(rng, 100, 0.05, nil)
	var forward []ForwardSample
	for range 200 {
		x := fitRows(rng, 1, 0.05, nil)
		forward = append(forward, ForwardSample{Actual: 1.1 * x.Y[0], Base: 10 + x.X[0][0] + x.X[0][1]/20})
	}
	fit := func(gain float64, f []ForwardSample) float64 {
		cfg := DefaultOptions()
		cfg.ForwardShiftGain = gain
		in.Forward = f
		m, err := Model(context.Background(), fitSchema, train, holdout, cfg, in)
		if err != nil {
			t.Fatal(err)
		}
		return m.LogShift
	}
	trainOnly := fit(0, nil)
	for _, tt := range []struct {
		gain    float64
		forward []ForwardSample
		want    float64 // over the training rows' shift
	}{
		{0, forward, 0},
		{0.5, forward, 0.5 * math.Log(1.1)},
		{1, forward, math.Log(1.1)},
		{0.5, forward[:10], 0}, // too few to judge
	} {
		if got := fit(tt.gain, tt.forward) - trainOnly; math.Abs(got-tt.want) > 0.015 {
			t.Errorf("gain %v, %d forward samples: shift moved %.4f, want %.4f", tt.gain, len(tt.forward), got, tt.want)
		}
	}
}

// Coverage on the holdout is measured on rows the calibration did not
// come from, so it can disagree with q; on well-behaved data it is near q.
func TestHoldoutCoverage(t *testing.T) {
	in := serviceInputs
	rng := rand.New(rand.NewPCG(4, 4))
	cfg := DefaultOptions()
	in.Quantile = 0.8
	m, err := Model(context.Background(), fitSchema, fitRows(rng, 500, 0.1, nil), fitRows(rng, 2000, 0.1, nil), cfg, in)
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
	in.Forward = forward
	m, err = Model(context.Background(), fitSchema, fitRows(rng, 500, 0.1, nil), fitRows(rng, 500, 0.1, nil), cfg, in)
	if err != nil {
		t.Fatal(err)
	}
	if c := m.HoldoutCoverage; c == nil || c.Percent > 70 {
		t.Errorf("holdout coverage %+v of a too-narrow calibration; want well under 80%%", c)
	}
}

func TestFitTreesOnlyWithEnoughRows(t *testing.T) {
	in := serviceInputs
	x := fittest.XGBoost(t)
	rng := rand.New(rand.NewPCG(5, 5))
	cfg := DefaultOptions()
	cfg.XGBoost = x
	cfg.Params.Rounds = 20
	for _, n := range []int{cfg.MinTreeRows - 1, cfg.MinTreeRows} {
		m, err := Model(context.Background(), fitSchema, fitRows(rng, n, 0.1, nil), Dataset{}, cfg, in)
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
// predictions there, nor must a burst of answers 30 times faster (errors
// answered at once) divide them: the trees' labels are clipped. Their
// relative-error weights (relativeErrorWeights) discount a stall by
// themselves, but without the clip would make each fast answer weigh 30
// times an ordinary one.
func TestTreeLabelClipResistsStalls(t *testing.T) {
	in := serviceInputs
	x := fittest.XGBoost(t)
	stalled := func(x []float64) bool { return x[0] >= 10 && x[0] < 13 }
	stall := func(rng *rand.Rand, by float64) func([]float64) float64 {
		return func(x []float64) float64 {
			if stalled(x) && rng.Float64() < 0.25 {
				return by
			}
			return 1
		}
	}
	ratio := func(clip, by float64) float64 {
		rng := rand.New(rand.NewPCG(6, 6))
		cfg := DefaultOptions()
		cfg.XGBoost = x
		cfg.TreeLabelClip = clip
		m, err := Model(context.Background(), fitSchema, fitRows(rng, 1500, 0.05, stall(rng, by)), Dataset{}, cfg, in)
		if err != nil {
			t.Fatal(err)
		}
		var r []float64
		for _, running := range []float64{10, 11, 12} {
			for prompt := 100.0; prompt < 1000; prompt += 100 {
				r = append(r, m.Predict([]float64{running, prompt})/(10+running+prompt/20))
			}
		}
		return Median(r)
	}
	if got := ratio(3, 30); got > 1.15 {
		t.Errorf("with clipping, ordinary requests near the stalls predicted %.2fx their latency", got)
	}
	// Relative error itself asks for a lower prediction where a quarter of
	// the answers are 30 times faster (it weighs each 30 times); the clip
	// bounds how much lower.
	if got := ratio(3, 1.0/30); got < 0.8 {
		t.Errorf("with clipping, ordinary requests near the fast answers predicted %.2fx their latency", got)
	}
	if got := ratio(0, 1.0/30); got > 0.5 {
		t.Errorf("without clipping answers 30x as fast move predictions only %.2fx: the test shows nothing", got)
	}
}

// Unshifted, a model predicts its line (and trees) as fitted, whatever the
// forward samples say, and calibrates on them as unshifted models would
// have predicted them.
func TestFitNoShift(t *testing.T) {
	in := serviceInputs
	rng := rand.New(rand.NewPCG(9, 9))
	train := fitRows(rng, 300, 0.3, nil)
	fwd := make([]ForwardSample, 100)
	for i := range fwd {
		fwd[i] = ForwardSample{Actual: 100, Base: 80, LogShift: math.Log(1.25)} // shifted models were exact
	}
	for _, noShift := range []bool{false, true} {
		cfg := DefaultOptions()
		cfg.NoShift = noShift
		in.Forward = fwd
		m, err := Model(context.Background(), fitSchema, train, Dataset{}, cfg, in)
		if err != nil {
			t.Fatal(err)
		}
		if noShift != (m.LogShift == 0) {
			t.Errorf("no shift %v: log shift %v", noShift, m.LogShift)
		}
		// Forward residuals: 0 as the shifted models predicted them, log(100/80) unshifted.
		want := 0.0
		if noShift {
			want = math.Log(1.25)
		}
		if got := m.Calibration.LogResidual(0.5); math.Abs(got-want) > 1e-9 {
			t.Errorf("no shift %v: median calibration residual %v, want %v", noShift, got, want)
		}
	}
}

// The live level is carried into the model's calibration and moves its
// quantiles only: every central prediction, and so every MAPE, is the
// same as without it.
func TestFitCarriesTheLevelAndKeepsThePrediction(t *testing.T) {
	in := serviceInputs
	train, holdout := fitRows(rand.New(rand.NewPCG(9, 9)), 400, 0.1, nil), fitRows(rand.New(rand.NewPCG(9, 10)), 100, 0.1, nil)
	cfg := DefaultOptions()
	plain, err := Model(context.Background(), fitSchema, train, holdout, cfg, in)
	if err != nil {
		t.Fatal(err)
	}
	in.Levels = &model.LevelAdjustment{Quantile: 0.9, Level: 0.96, Samples: 300}
	adj, err := Model(context.Background(), fitSchema, train, holdout, cfg, in)
	if err != nil {
		t.Fatal(err)
	}
	if adj.Calibration.Adjustment != in.Levels || plain.Calibration.Adjustment != nil {
		t.Fatalf("adjustments %+v and %+v", adj.Calibration.Adjustment, plain.Calibration.Adjustment)
	}
	if adj.Holdout != plain.Holdout {
		t.Errorf("holdout %+v with the level, %+v without", adj.Holdout, plain.Holdout)
	}
	for _, x := range holdout.X {
		c := plain.Predict(x)
		if adj.Predict(x) != c {
			t.Fatalf("central prediction moved: %v vs %v", adj.Predict(x), c)
		}
		if got, want := adj.Quantile(x, c, 0.9), plain.Quantile(x, c, 0.96); got != want {
			t.Fatalf("0.9 quantile %v, want the unadjusted 0.96 quantile %v", got, want)
		}
	}
	if a, p := adj.HoldoutCoverage.Percent, plain.HoldoutCoverage.Percent; a <= p {
		t.Errorf("holdout coverage %.1f with the level, %.1f without; want higher", a, p)
	}
}

// serviceInputs are a fit's inputs at the service's quantile, and nothing
// else: no forward samples, levels or model in service.
var serviceInputs = Inputs{Quantile: model.DefaultQuantile}
