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

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/orderedjson"
	"github.com/headroomhq/headroom/lab/sim"
)

// Result is a whole demo run: the single-pool demo's (Servers, a probe)
// or the P/D demo's (Layout, the pools, the KV size).
type Result struct {
	Layout          string        `json:"layout,omitempty"`
	PrefillPods     int           `json:"prefill_pods,omitempty"`
	DecodePods      int           `json:"decode_pods,omitempty"`
	Servers         int           `json:"servers,omitempty"`
	Rate            float64       `json:"rate"`
	Burstiness      float64       `json:"burstiness"`
	Duration        time.Duration `json:"-"`
	Warmup          time.Duration `json:"-"`
	Seed            uint64        `json:"seed"`
	Requests        int           `json:"requests"`                 // per policy run
	WarmupRequests  int           `json:"warmup_requests"`          // in the warm-up
	ProbeRequests   int           `json:"probe_requests,omitempty"` // observations in the probe
	SLO             SLO           `json:"slo,omitzero"`
	KVBytesPerToken float64       `json:"kv_bytes_per_token,omitempty"`
	XGBoost         bool          `json:"xgboost"` // false: the trainer fitted lines only
	// Policies are in the order of the package's Policies (PDPolicies).
	Policies    []PolicyResult `json:"-"`
	Model       FinalModel     `json:"model"`
	History     []Progress     `json:"progress"` // one entry per retrain of the learning runs
	WallSeconds float64        `json:"wall_seconds"`
}

// Disaggregated says the run is the P/D demo's.
func (r *Result) Disaggregated() bool { return r.PrefillPods > 0 }

// Policy returns the named policy's result, or nil.
func (r *Result) Policy(name string) *PolicyResult {
	for i := range r.Policies {
		if r.Policies[i].Name == name {
			return &r.Policies[i]
		}
	}
	return nil
}

// PolicyResult is one policy's run over the comparison's arrivals, in
// either demo; the KV-transfer figures are the P/D demo's.
type PolicyResult struct {
	Name      string
	Summary   sim.PDSummary
	SimTime   time.Duration // when the run's last request ended
	Requests  int
	Completed int
	TTFTP50Ms float64
	TTFTP95Ms float64
	TPOTP50Ms float64
	TPOTP95Ms float64
	E2EP50Ms  float64
	E2EP95Ms  float64
	// SLOAttainment is the fraction of requests that met every SLO given;
	// nil without SLOs.
	SLOAttainment *float64
	PrefixHitRate float64
	// P/D: the KV transfers (completed transfers per link class in Links)
	// and the splits.
	KVTransferP50Ms float64
	KVTransferP95Ms float64
	SplitRate       float64
	PrefillFailures int
	KVMovedGiB      float64
	Links           map[string]int
	// For the learning policies: the error of the estimates the router
	// acted on (the chosen route's), in percent, and what its router did.
	// For the oracles, LiveMAPE is that of their foresight, which only
	// later arrivals make wrong. LiveTransferMAPE is the KV transfer's (P/D
	// only), NaN when no transfer was estimated.
	LiveMAPE         *TargetPair
	LiveTransferMAPE float64
	Router           *RouterStats
	// Regret explains the predicted policy's gap to the oracle.
	Regret *Regret
	// Lookahead is the simulation work of an oracle's decisions;
	// MsPerDecision its wall time per routing decision, the whole run's
	// simulation included.
	Lookahead     *sim.LookaheadStats
	MsPerDecision float64
	// Points are the routed requests' expected and actual TTFTs, for the
	// learning policies and the oracles.
	Points []TTFTPoint
}

