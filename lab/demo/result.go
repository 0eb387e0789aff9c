package demo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/headroomhq/headroom/internal/orderedjson"
	"github.com/headroomhq/headroom/lab/sim"
)

// Result is a whole demo run.
type Result struct {
	Servers        int           `json:"servers"`
	Rate           float64       `json:"rate"`
	Burstiness     float64       `json:"burstiness"`
	Duration       time.Duration `json:"-"`
	Warmup         time.Duration `json:"-"`
	Seed           uint64        `json:"seed"`
	Requests       int           `json:"requests"`        // per policy run
	WarmupRequests int           `json:"warmup_requests"` // in the warm-up
	ProbeRequests  int           `json:"probe_requests"`  // observations in the probe
	SLO            SLO           `json:"slo,omitzero"`
	XGBoost        bool          `json:"xgboost"` // false: the trainer fitted lines only
	// Policies are in the order of the package's Policies.
	Policies    []PolicyResult `json:"-"`
	Model       FinalModel     `json:"model"`
	History     []Progress     `json:"progress"` // one entry per retrain of the learning runs
	WallSeconds float64        `json:"wall_seconds"`
}

// Policy returns the named policy's result, or nil.
func (r *Result) Policy(name string) *PolicyResult {
	for i := range r.Policies {
		if r.Policies[i].Name == name {
			return &r.Policies[i]
		}
	}
	return nil
}

// PolicyResult is one policy's run over the comparison's arrivals.
type PolicyResult struct {
	Name      string      `json:"-"`
	Summary   sim.Summary `json:"-"`
	Requests  int         `json:"requests"`
	Completed int         `json:"completed"`
	TTFTP50Ms float64     `json:"ttft_p50_ms"`
	TTFTP95Ms float64     `json:"ttft_p95_ms"`
	TPOTP50Ms float64     `json:"tpot_p50_ms"`
	TPOTP95Ms float64     `json:"tpot_p95_ms"`
	E2EP50Ms  float64     `json:"e2e_p50_ms"`
	E2EP95Ms  float64     `json:"e2e_p95_ms"`
	// SLOAttainment is the fraction of requests that met every SLO given;
	// nil without SLOs.
	SLOAttainment *float64 `json:"slo_attainment,omitempty"`
	PrefixHitRate float64  `json:"prefix_hit_rate"`
	// For the predicted policy: the error of the predictions it acted on
	// (the chosen server's), in percent, and what its router did.
	// For the oracles, LiveMAPE is that of their foresight, which only
	// later arrivals make wrong.
	LiveMAPE *TargetPair  `json:"live_mape,omitempty"`
	Router   *RouterStats `json:"router,omitempty"`
	// Regret explains the predicted policy's gap to the oracle.
	Regret *Regret `json:"regret,omitempty"`
	// Lookahead is the simulation work of an oracle's decisions.
	Lookahead *sim.LookaheadStats `json:"lookahead,omitempty"`
	// Points are the routed requests' expected and actual TTFTs, for the
	// predicted policy and the oracles.
	Points []TTFTPoint `json:"-"`
}

func policyResult(name string, outs []*sim.Outcome, s sim.Summary, slo SLO) PolicyResult {
	pr := PolicyResult{
		Name: name, Summary: s, Requests: s.Requests, Completed: s.Completed,
		TTFTP50Ms: s.TTFT.P50, TTFTP95Ms: s.TTFT.P95, TPOTP50Ms: s.TPOT.P50, TPOTP95Ms: s.TPOT.P95,
		E2EP50Ms: s.E2E.P50, E2EP95Ms: s.E2E.P95, PrefixHitRate: s.PrefixHitRate,
	}
	if slo.Set() && len(outs) > 0 {
		met := 0
		for _, o := range outs {
			if slo.Met(o) {
				met++
			}
		}
		a := float64(met) / float64(len(outs))
		pr.SLOAttainment = &a
	}
	return pr
}

// TargetPair is one figure per target; NaN (JSON null) when unknown.
type TargetPair struct {
	TTFT float64
	TPOT float64
}

// MarshalJSON writes {"ttft": x, "tpot": y} with null for NaN.
func (p TargetPair) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		TTFT *float64 `json:"ttft"`
		TPOT *float64 `json:"tpot"`
	}{finite(p.TTFT), finite(p.TPOT)})
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// FinalModel is the bundle in service when the demo ended.
type FinalModel struct {
	Version uint64      `json:"version"`
	TTFT    TargetModel `json:"ttft"`
	TPOT    TargetModel `json:"tpot"`
}

// TargetModel is one target of the final bundle, from GET /model/info.
type TargetModel struct {
	Kind        string   `json:"kind"`
	HoldoutMAPE *float64 `json:"holdout_mape"` // percent; null without a model
	HoldoutRows int      `json:"holdout_rows"`
	TrainedOn   int      `json:"trained_on_samples"` // the model's training rows
	// What the store holds at the end, per side.
	TrainSamples   int `json:"train_samples"`
	HoldoutSamples int `json:"holdout_samples"`
}

