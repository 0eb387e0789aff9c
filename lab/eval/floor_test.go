package eval

import (
	"context"
	"math"
	"testing"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/trace"
	"github.com/headroomhq/headroom/trainer/fit"
)

// On a trace whose noise is known, the floor estimators come close to it
// and do not go below it: they measure the noise, not their own luck. The
// synthetic server's TTFT is a known function of the row times 8%
// log-normal noise, so the best any predictor can do is that function
// times the constant with the least relative error.
func TestFloorRecoversKnownNoise(t *testing.T) {
	opts := testOptions(t)
	samples := Synthetic(SyntheticOptions{Rows: 1000, Seed: 5, MaxTokens: 2048})
	rep, err := Floor(context.Background(), samples, opts, 100, features.TTFT)
	if err != nil {
		t.Fatal(err)
	}
	var ratios, pred, actual []float64
	for i := range samples[100:] {
		s := &samples[100+i]
		ratios = append(ratios, s.ActualTTFTMs/SyntheticTTFT(&s.Row))
	}
	c := relativeErrorMedian(ratios)
	for i := range samples[100:] {
		s := &samples[100+i]
		pred = append(pred, c*SyntheticTTFT(&s.Row))
		actual = append(actual, s.ActualTTFTMs)
	}
	truth := mapeOf(pred, actual)
	t.Logf("true floor (the noise-free function, best constant factor): %.2f%%", truth)
	for _, name := range []string{ModelHeadroomHindsight, ModelLinearHindsight, ModelXGBoostLogHindsight, ModelKNN, ModelKNNWindow} {
		r := rep.Find(features.TTFT, name)
		if r == nil || r.Rows != len(actual) {
			t.Fatalf("%s: %+v, want %d rows", name, r, len(actual))
		}
		t.Logf("%-22s %6.2f%%", name, r.MAPE)
		if r.MAPE < truth-0.3 {
			t.Errorf("%s scores %.2f%%, below the noise's own %.2f%%", name, r.MAPE, truth)
		}
	}
	if h := rep.Find(features.TTFT, ModelHeadroomHindsight); h.MAPE > truth+1 {
		t.Errorf("headroom:hindsight scores %.2f%%, more than a point above the true floor %.2f%%: it does not estimate it", h.MAPE, truth)
	}
	if rep.Find(features.TPOT, ModelKNN) != nil {
		t.Error("asked for TTFT alone, got TPOT figures too")
	}
}