// The JSON of a policy: the figures each demo has printed since it was
// first published, in that order.
type (
	latencyJSON struct {
		Requests  int     `json:"requests"`
		Completed int     `json:"completed"`
		TTFTP50Ms float64 `json:"ttft_p50_ms"`
		TTFTP95Ms float64 `json:"ttft_p95_ms"`
		TPOTP50Ms float64 `json:"tpot_p50_ms"`
		TPOTP95Ms float64 `json:"tpot_p95_ms"`
		E2EP50Ms  float64 `json:"e2e_p50_ms"`
		E2EP95Ms  float64 `json:"e2e_p95_ms"`
	}
	routerJSON struct {
		Routed   int `json:"routed"`
		NotReady int `json:"not_ready"`
		Failed   int `json:"failed"`
	}
	singlePoolPolicyJSON struct {
		latencyJSON
		SLOAttainment *float64            `json:"slo_attainment,omitempty"`
		PrefixHitRate float64             `json:"prefix_hit_rate"`
		LiveMAPE      *TargetPair         `json:"live_mape,omitempty"`
		Router        *routerJSON         `json:"router,omitempty"`
		Regret        *Regret             `json:"regret,omitempty"`
		Lookahead     *sim.LookaheadStats `json:"lookahead,omitempty"`
	}
	pdPolicyJSON struct {
		latencyJSON
		KVTransferP50Ms float64        `json:"kv_transfer_p50_ms"`
		KVTransferP95Ms float64        `json:"kv_transfer_p95_ms"`
		SplitRate       float64        `json:"split_rate"`
		PrefillFailures int            `json:"prefill_failures"`
		SLOAttainment   *float64       `json:"slo_attainment,omitempty"`
		KVMovedGiB      float64        `json:"kv_moved_gib"`
		Links           map[string]int `json:"transfers_by_link"`
		Router          *struct {
			routerJSON
			Split        int `json:"split"`
			Extrapolated int `json:"extrapolated"`
		} `json:"router,omitempty"`
		LiveMAPE *struct {
			TTFT     *float64 `json:"ttft"`
			TPOT     *float64 `json:"tpot"`
			Transfer *float64 `json:"kv_transfer"`
		} `json:"live_mape,omitempty"`
		Lookahead     *sim.LookaheadStats `json:"lookahead,omitempty"`
		MsPerDecision float64             `json:"lookahead_ms_per_decision,omitempty"`
	}
)