func finalModel(info ModelInfo) FinalModel {
	target := func(t TargetInfo) TargetModel {
		return TargetModel{Kind: t.Kind, HoldoutMAPE: finite(mapeOrNaN(t)), HoldoutRows: t.Holdout.Rows,
			TrainedOn: t.TrainedOn, TrainSamples: t.TrainSamples, HoldoutSamples: t.HoldoutSamples}
	}
	return FinalModel{Version: info.Version, TTFT: target(info.TTFT), TPOT: target(info.TPOT)}
}

// Progress is news from a run: at every retrain of a learning run (the
// warm-up and the predicted policy), and at the end of every run.
type Progress struct {
	Wall       time.Duration `json:"-"`
	Rate       float64       `json:"-"` // the run's offered load, requests/s
	Phase      string        `json:"phase"`
	Learning   bool          `json:"-"` // a run that predicts and reports, not a heuristic baseline
	SimTime    time.Duration `json:"-"`
	Done       bool          `json:"done"`
	Dispatched int           `json:"dispatched"`
	Completed  int           `json:"completed"`
	Samples    int           `json:"samples"` // entries the trainer has accepted, over the whole demo
	Bundle     uint64        `json:"bundle"`
	// HoldoutMAPE is the bundle's, from GET /model/info; ProbeMAPE the
	// bundle's on the Probe; LiveMAPE that of the predictions the router
	// acted on since the previous report. All in percent.
	HoldoutMAPE TargetPair `json:"holdout_mape"`
	ProbeMAPE   TargetPair `json:"probe_mape"`
	LiveMAPE    TargetPair `json:"live_mape"`
	// TransferMAPE is the KV-transfer target's, in the P/D demo only.
	TransferMAPE *TransferMAPE `json:"transfer_mape,omitempty"`
	TTFTP95Ms    float64       `json:"-"` // heuristic runs only, for the line
}

// TransferMAPE is the transfer target's error in percent: the bundle's on
// the trainer's holdout, and that of the transfers the router acted on
// since the previous report; null when unknown.
type TransferMAPE struct {
	Holdout *float64 `json:"holdout"`
	Live    *float64 `json:"live"`
}

// send stamps p with the run's rate and, unless it has one, the wall time
// since start, and hands it to sink when there is one.
func (p Progress) send(sink func(Progress), rate float64, start time.Time) {
	p.Rate = rate
	if p.Wall == 0 {
		p.Wall = time.Since(start)
	}
	if sink != nil {
		sink(p)
	}
}

// MarshalJSON adds the durations in seconds.
func (p Progress) MarshalJSON() ([]byte, error) {
	type plain Progress
	return json.Marshal(struct {
		WallS float64 `json:"wall_s"`
		SimS  float64 `json:"sim_s"`
		plain
	}{p.Wall.Seconds(), p.SimTime.Seconds(), plain(p)})
}

// String is the progress line the command prints.
func (p Progress) String() string {
	head := fmt.Sprintf("[%5.1fs] %-11s sim %4.0fs", p.Wall.Seconds(), p.Phase, p.SimTime.Seconds())
	if !p.Learning {
		return fmt.Sprintf("%s  done: %d of %d requests completed, TTFT p95 %.0f ms",
			head, p.Completed, p.Dispatched, p.TTFTP95Ms)
	}
	line := fmt.Sprintf("%s  sent %4d  done %4d  samples %5d  ", head, p.Dispatched, p.Completed, p.Samples)
	if p.Bundle == 0 {
		line += "no model yet"
	} else {
		line += fmt.Sprintf("bundle v%-3d MAPE holdout %s  probe %s  live %s",
			p.Bundle, pair(p.HoldoutMAPE), pair(p.ProbeMAPE), pair(p.LiveMAPE))
		if x := p.TransferMAPE; x != nil {
			line += fmt.Sprintf("  kv transfer holdout %s live %s", pctPtr(x.Holdout), pctPtr(x.Live))
		}
	}
	if p.Done {
		line += "  (run done)"
	}
	return line
}

// ProgressLegend explains the figures of a progress line.
const ProgressLegend = "MAPE figures are ttft/tpot, in percent: holdout = on the trainer's held-out samples; " +
	"probe = on a fixed set of observations never trained on; live = of the predictions the router acted on since the line before"

func pair(p TargetPair) string {
	return strings.TrimSpace(pct(p.TTFT)) + "/" + strings.TrimSpace(pct(p.TPOT))
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "--"
	}
	return fmt.Sprintf("%.1f%%", v)
}

