package demo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/orderedjson"
	"github.com/headroomhq/headroom/lab/sim"
)

// PDResult is a whole P/D demo run.
type PDResult struct {
	Layout          string        `json:"layout"`
	PrefillPods     int           `json:"prefill_pods"`
	DecodePods      int           `json:"decode_pods"`
	Rate            float64       `json:"rate"`
	Burstiness      float64       `json:"burstiness"`
	Duration        time.Duration `json:"-"`
	Warmup          time.Duration `json:"-"`
	Seed            uint64        `json:"seed"`
	Requests        int           `json:"requests"`        // per policy run
	WarmupRequests  int           `json:"warmup_requests"` // in the warm-up
	SLO             SLO           `json:"slo,omitzero"`
	KVBytesPerToken float64       `json:"kv_bytes_per_token"`
	XGBoost         bool          `json:"xgboost"`
	// Policies are in the order of PDPolicies.
	Policies    []PDPolicyResult `json:"-"`
	Model       PDModel          `json:"model"`
	History     []Progress       `json:"progress"`
	WallSeconds float64          `json:"wall_seconds"`
}

// Policy returns the named policy's result, or nil.
func (r *PDResult) Policy(name string) *PDPolicyResult {
	for i := range r.Policies {
		if r.Policies[i].Name == name {
			return &r.Policies[i]
		}
	}
	return nil
}

// PDPolicyResult is one policy's run: the fields of PolicyResult, and the
// KV transfers and splits.
type PDPolicyResult struct {
	Name            string         `json:"-"`
	Summary         sim.PDSummary  `json:"-"`
	SimTime         time.Duration  `json:"-"` // when the run's last request ended
	Requests        int            `json:"requests"`
	Completed       int            `json:"completed"`
	TTFTP50Ms       float64        `json:"ttft_p50_ms"`
	TTFTP95Ms       float64        `json:"ttft_p95_ms"`
	TPOTP50Ms       float64        `json:"tpot_p50_ms"`
	TPOTP95Ms       float64        `json:"tpot_p95_ms"`
	E2EP50Ms        float64        `json:"e2e_p50_ms"`
	E2EP95Ms        float64        `json:"e2e_p95_ms"`
	KVTransferP50Ms float64        `json:"kv_transfer_p50_ms"`
	KVTransferP95Ms float64        `json:"kv_transfer_p95_ms"`
	SplitRate       float64        `json:"split_rate"`
	PrefillFailures int            `json:"prefill_failures"`
	SLOAttainment   *float64       `json:"slo_attainment,omitempty"`
	KVMovedGiB      float64        `json:"kv_moved_gib"`
	Links           map[string]int `json:"transfers_by_link"` // completed transfers per link class
	// For the joint policies: what the router did, and the error of the
	// estimates it acted on (the chosen route's), in percent.
	Router   *sim.JointStats `json:"router,omitempty"`
	LiveMAPE *PDLiveMAPE     `json:"live_mape,omitempty"`
	// Lookahead is the simulation work of the oracle's decisions.
	Lookahead *sim.LookaheadStats `json:"lookahead,omitempty"`
	// MsPerDecision is the oracle's wall time per routing decision, the
	// whole run's simulation included.
	MsPerDecision float64 `json:"lookahead_ms_per_decision,omitempty"`
}

// PDLiveMAPE is the error of the chosen routes' estimates: the client's
// TTFT, the TPOT, and the KV transfer of the split ones; null when none.
type PDLiveMAPE struct {
	TTFT     *float64 `json:"ttft"`
	TPOT     *float64 `json:"tpot"`
	Transfer *float64 `json:"kv_transfer"`
}

func pdPolicyResult(name string, f *sim.PDFleet, slo SLO) PDPolicyResult {
	s := f.Summary()
	pr := PDPolicyResult{
		Name: name, Summary: s, SimTime: f.Now(), Requests: s.Requests, Completed: s.Completed,
		TTFTP50Ms: s.TTFT.P50, TTFTP95Ms: s.TTFT.P95, TPOTP50Ms: s.TPOT.P50, TPOTP95Ms: s.TPOT.P95,
		E2EP50Ms: s.E2E.P50, E2EP95Ms: s.E2E.P95,
		KVTransferP50Ms: s.KVTransfer.P50, KVTransferP95Ms: s.KVTransfer.P95,
		SplitRate: s.SplitRate, PrefillFailures: s.PrefillFailed, KVMovedGiB: s.KVTransferMiB / 1024,
		Links: make(map[string]int),
	}
	met := 0
	for _, o := range f.Outcomes() {
		if x := o.Transfer; x != nil && x.End != 0 {
			pr.Links[x.Class.String()]++
		}
		if slo.Met(o.Decode) {
			met++
		}
	}
	if slo.Set() && len(f.Outcomes()) > 0 {
		a := float64(met) / float64(len(f.Outcomes()))
		pr.SLOAttainment = &a
	}
	return pr
}

// PDModel is the bundle in service when the demo ended: its three targets.
type PDModel struct {
	Version  uint64      `json:"version"`
	TTFT     TargetModel `json:"ttft"`
	TPOT     TargetModel `json:"tpot"`
	Transfer TargetModel `json:"kv_transfer"`
}

func finalPDModel(info ModelInfo) PDModel {
	m := finalModel(info)
	target := func(t TargetInfo) TargetModel {
		return TargetModel{Kind: t.Kind, HoldoutMAPE: finite(mapeOrNaN(t)), HoldoutRows: t.Holdout.Rows,
			TrainedOn: t.TrainedOn, TrainSamples: t.TrainSamples, HoldoutSamples: t.HoldoutSamples}
	}
	return PDModel{Version: m.Version, TTFT: m.TTFT, TPOT: m.TPOT, Transfer: target(info.Transfer)}
}