// MarshalJSON writes the single-pool or the P/D demo's figures.
func (p PolicyResult) MarshalJSON() ([]byte, error) {
	lat := latencyJSON{p.Requests, p.Completed, p.TTFTP50Ms, p.TTFTP95Ms, p.TPOTP50Ms, p.TPOTP95Ms, p.E2EP50Ms, p.E2EP95Ms}
	var router *routerJSON
	if p.Router != nil {
		router = &routerJSON{p.Router.Routed, p.Router.NotReady, p.Router.Failed}
	}
	if p.Summary.PrefillPods == 0 {
		return json.Marshal(singlePoolPolicyJSON{
			latencyJSON: lat, SLOAttainment: p.SLOAttainment, PrefixHitRate: p.PrefixHitRate,
			LiveMAPE: p.LiveMAPE, Router: router, Regret: p.Regret, Lookahead: p.Lookahead,
		})
	}
	v := pdPolicyJSON{
		latencyJSON: lat, KVTransferP50Ms: p.KVTransferP50Ms, KVTransferP95Ms: p.KVTransferP95Ms,
		SplitRate: p.SplitRate, PrefillFailures: p.PrefillFailures, SLOAttainment: p.SLOAttainment,
		KVMovedGiB: p.KVMovedGiB, Links: p.Links, Lookahead: p.Lookahead, MsPerDecision: p.MsPerDecision,
	}
	if router != nil {
		v.Router = &struct {
			routerJSON
			Split        int `json:"split"`
			Extrapolated int `json:"extrapolated"`
		}{*router, p.Router.Split, p.Router.Extrapolated}
	}
	if m := p.LiveMAPE; m != nil {
		v.LiveMAPE = &struct {
			TTFT     *float64 `json:"ttft"`
			TPOT     *float64 `json:"tpot"`
			Transfer *float64 `json:"kv_transfer"`
		}{finite(m.TTFT), finite(m.TPOT), finite(p.LiveTransferMAPE)}
	}
	return json.Marshal(v)
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

// FinalModel is the bundle in service when the demo ended; Transfer, the
// KV-transfer target, in the P/D demo only.
type FinalModel struct {
	Version  uint64       `json:"version"`
	TTFT     TargetModel  `json:"ttft"`
	TPOT     TargetModel  `json:"tpot"`
	Transfer *TargetModel `json:"kv_transfer,omitempty"`
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

// finalModel is info's bundle, with its KV-transfer target when transfers.
func finalModel(info ModelInfo, transfers bool) FinalModel {
	target := func(t TargetInfo) TargetModel {
		return TargetModel{Kind: t.Kind, HoldoutMAPE: finite(mapeOrNaN(t)), HoldoutRows: t.Holdout.Rows,
			TrainedOn: t.TrainedOn, TrainSamples: t.TrainSamples, HoldoutSamples: t.HoldoutSamples}
	}
	m := FinalModel{Version: info.Version, TTFT: target(info.TTFT), TPOT: target(info.TPOT)}
	if transfers {
		x := target(info.Transfer)
		m.Transfer = &x
	}
	return m
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
// model's quality and what the learning policies' routers did.
func WriteTable(w io.Writer, r *Result) error {
	var buf bytes.Buffer
	pd := r.Disaggregated()
	if pd {
		fmt.Fprintf(&buf, "%d agentic requests per policy, the same arrivals for each; %d prefill and %d decode pods, layout %s; %.3g requests/s (burstiness %.3g); seed %d\n\n",
			r.Requests, r.PrefillPods, r.DecodePods, r.Layout, r.Rate, r.Burstiness, r.Seed)
	} else {
		fmt.Fprintf(&buf, "%d agentic requests per policy, the same arrivals for each; %d servers; %.3g requests/s (burstiness %.3g); seed %d\n\n",
			r.Requests, r.Servers, r.Rate, r.Burstiness, r.Seed)
	}
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(label string, get func(*PolicyResult) string) {
		cells := []string{label}
		for i := range r.Policies {
			cells = append(cells, get(&r.Policies[i]))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	num := func(format string, get func(*PolicyResult) float64) func(*PolicyResult) string {
		return func(p *PolicyResult) string { return fmt.Sprintf(format, get(p)) }
	}
	tpot := "%.1f" // the P/D demo's TPOTs differ in their second decimal
	if pd {
		tpot = "%.2f"
	}
	row("policy", func(p *PolicyResult) string { return p.Name })
	row("TTFT p50 (ms)", num("%.1f", func(p *PolicyResult) float64 { return p.TTFTP50Ms }))
	row("TTFT p95 (ms)", num("%.1f", func(p *PolicyResult) float64 { return p.TTFTP95Ms }))
	row("TPOT p50 (ms)", num(tpot, func(p *PolicyResult) float64 { return p.TPOTP50Ms }))
	row("TPOT p95 (ms)", num(tpot, func(p *PolicyResult) float64 { return p.TPOTP95Ms }))
	row("E2E p50 (ms)", num("%.1f", func(p *PolicyResult) float64 { return p.E2EP50Ms }))
	row("E2E p95 (ms)", num("%.1f", func(p *PolicyResult) float64 { return p.E2EP95Ms }))
	if pd {
		row("KV transfer p50 (ms)", num("%.2f", func(p *PolicyResult) float64 { return p.KVTransferP50Ms }))
		row("KV transfer p95 (ms)", num("%.2f", func(p *PolicyResult) float64 { return p.KVTransferP95Ms }))
		row("split rate", num("%.1f%%", func(p *PolicyResult) float64 { return 100 * p.SplitRate }))
		row("KV moved (GiB)", num("%.1f", func(p *PolicyResult) float64 { return p.KVMovedGiB }))
		for c := range features.NumLinkClasses {
			name := c.String()
			row("  over "+name, func(p *PolicyResult) string { return fmt.Sprint(p.Links[name]) })
		}
	}
	if r.SLO.Set() {
		row("SLO attainment", func(p *PolicyResult) string {
			if p.SLOAttainment == nil {
				return "--"
			}
			return fmt.Sprintf("%.1f%%", 100**p.SLOAttainment)
		})
	}
	if !pd {
		row("prefix hit rate", func(p *PolicyResult) string { return fmt.Sprintf("%.1f%%", 100*p.PrefixHitRate) })
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case r.SLO.Set() && pd:
		fmt.Fprintf(&buf, "\nSLOs (joint-slo routes on them; attainment for all): %s\n", sloString(r.SLO))
	case r.SLO.Set():
		fmt.Fprintf(&buf, "\nSLOs: %s\n", sloString(r.SLO))
	}
	m := r.Model
	fmt.Fprintf(&buf, "\nfinal bundle v%d: holdout MAPE ttft %s (%d rows), tpot %s (%d rows)",
		m.Version, pctPtr(m.TTFT.HoldoutMAPE), m.TTFT.HoldoutRows, pctPtr(m.TPOT.HoldoutMAPE), m.TPOT.HoldoutRows)
	if x := m.Transfer; x != nil {
		fmt.Fprintf(&buf, ", kv transfer %s (%d rows)", pctPtr(x.HoldoutMAPE), x.HoldoutRows)
	} else {
		fmt.Fprintf(&buf, "; trained on %d ttft and %d tpot samples", m.TTFT.TrainedOn, m.TPOT.TrainedOn)
	}
	if !r.XGBoost {
		buf.WriteString(" (xgboost not found: linear models only)")
	}
	buf.WriteByte('\n')
	if pd {
		writeJointLines(&buf, r)
	} else {
		writePredictedLines(&buf, r)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// writePredictedLines says what the single-pool demo's predicted policy
// did, and its regret against the oracle.
func writePredictedLines(buf *bytes.Buffer, r *Result) {
	p := r.Policy(Predicted)
	if p == nil || p.LiveMAPE == nil || p.Router == nil {
		return
	}
	fmt.Fprintf(buf, "predicted run: %d of %d requests routed on predictions; live MAPE of those predictions ttft %s, tpot %s\n",
		p.Router.Routed, p.Requests, pct(p.LiveMAPE.TTFT), pct(p.LiveMAPE.TPOT))
	if g := p.Regret; g != nil && g.Decisions > 0 {
		fmt.Fprintf(buf, "against the oracle (the same rule on foreseen latencies): %d of %d decisions differed, costing %.0f ms of TTFT in all as foreseen at dispatch\n",
			g.Disagreements, g.Decisions, g.TTFTMs)
	}
	if p.Router.Failed > 0 {
		fmt.Fprintf(buf, "warning: %d prediction calls failed (fell back to load-prefix); the last: %v\n", p.Router.Failed, p.Router.LastError)
	}
}

// writeJointLines says what the P/D demo's joint policies did.
func writeJointLines(buf *bytes.Buffer, r *Result) {
	for _, name := range []string{PDJoint, PDJointSLO} {
		p := r.Policy(name)
		if p == nil || p.Router == nil || p.LiveMAPE == nil {
			continue
		}
		fmt.Fprintf(buf, "%s: %d of %d requests routed on pair predictions (%d split); live MAPE of the chosen routes ttft %s, tpot %s, kv transfer %s\n",
			name, p.Router.Routed, p.Requests, p.Router.Split, pct(p.LiveMAPE.TTFT), pct(p.LiveMAPE.TPOT), pct(p.LiveTransferMAPE))
		if p.Router.Failed > 0 {
			fmt.Fprintf(buf, "warning: %d pair predictions failed (fell back to greedy); the last: %v\n", p.Router.Failed, p.Router.LastError)
		}
	}
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