// MarshalJSON writes the policies as one object keyed by name, in the
// comparison's order, after the run's settings.
func (r *Result) MarshalJSON() ([]byte, error) {
	type plain Result
	head, err := json.Marshal(struct {
		DurationS float64 `json:"duration_s"`
		WarmupS   float64 `json:"warmup_s"`
		*plain
	}{r.Duration.Seconds(), r.Warmup.Seconds(), (*plain)(r)})
	if err != nil {
		return nil, err
	}
	pol, err := json.Marshal(byName(r.Policies))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Write(head[:len(head)-1]) // reopen the object
	buf.WriteString(`,"policies":`)
	buf.Write(pol)
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// byName is the policies as one object keyed by name, in the comparison's
// order.
func byName(policies []PolicyResult) orderedjson.Object {
	o := make(orderedjson.Object, len(policies))
	for i, p := range policies {
		o[i] = orderedjson.Field{Key: p.Name, Value: p}
	}
	return o
}

// WriteJSON writes the result, indented.
func WriteJSON(w io.Writer, r *Result) error { return writeIndented(w, "demo", r) }

// writeIndented writes v as indented JSON and a newline; what names the
// output in an error.
func writeIndented(w io.Writer, what string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s json: %w", what, err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, data, "", "  "); err != nil {
		return fmt.Errorf("%s json: %w", what, err)
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

// WriteTable writes the comparison: one column per policy, then the final
// model's quality.
func WriteTable(w io.Writer, r *Result) error {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%d agentic requests per policy, the same arrivals for each; %d servers; %.3g requests/s (burstiness %.3g); seed %d\n\n",
		r.Requests, r.Servers, r.Rate, r.Burstiness, r.Seed)
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(label string, get func(*PolicyResult) string) {
		cells := []string{label}
		for i := range r.Policies {
			cells = append(cells, get(&r.Policies[i]))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	num := func(get func(*PolicyResult) float64) func(*PolicyResult) string {
		return func(p *PolicyResult) string { return fmt.Sprintf("%.1f", get(p)) }
	}
	row("policy", func(p *PolicyResult) string { return p.Name })
	row("TTFT p50 (ms)", num(func(p *PolicyResult) float64 { return p.TTFTP50Ms }))
	row("TTFT p95 (ms)", num(func(p *PolicyResult) float64 { return p.TTFTP95Ms }))
	row("TPOT p50 (ms)", num(func(p *PolicyResult) float64 { return p.TPOTP50Ms }))
	row("TPOT p95 (ms)", num(func(p *PolicyResult) float64 { return p.TPOTP95Ms }))
	row("E2E p50 (ms)", num(func(p *PolicyResult) float64 { return p.E2EP50Ms }))
	row("E2E p95 (ms)", num(func(p *PolicyResult) float64 { return p.E2EP95Ms }))
	if r.SLO.Set() {
		row("SLO attainment", func(p *PolicyResult) string {
			if p.SLOAttainment == nil {
				return "--"
			}
			return fmt.Sprintf("%.1f%%", 100**p.SLOAttainment)
		})
	}
	row("prefix hit rate", func(p *PolicyResult) string { return fmt.Sprintf("%.1f%%", 100*p.PrefixHitRate) })
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.SLO.Set() {
		fmt.Fprintf(&buf, "\nSLOs: %s\n", sloString(r.SLO))
	}
	m := r.Model
	fmt.Fprintf(&buf, "\nfinal bundle v%d: holdout MAPE ttft %s (%d rows), tpot %s (%d rows); trained on %d ttft and %d tpot samples",
		m.Version, pctPtr(m.TTFT.HoldoutMAPE), m.TTFT.HoldoutRows, pctPtr(m.TPOT.HoldoutMAPE), m.TPOT.HoldoutRows,
		m.TTFT.TrainedOn, m.TPOT.TrainedOn)
	if !r.XGBoost {
		buf.WriteString(" (xgboost not found: linear models only)")
	}
	buf.WriteByte('\n')
	if p := r.Policy(Predicted); p != nil && p.LiveMAPE != nil && p.Router != nil {
		fmt.Fprintf(&buf, "predicted run: %d of %d requests routed on predictions; live MAPE of those predictions ttft %s, tpot %s\n",
			p.Router.Routed, p.Requests, pct(p.LiveMAPE.TTFT), pct(p.LiveMAPE.TPOT))
		if g := p.Regret; g != nil && g.Decisions > 0 {
			fmt.Fprintf(&buf, "against the oracle (the same rule on foreseen latencies): %d of %d decisions differed, costing %.0f ms of TTFT in all as foreseen at dispatch\n",
				g.Disagreements, g.Decisions, g.TTFTMs)
		}
		if p.Router.Failed > 0 {
			fmt.Fprintf(&buf, "warning: %d prediction calls failed (fell back to load-prefix); the last: %v\n", p.Router.Failed, p.Router.LastError)
		}
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func pctPtr(v *float64) string {
	if v == nil {
		return "--"
	}
	return fmt.Sprintf("%.1f%%", *v)
}

func sloString(s SLO) string {
	var parts []string
	if s.TTFTMs > 0 {
		parts = append(parts, fmt.Sprintf("TTFT ≤ %g ms", s.TTFTMs))
	}
	if s.TPOTMs > 0 {
		parts = append(parts, fmt.Sprintf("TPOT ≤ %g ms", s.TPOTMs))
	}
	return strings.Join(parts, ", ")
}
