package sim

// The calibration behind DefaultCostModel: the fit of the linear step cost
// model to an llm-d trace (`headroom calibrate --trace FILE` runs it on a
// user's own trace). TestDefaultCostModelIsTheFit pins the defaults to it
// on the shared H200 trace and prints it for docs/SIMULATOR.md.

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/trace"
)

// Regression is one fitted linear relation and how well it fits the rows it
// was fitted on.
type Regression struct {
	Target string    `json:"target"`
	Terms  []string  `json:"terms"` // "1" is the intercept
	Coef   []float64 `json:"coef"`
	N      int       `json:"n"`
	R2     float64   `json:"r2"`
	// R2Trimmed leaves out the rows whose label is above the 99th
	// percentile: a handful of multi-second stalls otherwise decide R².
	R2Trimmed float64 `json:"r2_trimmed"`
	MAPE      float64 `json:"mape"` // mean |y − ŷ| / y
	// BaselineMAPE is the MAPE of always predicting the median label: what
	// the terms add beyond a constant.
	BaselineMAPE float64 `json:"baseline_mape"`
}

// CostFit is a CostModel fitted to a trace, with the regressions behind it.
type CostFit struct {
	Model CostModel  `json:"model"`
	TPOT  Regression `json:"tpot"`
	TTFT  Regression `json:"ttft"`
	// Linear is the same fit without the knee (PrefillFreeTokens 0): the
	// purely linear model, kept for comparison.
	Linear     CostModel  `json:"linear"`
	LinearTTFT Regression `json:"linear_ttft"`
	// MeanContextTokens is the mean prompt length of the TPOT rows: the
	// typical context of a decoding sequence.
	MeanContextTokens float64 `json:"mean_context_tokens"`
}

// FitCostModel fits the step cost model to an llm-d trace from one server
// type, by two median (least-absolute-deviation) regressions, robust to the
// trace's few multi-second outliers:
//
//	TPOT = a + b·running                                  (every TPOT row)
//	TTFT = α + β·max(0, prompt tokens − K) + γ·running    (TTFT rows with nothing waiting)
//
// A request decoding alone costs one step per token, so a = StepMs +
// DecodeSeqMs + ContextTokenMs·L (L the mean context); each more running
// sequence adds b = DecodeSeqMs + ContextTokenMs·L. A request arriving at an
// idle server (running = 0) waits FrontendMs and one prefill step, so α =
// FrontendMs + StepMs and β = PrefillTokenMs (the context term of a prompt
// is under 0.1 ms at the trace's lengths). K = PrefillFreeTokens is the
// roofline's knee, StepMs/PrefillTokenMs, found by iterating the TTFT fit to
// a fixed point. γ is not used: it is the queueing the simulation produces
// by itself. ContextTokenMs is the hardware prior ContextTokenMsPrior: in
// the trace the context of the other running requests is unknown and a
// request's own prompt has no measurable effect on its TPOT.
func FitCostModel(tracePath string) (CostFit, error) {
	samples, err := trace.ReadFile(tracePath)
	if err != nil {
		return CostFit{}, err
	}
	var tpotX [][]float64
	var tpotY, ttftY []float64
	var ttftRows []features.Row
	ctx := 0.0
	for _, s := range samples {
		if s.ActualTPOTMs > 0 {
			tpotX = append(tpotX, []float64{1, float64(s.Row.NumRequestRunning)})
			tpotY = append(tpotY, s.ActualTPOTMs)
			ctx += float64(s.Row.InputTokenLength)
		}
		if s.ActualTTFTMs > 0 && s.Row.NumRequestWaiting == 0 {
			ttftRows = append(ttftRows, s.Row)
			ttftY = append(ttftY, s.ActualTTFTMs)
		}
	}
	if len(tpotY) < 10 || len(ttftY) < 10 {
		return CostFit{}, fmt.Errorf("fit cost model on %s: %d TPOT and %d TTFT rows, need 10 of each",
			tracePath, len(tpotY), len(ttftY))
	}
	fit := CostFit{MeanContextTokens: ctx / float64(len(tpotY))}
	fit.TPOT, err = medianRegression("actual_tpot_ms", []string{"1", "num_request_running"}, tpotX, tpotY)
	if err != nil {
		return CostFit{}, fmt.Errorf("fit tpot on %s: %w", tracePath, err)
	}
	m := CostModel{ContextTokenMs: ContextTokenMsPrior}
	a, b := fit.TPOT.Coef[0], fit.TPOT.Coef[1]
	ctxCost := m.ContextTokenMs * fit.MeanContextTokens
	m.DecodeSeqMs = max(0, b-ctxCost)
	m.StepMs = a - m.DecodeSeqMs - ctxCost

	fitTTFT := func(knee int) (CostModel, Regression, error) {
		X := make([][]float64, len(ttftRows))
		for i, r := range ttftRows {
			X[i] = []float64{1, max(0, float64(r.InputTokenLength-int64(knee))), float64(r.NumRequestRunning)}
		}
		reg, err := medianRegression("actual_ttft_ms",
			[]string{"1", fmt.Sprintf("max(0, input_token_length - %d)", knee), "num_request_running"}, X, ttftY)
		if err != nil {
			return CostModel{}, Regression{}, fmt.Errorf("fit ttft on %s: %w", tracePath, err)
		}
		m := m
		m.PrefillTokenMs, m.PrefillFreeTokens = max(0, reg.Coef[1]), knee
		m.FrontendMs = max(0, reg.Coef[0]-m.StepMs)
		if err := m.Validate(); err != nil {
			return CostModel{}, Regression{}, fmt.Errorf("fit cost model on %s: %w", tracePath, err)
		}
		return m, reg, nil
	}
	if fit.Linear, fit.LinearTTFT, err = fitTTFT(0); err != nil {
		return CostFit{}, err
	}
	// The knee moves the slope and the slope moves the knee; a few rounds
	// settle both (a repeated knee ends the loop).
	fit.Model, fit.TTFT = fit.Linear, fit.LinearTTFT
	for seen := map[int]bool{0: true}; fit.Model.PrefillTokenMs > 0; {
		knee := int(math.Round(fit.Model.StepMs / fit.Model.PrefillTokenMs))
		if seen[knee] {
			break
		}
		seen[knee] = true
		if fit.Model, fit.TTFT, err = fitTTFT(knee); err != nil {
			return CostFit{}, err
		}
	}
	return fit, nil
}

