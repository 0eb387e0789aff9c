package workload

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/lab/trace"
	"github.com/headroomhq/headroom/wire"
)

const tracePath = "../../../../shared/data/traces/sharegpt-h200.jsonl"

func TestLogNormalSample(t *testing.T) {
	d := LogNormal{Mu: math.Log(100), Sigma: 1, Min: 20, Max: 400}
	rng := newRand(1, 1)
	v := make([]float64, 20000)
	for i := range v {
		x := d.Sample(rng)
		if x < d.Min || x > d.Max {
			t.Fatalf("sample %d outside [%d, %d]", x, d.Min, d.Max)
		}
		v[i] = float64(x)
	}
	slices.Sort(v)
	if med := sim.Quantile(v, 0.5); math.Abs(med-100) > 5 {
		t.Errorf("median %.1f, want about 100", med)
	}
	// P(X < 20) = Φ(ln(0.2)) ≈ 5.4%: clipped samples pile up at Min.
	if low := sim.Quantile(v, 0.05); low != 20 {
		t.Errorf("5th percentile %.0f, want the clip 20", low)
	}
}

func TestFitPromptLengthsRecoversParameters(t *testing.T) {
	want := LogNormal{Mu: 5, Sigma: 0.8, Min: 1, Max: 1 << 30}
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	f, _ := os.Create(path)
	rng := newRand(2, 2)
	var lines []byte
	for range 20000 {
		// Whole lengths, as traces record them (the reader rejects others);
		// rounding moves the fitted Mu and Sigma by about 1e-5.
		x := math.Round(math.Exp(want.Mu + want.Sigma*rng.NormFloat64()))
		ttft := features.Sample{Row: features.Row{InputTokenLength: int64(x)}, ActualTTFTMs: 10}
		tpot := features.Sample{Row: features.Row{InputTokenLength: 1}, ActualTPOTMs: 10} // not a TTFT row: ignored
		lines = append(wire.AppendEntry(lines, &ttft), '\n')
		lines = append(wire.AppendEntry(lines, &tpot), '\n')
	}
	f.Write(lines)
	f.Close()
	got, err := fitPromptLengths(path)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got.Mu-want.Mu) > 0.02 || math.Abs(got.Sigma-want.Sigma) > 0.02 {
		t.Errorf("fit %+v, want mu %v sigma %v", got, want.Mu, want.Sigma)
	}
}

// TestChatPromptLengthsAreTheTraceFit keeps the default equal to the fit
// and logs how the fitted distribution's quantiles compare with the trace's.
func TestChatPromptLengthsAreTheTraceFit(t *testing.T) {
	samples, err := trace.ReadFile(tracePath)
	if err != nil {
		t.Skipf("shared trace not available: %v", err)
	}
	fit, err := fitPromptLengths(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	d := ChatPromptLengths
	if math.Abs(fit.Mu-d.Mu) > 5e-4 || math.Abs(fit.Sigma-d.Sigma) > 5e-4 || fit.Min != d.Min || fit.Max != d.Max {
		t.Errorf("default %+v, the trace fits %+v", d, fit)
	}
	var recorded, model []float64
	for _, s := range samples {
		if s.ActualTTFTMs > 0 {
			recorded = append(recorded, float64(s.Row.InputTokenLength))
		}
	}
	rng := newRand(1, 1)
	for range 100000 {
		model = append(model, float64(d.Sample(rng)))
	}
	slices.Sort(recorded)
	slices.Sort(model)
	for _, q := range []float64{0.1, 0.5, 0.9, 0.99} {
		t.Logf("prompt tokens q%.2f: trace %.0f, log-normal %.0f", q, sim.Quantile(recorded, q), sim.Quantile(model, q))
	}
}

// fitPromptLengths fits a log-normal to the prompt lengths of an llm-d
// trace's TTFT rows (maximum likelihood: mean and standard deviation of the
// log), clipped to the range seen.
func fitPromptLengths(tracePath string) (LogNormal, error) {
	samples, err := trace.ReadFile(tracePath)
	if err != nil {
		return LogNormal{}, err
	}
	var logs []float64
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range samples {
		if n := float64(s.Row.InputTokenLength); s.ActualTTFTMs > 0 && n >= 1 {
			logs = append(logs, math.Log(n))
			lo, hi = min(lo, n), max(hi, n)
		}
	}
	if len(logs) < 2 {
		return LogNormal{}, fmt.Errorf("fit prompt lengths on %s: %d usable rows, need 2", tracePath, len(logs))
	}
	mean := 0.0
	for _, l := range logs {
		mean += l
	}
	mean /= float64(len(logs))
	ss := 0.0
	for _, l := range logs {
		ss += (l - mean) * (l - mean)
	}
	return LogNormal{Mu: mean, Sigma: math.Sqrt(ss / float64(len(logs)-1)), Min: int(lo), Max: int(hi)}, nil
}
