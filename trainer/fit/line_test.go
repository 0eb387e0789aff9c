package fit

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/features"
)

// lineRows returns rows x = (a, b, noise) with y = 20 + 3a + 0.5b times
// log-normal noise of spread sd; the third column carries no signal.
func lineRows(rng *rand.Rand, n int, sd float64) (X [][]float64, y, w []float64) {
	for range n {
		a, b := rng.Float64()*10, rng.Float64()*100
		X = append(X, []float64{a, b, rng.NormFloat64()})
		v := (20 + 3*a + 0.5*b) * math.Exp(sd*rng.NormFloat64())
		y = append(y, v)
		w = append(w, 1/(v*v))
	}
	return X, y, w
}

func TestFitLineRecoversPhysicalLine(t *testing.T) {
	X, y, w := lineRows(rand.New(rand.NewPCG(1, 2)), 2000, 0.02)
	lin, _, err := Line(X, y, w, DefaultOptions().Line, 1e-3)
	if err != nil {
		t.Fatal(err)
	}
	intercept, coef := lin.OriginalUnits()
	for i, want := range []float64{3, 0.5, 0} {
		if math.Abs(coef[i]-want) > 0.05*math.Max(want, 4) {
			t.Errorf("coefficient %d = %.3f, want %.3f", i, coef[i], want)
		}
	}
	if math.Abs(intercept-20) > 1 {
		t.Errorf("intercept %.2f, want 20", intercept)
	}
}

// A burst of rows 30 times slower than the line, for no reason a feature
// shows, must not tilt it.
func TestFitLineIgnoresStalls(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	X, y, w := lineRows(rng, 500, 0.05)
	for i := range 25 { // stalls at small a only: they would pull the slope down
		X[i][0] = 0.5
		y[i] = 30 * (20 + 1.5 + 0.5*X[i][1])
		w[i] = 1 / (y[i] * y[i])
	}
	cfg := DefaultOptions().Line
	robust, _, err := Line(X, y, w, cfg, 1e-3)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RobustIterations = 0
	plain, _, err := Line(X, y, w, cfg, 1e-3)
	if err != nil {
		t.Fatal(err)
	}
	_, rc := robust.OriginalUnits()
	_, pc := plain.OriginalUnits()
	if math.Abs(rc[0]-3) > 0.3 {
		t.Errorf("robust slope %.2f, want 3", rc[0])
	}
	if math.Abs(pc[0]-3) < math.Abs(rc[0]-3) {
		t.Errorf("plain least squares slope %.2f is no worse than the robust %.2f: the test has no stalls to resist", pc[0], rc[0])
	}
}

// A coefficient whose physical prior is "latency does not fall" is never
// negative, even when the sample says so; the others are free.
func TestFitLineSignConstraints(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var X [][]float64
	var y, w []float64
	for range 300 {
		a, b := rng.Float64(), rng.Float64()
		v := 50 - 10*a + 5*b + rng.NormFloat64()
		X, y, w = append(X, []float64{a, b}), append(y, v), append(w, 1/(v*v))
	}
	cfg := LineOptions{Lambdas: []float64{1e-6}, Signs: []int{1, 1}}
	lin, _, err := Line(X, y, w, cfg, 1e-3)
	if err != nil {
		t.Fatal(err)
	}
	_, coef := lin.OriginalUnits()
	if coef[0] != 0 || math.Abs(coef[1]-5) > 0.5 {
		t.Errorf("coefficients %v, want [0 ~5]: the falsely negative one pinned at zero", coef)
	}
	cfg.Signs = []int{-1, 0}
	lin, _, _ = Line(X, y, w, cfg, 1e-3)
	if _, coef = lin.OriginalUnits(); math.Abs(coef[0]+10) > 0.5 {
		t.Errorf("coefficient allowed to be negative is %v, want about -10", coef[0])
	}
}