// MarshalJSON writes the policies as one object keyed by name, in the
// comparison's order, after the run's settings: the shape of Result's.
func (r *PDResult) MarshalJSON() ([]byte, error) {
	type plain PDResult
	head, err := json.Marshal(struct {
		DurationS float64 `json:"duration_s"`
		WarmupS   float64 `json:"warmup_s"`
		*plain
	}{r.Duration.Seconds(), r.Warmup.Seconds(), (*plain)(r)})
	if err != nil {
		return nil, err
	}
	o := make(orderedjson.Object, len(r.Policies))
	for i, p := range r.Policies {
		o[i] = orderedjson.Field{Key: p.Name, Value: p}
	}
	pol, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Write(head[:len(head)-1])
	buf.WriteString(`,"policies":`)
	buf.Write(pol)
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// WritePDJSON writes the result, indented.
func WritePDJSON(w io.Writer, r *PDResult) error { return writeIndented(w, "demo --pd", r) }

// WritePDTable writes the comparison, one column per policy, then the
// final model's quality.
func WritePDTable(w io.Writer, r *PDResult) error {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%d agentic requests per policy, the same arrivals for each; %d prefill and %d decode pods, layout %s; %.3g requests/s (burstiness %.3g); seed %d\n\n",
		r.Requests, r.PrefillPods, r.DecodePods, r.Layout, r.Rate, r.Burstiness, r.Seed)
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(label string, get func(*PDPolicyResult) string) {
		cells := []string{label}
		for i := range r.Policies {
			cells = append(cells, get(&r.Policies[i]))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	num := func(format string, get func(*PDPolicyResult) float64) func(*PDPolicyResult) string {
		return func(p *PDPolicyResult) string { return fmt.Sprintf(format, get(p)) }
	}
	row("policy", func(p *PDPolicyResult) string { return p.Name })
	row("TTFT p50 (ms)", num("%.1f", func(p *PDPolicyResult) float64 { return p.TTFTP50Ms }))
	row("TTFT p95 (ms)", num("%.1f", func(p *PDPolicyResult) float64 { return p.TTFTP95Ms }))
	row("TPOT p50 (ms)", num("%.2f", func(p *PDPolicyResult) float64 { return p.TPOTP50Ms }))
	row("TPOT p95 (ms)", num("%.2f", func(p *PDPolicyResult) float64 { return p.TPOTP95Ms }))
	row("E2E p50 (ms)", num("%.1f", func(p *PDPolicyResult) float64 { return p.E2EP50Ms }))
	row("E2E p95 (ms)", num("%.1f", func(p *PDPolicyResult) float64 { return p.E2EP95Ms }))
	row("KV transfer p50 (ms)", num("%.2f", func(p *PDPolicyResult) float64 { return p.KVTransferP50Ms }))
	row("KV transfer p95 (ms)", num("%.2f", func(p *PDPolicyResult) float64 { return p.KVTransferP95Ms }))
	row("split rate", num("%.1f%%", func(p *PDPolicyResult) float64 { return 100 * p.SplitRate }))
	row("KV moved (GiB)", num("%.1f", func(p *PDPolicyResult) float64 { return p.KVMovedGiB }))
	for c := range features.NumLinkClasses {
		name := c.String()
		row("  over "+name, func(p *PDPolicyResult) string { return fmt.Sprint(p.Links[name]) })
	}
	if r.SLO.Set() {
		row("SLO attainment", func(p *PDPolicyResult) string {
			if p.SLOAttainment == nil {
				return "--"
			}
			return fmt.Sprintf("%.1f%%", 100**p.SLOAttainment)
		})
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.SLO.Set() {
		fmt.Fprintf(&buf, "\nSLOs (joint-slo routes on them; attainment for all): %s\n", sloString(r.SLO))
	}
	m := r.Model
	fmt.Fprintf(&buf, "\nfinal bundle v%d: holdout MAPE ttft %s (%d rows), tpot %s (%d rows), kv transfer %s (%d rows)",
		m.Version, pctPtr(m.TTFT.HoldoutMAPE), m.TTFT.HoldoutRows, pctPtr(m.TPOT.HoldoutMAPE), m.TPOT.HoldoutRows,
		pctPtr(m.Transfer.HoldoutMAPE), m.Transfer.HoldoutRows)
	if !r.XGBoost {
		buf.WriteString(" (xgboost not found: linear models only)")
	}
	buf.WriteByte('\n')
	for _, name := range []string{PDJoint, PDJointSLO} {
		p := r.Policy(name)
		if p == nil || p.Router == nil || p.LiveMAPE == nil {
			continue
		}
		fmt.Fprintf(&buf, "%s: %d of %d requests routed on pair predictions (%d split); live MAPE of the chosen routes ttft %s, tpot %s, kv transfer %s\n",
			name, p.Router.Routed, p.Requests, p.Router.Split, pctPtr(p.LiveMAPE.TTFT), pctPtr(p.LiveMAPE.TPOT), pctPtr(p.LiveMAPE.Transfer))
		if p.Router.Failed > 0 {
			fmt.Fprintf(&buf, "warning: %d pair predictions failed (fell back to greedy); the last: %v\n", p.Router.Failed, p.Router.LastError)
		}
	}
	_, err := w.Write(buf.Bytes())
	return err
}