// medianRegression fits y ≈ X·coef minimising Σ|y − X·coef| by iteratively
// reweighted least squares, and scores the fit on the same rows.
func medianRegression(target string, terms []string, X [][]float64, y []float64) (Regression, error) {
	k := len(terms)
	coef := make([]float64, k)
	w := make([]float64, len(y))
	for i := range w {
		w[i] = 1 // the first pass is ordinary least squares
	}
	for iter := 0; iter < 100; iter++ {
		next, err := weightedLeastSquares(X, y, w)
		if err != nil {
			return Regression{}, err
		}
		delta := 0.0
		for j := range next {
			delta = max(delta, math.Abs(next[j]-coef[j]))
		}
		coef = next
		for i, x := range X {
			// Residuals below 1e-3 ms are capped so one exact fit does not
			// take all the weight.
			w[i] = 1 / max(math.Abs(y[i]-dot(x, coef)), 1e-3)
		}
		if delta < 1e-9 {
			break
		}
	}
	reg := Regression{Target: target, Terms: terms, Coef: coef, N: len(y)}
	pred := make([]float64, len(y))
	for i, x := range X {
		pred[i] = dot(x, coef)
	}
	sorted := slices.Sorted(slices.Values(y))
	reg.R2 = rSquared(y, pred, math.Inf(1))
	reg.R2Trimmed = rSquared(y, pred, Quantile(sorted, 0.99))
	median := Quantile(sorted, 0.5)
	for i := range y {
		reg.MAPE += math.Abs(y[i]-pred[i]) / y[i]
		reg.BaselineMAPE += math.Abs(y[i]-median) / y[i]
	}
	reg.MAPE /= float64(len(y))
	reg.BaselineMAPE /= float64(len(y))
	return reg, nil
}

// rSquared is 1 − SSres/SStot over the rows whose label is at most limit.
func rSquared(y, pred []float64, limit float64) float64 {
	mean, n := 0.0, 0
	for _, v := range y {
		if v <= limit {
			mean += v
			n++
		}
	}
	if n == 0 {
		return 0
	}
	mean /= float64(n)
	var ssRes, ssTot float64
	for i, v := range y {
		if v <= limit {
			ssRes += (v - pred[i]) * (v - pred[i])
			ssTot += (v - mean) * (v - mean)
		}
	}
	if ssTot == 0 {
		return 0
	}
	return 1 - ssRes/ssTot
}

func weightedLeastSquares(X [][]float64, y, w []float64) ([]float64, error) {
	k := len(X[0])
	xtwx := mat.NewDense(k, k, nil)
	xtwy := mat.NewVecDense(k, nil)
	for i, x := range X {
		for a := range k {
			xtwy.SetVec(a, xtwy.AtVec(a)+w[i]*x[a]*y[i])
			for b := range k {
				xtwx.Set(a, b, xtwx.At(a, b)+w[i]*x[a]*x[b])
			}
		}
	}
	var coef mat.VecDense
	if err := coef.SolveVec(xtwx, xtwy); err != nil {
		return nil, fmt.Errorf("solve normal equations: %w", err)
	}
	return coef.RawVector().Data, nil
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