// The penalty follows the amount of evidence: a dozen noisy rows give a
// nearly constant line, thousands of clean rows the true slope.
func TestFitLinePenaltyFollowsEvidence(t *testing.T) {
	lambdas := DefaultOptions().Line.Lambdas
	cfg := DefaultOptions().Line
	X, y, w := lineRows(rand.New(rand.NewPCG(7, 8)), 12, 0.3)
	for i := range X {
		X[i][0], X[i][1] = 0, 0 // only noise varies
		X[i][2] = float64(i)
	}
	_, small, err := Line(X, y, w, cfg, 1e-3)
	if err != nil {
		t.Fatal(err)
	}
	X, y, w = lineRows(rand.New(rand.NewPCG(9, 10)), 3000, 0.01)
	_, large, err := Line(X, y, w, cfg, 1e-3)
	if err != nil {
		t.Fatal(err)
	}
	if small != lambdas[len(lambdas)-1] || large >= small {
		t.Errorf("penalty %v on 12 noise rows, %v on 3000 clean rows; want the largest, then smaller", small, large)
	}
}

func TestFitLineRejects(t *testing.T) {
	ok := LineOptions{Lambdas: []float64{1}}
	tests := []struct {
		name    string
		X       [][]float64
		y, w    []float64
		cfg     LineOptions
		wantErr bool
	}{
		{"no rows", nil, nil, nil, ok, true},
		{"label count", [][]float64{{1}}, []float64{1, 2}, []float64{1}, ok, true},
		{"no penalties", [][]float64{{1}}, []float64{1}, []float64{1}, LineOptions{}, true},
		{"sign count", [][]float64{{1}}, []float64{1}, []float64{1}, LineOptions{Lambdas: []float64{1}, Signs: []int{1, 1}}, true},
		{"ragged", [][]float64{{1}, {1, 2}}, []float64{1, 1}, []float64{1, 1}, ok, true},
		{"NaN weight", [][]float64{{1}}, []float64{1}, []float64{math.NaN()}, ok, true},
		{"one row", [][]float64{{1}}, []float64{4}, []float64{1}, ok, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lin, _, err := Line(tt.X, tt.y, tt.w, tt.cfg, 1e-3)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && math.Abs(lin.Predict(tt.X[0])-tt.y[0]) > 1e-6 {
				t.Errorf("one row predicts %v, want %v", lin.Predict(tt.X[0]), tt.y[0])
			}
		})
	}
}

// TPOT on a loaded pod grows with the prompt in flight only up to the
// engine's step budget, which the rows do not carry. The default TPOT
// columns cap the prompt in flight at common budgets, so the line follows
// the saturation for a budget between them; without the caps it can only
// draw one slope through it.
func TestDefaultTPOTColumnsFollowAStepBudget(t *testing.T) {
	const budget = 6000
	rng := rand.New(rand.NewPCG(7, 8))
	var rows []features.Row
	var y, w []float64
	for range 1500 {
		r := features.Row{
			NumRequestRunning:     1 + rng.Int64N(120),
			PrefillTokensInFlight: rng.Int64N(40000),
			KVCachePercentage:     rng.Float64() * 0.6,
			InputTokenLength:      1 + rng.Int64N(8000),
		}
		v := (12 + 0.1*float64(r.NumRequestRunning) + 0.004*math.Min(float64(r.PrefillTokensInFlight), budget)) *
			math.Exp(0.02*rng.NormFloat64())
		rows, y, w = append(rows, r), append(y, v), append(w, 1/(v*v))
	}
	mape := func(columns []string) float64 {
		s := features.MustSchema(columns...)
		X := make([][]float64, len(rows))
		for i := range rows {
			X[i] = s.Build(&rows[i], nil)
		}
		cfg := DefaultOptions().Line
		cfg.Signs = s.Directions()
		lin, _, err := Line(X, y, w, cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for i, x := range X {
			sum += math.Abs(lin.Predict(x)-y[i]) / y[i]
		}
		return 100 * sum / float64(len(y))
	}
	var uncapped []string
	for _, c := range features.DefaultTPOTColumns {
		if !strings.HasPrefix(c, "prefill_tokens_in_flight_upto_") {
			uncapped = append(uncapped, c)
		}
	}
	with, without := mape(features.DefaultTPOTColumns), mape(uncapped)
	t.Logf("line MAPE with the capped prompt in flight %.2f%%, without %.2f%%", with, without)
	if with > without/2 {
		t.Errorf("line MAPE %.2f%% with the capped prompt in flight, %.2f%% without: the caps do not follow the budget", with, without)
	}
}
