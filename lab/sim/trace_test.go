package sim_test

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/lab/sim/workload"
	"github.com/headroomhq/headroom/lab/trace"
)

const tracePath = "../../../shared/data/traces/sharegpt-h200.jsonl"

// traceLoad is the load profile of the shared trace (its spec): ShareGPT
// requests at 1, 2, 4, 8 and 16 requests/s for 120 s each, on two servers
// with prefix caching off.
func traceLoad(t *testing.T, seed uint64) []*sim.Request {
	t.Helper()
	var reqs []*sim.Request
	for i, rate := range []float64{1, 2, 4, 8, 16} {
		o := workload.DefaultChat(int(rate*120), rate)
		o.Seed = seed + uint64(i)
		stage, err := workload.Chat(o)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Duration(i) * 120 * time.Second
		for _, r := range stage {
			r.ID += len(reqs)
			r.Arrival += start
		}
		reqs = append(reqs, stage...)
	}
	return reqs
}

// simRows runs the trace's load and returns rows in the trace's format,
// labels truncated to whole milliseconds as llm-d's router does.
func simRows(t *testing.T, reqs []*sim.Request, cost sim.CostModel) []features.Sample {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.PrefixCaching = false
	cfg.Cost = cost
	var rows []features.Sample
	row := func(o *sim.Outcome) features.Sample {
		return features.Sample{Row: o.Row}
	}
	_, err := sim.Simulate(context.Background(), cfg, sim.FleetOptions{
		Router: sim.LeastQueue{},
		Hooks: sim.Hooks{
			OnFirstToken: func(o *sim.Outcome) {
				r := row(o)
				r.ActualTTFTMs = math.Trunc(float64(o.TTFT()) / 1e6)
				rows = append(rows, r)
			},
			OnFinish: func(o *sim.Outcome) {
				if o.Request.OutputTokens > 1 {
					r := row(o)
					r.ActualTPOTMs = float64(o.TPOT()) / 1e6
					rows = append(rows, r)
				}
			},
		},
	}, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

type rowStats struct {
	ttftP50, ttftP90, tpotP50, tpotP90, runningMean float64
	kvPerRunning                                    float64 // KV use per request in flight, summed over rows
	// ttftByPrompt is the median TTFT of prompts in 200-token bins.
	ttftByPrompt [6]float64
}

func statsOf(rows []features.Sample) rowStats {
	var ttft, tpot []float64
	var bins [6][]float64
	running, kv := 0.0, 0.0
	for _, r := range rows {
		kv += r.Row.KVCachePercentage
		if r.ActualTTFTMs > 0 {
			ttft = append(ttft, r.ActualTTFTMs)
			if b := int(r.Row.InputTokenLength) / 200; b < len(bins) {
				bins[b] = append(bins[b], r.ActualTTFTMs)
			}
		}
		if r.ActualTPOTMs > 0 {
			tpot = append(tpot, r.ActualTPOTMs)
		}
		running += float64(r.Row.NumRequestRunning)
	}
	median := func(v []float64) float64 {
		slices.Sort(v)
		return sim.Quantile(v, 0.5)
	}
	s := rowStats{
		ttftP50: median(ttft), ttftP90: sim.Quantile(ttft, 0.9),
		tpotP50: median(tpot), tpotP90: sim.Quantile(tpot, 0.9),
		runningMean:  running / float64(len(rows)),
		kvPerRunning: kv / running,
	}
	for i := range bins {
		s.ttftByPrompt[i] = median(bins[i])
	}
	return s
}

// TestSimulatedTraceLoadResemblesTrace runs the trace's own load through the
// fitted model and compares what the router would have recorded with the
// trace. The tolerances are the documented accuracy (docs/SIMULATOR.md):
// medians within 15%, TPOT p90 within 35%, TTFT p90 within 50%. `go test -run
// TestSimulatedTraceLoad -v ./sim` prints the comparison, for the fitted
// model and for its purely linear variant.
func TestSimulatedTraceLoadResemblesTrace(t *testing.T) {
	traceRows, err := trace.ReadFile(tracePath)
	if err != nil {
		t.Skipf("shared trace not available: %v", err)
	}
	fit, err := sim.FitCostModel(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	reqs := traceLoad(t, 1)
	want := statsOf(traceRows)
	got := statsOf(simRows(t, reqs, fit.Model))
	linear := statsOf(simRows(t, reqs, fit.Linear))
	// A knee well past the roofline's, for docs/SIMULATOR.md's discussion.
	late := fit.Model
	late.PrefillFreeTokens = 400
	knee400 := statsOf(simRows(t, reqs, late))
	t.Logf("%-26s %8s %10s %10s %10s", "", "trace", "simulated", "linear", "knee 400")
	for _, c := range []struct {
		name                       string
		want, got, linear, knee400 float64
		tolerance                  float64 // relative, for the fitted model
	}{
		{"TTFT p50 (ms)", want.ttftP50, got.ttftP50, linear.ttftP50, knee400.ttftP50, 0.15},
		{"TTFT p90 (ms)", want.ttftP90, got.ttftP90, linear.ttftP90, knee400.ttftP90, 0.5},
		{"TPOT p50 (ms)", want.tpotP50, got.tpotP50, linear.tpotP50, knee400.tpotP50, 0.15},
		{"TPOT p90 (ms)", want.tpotP90, got.tpotP90, linear.tpotP90, knee400.tpotP90, 0.35},
		{"mean in flight", want.runningMean, got.runningMean, linear.runningMean, knee400.runningMean, 0.15},
	} {
		t.Logf("%-26s %8.1f %10.1f %10.1f %10.1f", c.name, c.want, c.got, c.linear, c.knee400)
		if math.Abs(c.got-c.want) > c.tolerance*c.want {
			t.Errorf("%s: simulated %.1f, trace %.1f (tolerance %.0f%%)", c.name, c.got, c.want, 100*c.tolerance)
		}
	}
	for i := range want.ttftByPrompt {
		t.Logf("TTFT p50, prompt %4d-%4d %8.1f %10.1f %10.1f %10.1f", 200*i, 200*i+199,
			want.ttftByPrompt[i], got.ttftByPrompt[i], linear.ttftByPrompt[i], knee400.ttftByPrompt[i])
	}
	t.Logf("%-26s %8.5f %10.5f", "KV use per request in flight", want.kvPerRunning, got.kvPerRunning)
}

func TestTraceLoadIsDeterministic(t *testing.T) {
	a := simRows(t, traceLoad(t, 7), sim.DefaultCostModel())
	b := simRows(t, traceLoad(t, 7), sim.DefaultCostModel())
	if !slices.Equal(a, b) {
		t.Fatal("two runs with the same seed differ")
	}
	c := simRows(t, traceLoad(t, 8), sim.DefaultCostModel())
	if slices.Equal(a, c) {
		t.Fatal("two seeds give the same run")
	}
}
