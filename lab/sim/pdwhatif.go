package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/headroomhq/headroom/features"
)

// PDLayouts lists the names PlacePods and LayoutLinks accept.
var PDLayouts = []string{"one-node", "one-rack", "racks", "zones", "equal-links"}

// PlacePods places a prefill pool and a decode pool on a cluster of the
// named shape. Pods are numbered prefill first, then decode, and pod k gets
// node k (except on one-node), so the two pools interleave across the
// racks and zones:
//   - one-node: every pod on one host (the NVLink-only case);
//   - one-rack: one node per pod, one rack;
//   - racks: one node per pod, round-robin over 4 racks of one zone;
//   - zones: one node per pod, round-robin over 2 zones of 2 racks each;
//   - equal-links: placed as zones, every link as fast as NVLink
//     (LayoutLinks).
func PlacePods(layout string, prefill, decode int) (p, d []features.Topology, err error) {
	if prefill < 0 || decode < 1 {
		return nil, nil, fmt.Errorf("pods: %d prefill and %d decode, need at least 0 and 1", prefill, decode)
	}
	place := func(k int) features.Topology {
		t := features.Topology{Node: fmt.Sprintf("node-%d", k), Rack: "rack-0", Zone: "zone-a", Region: "region-1"}
		switch layout {
		case "one-node":
			t.Node = "node-0"
		case "racks":
			t.Rack = fmt.Sprintf("rack-%d", k%4)
		case "zones", "equal-links":
			t.Zone = []string{"zone-a", "zone-b"}[k%2]
			t.Rack = fmt.Sprintf("rack-%d", (k/2)%2)
		}
		return t
	}
	if !slices.Contains(PDLayouts, layout) {
		return nil, nil, fmt.Errorf("layout %q: want one of %s", layout, strings.Join(PDLayouts, ", "))
	}
	for k := range prefill {
		p = append(p, place(k))
	}
	for k := range decode {
		d = append(d, place(prefill+k))
	}
	return p, d, nil
}

// PDResult is one P/D router's run.
type PDResult struct {
	Router   string
	Summary  PDSummary
	Outcomes []*PDOutcome
}

// ComparePD replays the same requests through a fresh disaggregated fleet
// under each named router (PDRouterNames), in order.
func ComparePD(ctx context.Context, reqs []*Request, cfg PDConfig, routers []string) ([]PDResult, error) {
	out := make([]PDResult, 0, len(routers))
	for _, name := range routers {
		r, ok := NewPDRouter(name)
		if !ok {
			return nil, fmt.Errorf("p/d router %q: want one of %s", name, strings.Join(PDRouterNames, ", "))
		}
		f, err := SimulatePD(ctx, cfg, r, PDHooks{}, reqs...)
		if err != nil {
			return nil, fmt.Errorf("p/d router %s: %w", name, err)
		}
		out = append(out, PDResult{Router: name, Summary: f.Summary(), Outcomes: f.Outcomes()})
	}
	return out, nil
}

// pdPolicyJSON is one router's line in WritePDJSON: the fields issue 15
// asks `headroom demo --pd --json` to print per policy.
type pdPolicyJSON struct {
	Requests        int     `json:"requests"`
	Completed       int     `json:"completed"`
	TTFTP50         float64 `json:"ttft_p50_ms"`
	TTFTP95         float64 `json:"ttft_p95_ms"`
	TPOTP50         float64 `json:"tpot_p50_ms"`
	TPOTP95         float64 `json:"tpot_p95_ms"`
	E2EP50          float64 `json:"e2e_p50_ms"`
	E2EP95          float64 `json:"e2e_p95_ms"`
	KVTransferP50   float64 `json:"kv_transfer_p50_ms"`
	KVTransferP95   float64 `json:"kv_transfer_p95_ms"`
	SplitRate       float64 `json:"split_rate"`
	PrefillFailures int     `json:"prefill_failures"`
}

// WritePDJSON writes {"policies": {router: {...}}}.
func WritePDJSON(w io.Writer, results []PDResult) error {
	policies := make(map[string]pdPolicyJSON, len(results))
	for _, r := range results {
		s := r.Summary
		policies[r.Router] = pdPolicyJSON{
			Requests: s.Requests, Completed: s.Completed,
			TTFTP50: s.TTFT.P50, TTFTP95: s.TTFT.P95, TPOTP50: s.TPOT.P50, TPOTP95: s.TPOT.P95,
			E2EP50: s.E2E.P50, E2EP95: s.E2E.P95,
			KVTransferP50: s.KVTransfer.P50, KVTransferP95: s.KVTransfer.P95,
			SplitRate: s.SplitRate, PrefillFailures: s.PrefillFailed,
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"policies": policies})
}