// How low can TTFT go on the shared H200 trace? Every estimator sees every
// other row of the trace, the future included; none comes near 0.7× the
// linear model (issue 14's target), and their errors are what the physics
// of a batched server says they should be: a request waits for the step
// in progress, a uniform share of a ~20 ms step, on a TTFT of 50–70 ms.
// `go test ./eval -run TestTTFTNoiseFloor -v` prints the figures
// docs/ACCURACY.md ("How low can TTFT go") quotes.
func TestTTFTNoiseFloor(t *testing.T) {
	opts := testOptions(t)
	samples, err := trace.ReadFile("../../../shared/data/traces/sharegpt-h200.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Floor(context.Background(), samples, opts, 100, features.TTFT)
	if err != nil {
		t.Fatal(err)
	}
	lin := rep.Find(features.TTFT, ModelLinearHindsight)
	best := ""
	for _, r := range rep.Results {
		t.Logf("%-22s rows %d  MAPE %6.2f%%  median APE %5.2f%%  bias %+.2f%%", r.Model, r.Rows, r.MAPE, r.MedianAPE, r.Bias)
		if best == "" || r.MAPE < rep.Find(features.TTFT, best).MAPE {
			best = r.Model
		}
	}
	h, knn := rep.Find(features.TTFT, ModelHeadroomHindsight), rep.Find(features.TTFT, ModelKNN)
	if h.MAPE >= lin.MAPE || knn.MAPE >= lin.MAPE {
		t.Errorf("with hindsight, headroom %.2f%% and neighbours %.2f%% should beat the line alone, %.2f%%", h.MAPE, knn.MAPE, lin.MAPE)
	}
	if b := rep.Find(features.TTFT, best); b.MAPE <= 0.7*lin.MAPE {
		t.Errorf("%s reaches %.2f%%, within 0.7× the line's %.2f%%: the floor is lower than docs/ACCURACY.md says", best, b.MAPE, lin.MAPE)
	}

	// Twins: scored rows with the same batch and queue, KV use within half
	// a point and prompt and prefill in flight within 2% (or 2 tokens).
	// Whatever a model predicts for one it predicts for the other, so their
	// difference is noise no column can explain.
	type row struct {
		r features.Row
		y float64
	}
	var rows []row
	var tpot []float64
	for i := range samples {
		if y, ok := samples[i].Label(features.TTFT); ok && i >= 100 {
			rows = append(rows, row{samples[i].Row, y})
		}
		if y, ok := samples[i].Label(features.TPOT); ok {
			tpot = append(tpot, y)
		}
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= math.Max(2, 0.02*a) }
	var diff, rel, bound []float64
	for i := range rows {
		for j := i + 1; j < len(rows); j++ {
			a, b := &rows[i].r, &rows[j].r
			if a.NumRequestRunning != b.NumRequestRunning || a.NumRequestWaiting != b.NumRequestWaiting ||
				math.Abs(a.KVCachePercentage-b.KVCachePercentage) > 0.005 ||
				!near(float64(a.InputTokenLength)*(1-a.PrefixCacheScore), float64(b.InputTokenLength)*(1-b.PrefixCacheScore)) ||
				!near(float64(a.PrefillTokensInFlight), float64(b.PrefillTokensInFlight)) {
				continue
			}
			ya, yb := rows[i].y, rows[j].y
			d := math.Abs(ya - yb)
			diff = append(diff, d)
			rel = append(rel, 100*d/((ya+yb)/2))
			// One prediction p for both: |ya−yb| ≤ |ya−p| + |yb−p|, so the
			// pair's mean relative error is at least d / (2·max).
			bound = append(bound, 100*d/(2*math.Max(ya, yb)))
		}
	}
	step := fit.Median(tpot)
	t.Logf("twins: %d pairs, median |Δ TTFT| %.1f ms, mean |Δ|/mean %.1f%%; any predictor errs by at least %.1f%% on them",
		len(diff), fit.Median(diff), mean(rel), mean(bound))
	t.Logf("decode step (median TPOT) %.1f ms: two uniform waits within a step differ by %.1f ms at the median, %.1f ms on average",
		step, step*(1-1/math.Sqrt2), step/3)
	// The wait alone: TTFT = b + U·step, U uniform; the best prediction's
	// mean relative error, at the trace's median TTFT.
	ttft := make([]float64, len(rows))
	for i := range rows {
		ttft[i] = rows[i].y
	}
	typical := fit.Median(ttft)
	t.Logf("median TTFT %.1f ms; a uniform wait within one step alone costs the best prediction %.1f%%",
		typical, uniformWaitFloor(typical-step/2, step))
	if len(diff) < 100 {
		t.Fatalf("%d twin pairs, want at least 100", len(diff))
	}
	if m := fit.Median(diff); m < 0.2*step || m > step {
		t.Errorf("twins' median difference %.1f ms, want within a decode step (%.1f ms) and not far below a uniform wait's %.1f ms",
			m, step, step*(1-1/math.Sqrt2))
	}
}

// uniformWaitFloor is the least mean relative error (percent) of any
// prediction of b + U·step with U uniform on [0, 1].
func uniformWaitFloor(b, step float64) float64 {
	const n = 1000
	ys := make([]float64, n)
	for i := range ys {
		ys[i] = b + step*(float64(i)+0.5)/n
	}
	p := relativeErrorMedian(ys)
	preds := make([]float64, n)
	for i := range preds {
		preds[i] = p
	}
	return mapeOf(preds, ys)
}

func mapeOf(pred, actual []float64) float64 {
	var s float64
	for i, a := range actual {
		s += math.Abs(pred[i]-a) / a
	}
	return 100 * s / float64(len(actual))
}
