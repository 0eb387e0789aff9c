package demo

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/lab/sim"
)

func sampleResult(slo SLO) *Result {
	r := &Result{Servers: 8, Rate: 16, Burstiness: 0.5, Duration: 2 * time.Minute, Warmup: time.Minute, Seed: 3,
		Requests: 100, SLO: slo, XGBoost: true}
	for i, name := range Policies {
		s := sim.Summary{Requests: 100, Completed: 100}
		s.TTFT.P50, s.TTFT.P95 = float64(100+i), float64(300+i)
		s.TPOT.P50, s.TPOT.P95 = 20, 25
		s.E2E.P50 = 2000
		outs := []*sim.PDOutcome{{Decode: &sim.Outcome{Done: true, Request: &sim.Request{OutputTokens: 1}}}}
		pr := summaryResult(name, sim.PDSummary{Summary: s}, outs, 0, slo)
		if name == Predicted {
			pr.LiveMAPE = &TargetPair{TTFT: 8, TPOT: math.NaN()}
			pr.Router = &RouterStats{Routed: 100}
		}
		r.Policies = append(r.Policies, pr)
	}
	mape := 9.5
	r.Model = FinalModel{Version: 12, TTFT: TargetModel{HoldoutMAPE: &mape, HoldoutRows: 40}}
	r.History = []Progress{{Phase: "warm-up", Learning: true, Bundle: 1, Wall: 1500 * time.Millisecond,
		SimTime: 10 * time.Second, HoldoutMAPE: TargetPair{TTFT: 20, TPOT: math.NaN()},
		ProbeMAPE: TargetPair{TTFT: 15, TPOT: 9}, LiveMAPE: TargetPair{TTFT: math.NaN(), TPOT: math.NaN()}}}
	return r
}

func TestResultJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, sampleResult(SLO{TTFTMs: 200})); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Servers  int                        `json:"servers"`
		Duration float64                    `json:"duration_s"`
		SLO      map[string]float64         `json:"slo"`
		Policies map[string]map[string]any  `json:"policies"`
		Model    map[string]json.RawMessage `json:"model"`
		Progress []map[string]any           `json:"progress"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if got.Servers != 8 || got.Duration != 120 || got.SLO["ttft_ms"] != 200 {
		t.Errorf("settings: %+v", got)
	}
	for _, name := range Policies {
		p := got.Policies[name]
		for _, k := range []string{"ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "tpot_p95_ms", "e2e_p50_ms", "slo_attainment"} {
			if _, ok := p[k].(float64); !ok {
				t.Errorf("policy %s: %s = %v, want a number", name, k, p[k])
			}
		}
	}
	// Policies keep the comparison's order.
	var order []string
	s := buf.String()
	for _, name := range Policies {
		order = append(order, name)
		if i := strings.Index(s, `"`+name+`": {`); i < 0 {
			t.Fatalf("policy %s missing", name)
		}
	}
	for i := 1; i < len(order); i++ {
		if strings.Index(s, `"`+order[i-1]+`": {`) > strings.Index(s, `"`+order[i]+`": {`) {
			t.Errorf("policy %s printed before %s", order[i], order[i-1])
		}
	}
	if !strings.Contains(string(got.Model["ttft"]), `"holdout_mape": 9.5`) ||
		!strings.Contains(string(got.Model["tpot"]), `"holdout_mape": null`) {
		t.Errorf("model: %s / %s", got.Model["ttft"], got.Model["tpot"])
	}
	live := got.Policies[Predicted]["live_mape"].(map[string]any)
	if live["ttft"] != 8.0 || live["tpot"] != nil {
		t.Errorf("live MAPE %v: want ttft 8 and tpot null", live)
	}
	p := got.Progress[0]
	if p["wall_s"] != 1.5 || p["sim_s"] != 10.0 || p["bundle"] != 1.0 || p["probe_mape"].(map[string]any)["tpot"] != 9.0 {
		t.Errorf("progress %v", p)
	}

	// Without SLOs there is no attainment to report.
	buf.Reset()
	if err := WriteJSON(&buf, sampleResult(SLO{})); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "slo") {
		t.Errorf("SLO fields without SLOs:\n%s", buf.String())
	}
}

func TestResultTable(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTable(&buf, sampleResult(SLO{})); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"round-robin", "least-queue", "load-prefix", "predicted", "TTFT p95 (ms)", "300.0", "303.0",
		"final bundle v12: holdout MAPE ttft 9.5% (40 rows), tpot --", "100 of 100 requests routed on predictions"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "SLO") {
		t.Errorf("SLO row without SLOs:\n%s", out)
	}
	buf.Reset()
	if err := WriteTable(&buf, sampleResult(SLO{TTFTMs: 200})); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "SLO attainment") || !strings.Contains(buf.String(), "100.0%") ||
		!strings.Contains(buf.String(), "TTFT ≤ 200 ms") {
		t.Errorf("table with SLOs:\n%s", buf.String())
	}
}

func TestProgressLine(t *testing.T) {
	p := sampleResult(SLO{}).History[0]
	p.Dispatched, p.Completed, p.Samples = 51, 33, 83
	got := p.String()
	for _, want := range []string{"[  1.5s] warm-up", "sim   10s", "sent   51", "samples    83", "bundle v1",
		"holdout 20.0%/--", "probe 15.0%/9.0%", "live --/--"} {
		if !strings.Contains(got, want) {
			t.Errorf("line %q lacks %q", got, want)
		}
	}
	base := Progress{Phase: RoundRobin, Done: true, Dispatched: 10, Completed: 10, TTFTP95Ms: 432.4}
	if got := base.String(); !strings.Contains(got, "done: 10 of 10 requests completed, TTFT p95 432 ms") {
		t.Errorf("baseline line %q", got)
	}
	none := Progress{Phase: "warm-up", Learning: true}
	if got := none.String(); !strings.Contains(got, "no model yet") {
		t.Errorf("line before a model %q", got)
	}
}