// WritePDTable writes one column per router.
func WritePDTable(w io.Writer, results []PDResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t", r.Router)
	}
	fmt.Fprintln(tw)
	rows := []struct {
		label string
		get   func(s *PDSummary) string
	}{
		{"completed", func(s *PDSummary) string { return fmt.Sprint(s.Completed) }},
		{"split rate", func(s *PDSummary) string { return fmt.Sprintf("%.1f%%", 100*s.SplitRate) }},
		{"prefill failures", func(s *PDSummary) string { return fmt.Sprint(s.PrefillFailed) }},
		{"TTFT p50 (ms)", func(s *PDSummary) string { return fmt.Sprintf("%.1f", s.TTFT.P50) }},
		{"TTFT p95 (ms)", func(s *PDSummary) string { return fmt.Sprintf("%.1f", s.TTFT.P95) }},
		{"TPOT p50 (ms)", func(s *PDSummary) string { return fmt.Sprintf("%.2f", s.TPOT.P50) }},
		{"TPOT p95 (ms)", func(s *PDSummary) string { return fmt.Sprintf("%.2f", s.TPOT.P95) }},
		{"E2E p50 (ms)", func(s *PDSummary) string { return fmt.Sprintf("%.1f", s.E2E.P50) }},
		{"E2E p95 (ms)", func(s *PDSummary) string { return fmt.Sprintf("%.1f", s.E2E.P95) }},
		{"KV transfer p50 (ms)", func(s *PDSummary) string { return fmt.Sprintf("%.2f", s.KVTransfer.P50) }},
		{"KV transfer p95 (ms)", func(s *PDSummary) string { return fmt.Sprintf("%.2f", s.KVTransfer.P95) }},
		{"KV moved (GiB)", func(s *PDSummary) string { return fmt.Sprintf("%.1f", s.KVTransferMiB/1024) }},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t", row.label)
		for i := range results {
			fmt.Fprintf(tw, "%s\t", row.get(&results[i].Summary))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// PDSample is one request of a disaggregated run as a routing sidecar
// would report it: the fields issue 15's transfer model learns from, under
// the names the sample wire format gives them.
type PDSample struct {
	Router              string             `json:"router,omitempty"`
	RequestID           int                `json:"request_id"`
	InputTokenLength    int                `json:"input_token_length"`
	OutputTokens        int                `json:"output_tokens"`
	Split               bool               `json:"split"`
	PrefillFailed       bool               `json:"prefill_failed,omitempty"`
	Rejected            bool               `json:"rejected,omitempty"`
	PrefillPod          string             `json:"prefill_pod,omitempty"`
	DecodePod           string             `json:"decode_pod"`
	PrefillTopology     *features.Topology `json:"prefill_topology,omitempty"`
	DecodeTopology      features.Topology  `json:"decode_topology"`
	LinkClass           string             `json:"link_class,omitempty"`
	PrefillMs           float64            `json:"prefill_ms,omitempty"`
	ActualKVTransferMs  float64            `json:"actual_kv_transfer_ms,omitempty"`
	KVTransferTokens    int                `json:"kv_transfer_tokens,omitempty"`
	KVBytesPerToken     float64            `json:"kv_bytes_per_token,omitempty"`
	ConcurrentTransfers int                `json:"concurrent_transfers,omitempty"`
	MeanConcurrent      float64            `json:"mean_concurrent_transfers,omitempty"`
	ActualTTFTMs        float64            `json:"actual_ttft_ms,omitempty"`
	ActualTPOTMs        float64            `json:"actual_tpot_ms,omitempty"`
}

// Sample is o as a sidecar would report it.
func (o *PDOutcome) Sample() PDSample {
	s := PDSample{
		RequestID: o.Request.ID, InputTokenLength: o.Request.PromptTokens, OutputTokens: o.Request.OutputTokens,
		Split: o.Split, PrefillFailed: o.PrefillFailed, Rejected: o.Decode.Rejected,
		DecodePod: fmt.Sprintf("decode-%d", o.DecodePod), DecodeTopology: o.DecodeTopology,
		PrefillMs: durationMs(o.PrefillTime()),
	}
	if o.Split {
		s.PrefillPod = fmt.Sprintf("prefill-%d", o.PrefillPod)
		t := o.PrefillTopology
		s.PrefillTopology = &t
	}
	if x := o.Transfer; x != nil && x.End != 0 {
		s.LinkClass = x.Class.String()
		s.ActualKVTransferMs = durationMs(o.KVTransferTime())
		s.KVTransferTokens = o.KVTransferTokens
		if o.KVTransferTokens > 0 {
			s.KVBytesPerToken = o.KVTransferBytes / float64(o.KVTransferTokens)
		}
		s.ConcurrentTransfers = x.Concurrent
		s.MeanConcurrent = x.MeanConcurrent
	}
	if o.Decode.Done {
		s.ActualTTFTMs = durationMs(o.Decode.TTFT())
		s.ActualTPOTMs = durationMs(o.Decode.TPOT())
	}
	return s
}

// WritePDSamples writes every request of every result as one JSON line.
func WritePDSamples(w io.Writer, results []PDResult) error {
	enc := json.NewEncoder(w)
	for _, r := range results {
		for _, o := range r.Outcomes {
			s := o.Sample()
			s.Router = r.Router
			if err := enc.Encode(s); err != nil {
				return fmt.Errorf("write p/d sample: %w", err)
			}
		}
	}
	return nil
}
