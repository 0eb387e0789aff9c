package suite

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/lab/trace"
)

// PD makes a trace a disaggregated (prefill/decode) pool: the trace's Fleet
// is every pod's engine, its Router a sim.PDRouterNames entry, and the pods
// are placed and linked as below.
//
// Its rows are what llm-d's router records in streaming mode when it
// schedules a request twice (docs/PROTOCOL.md §6: "the TTFT entry describes
// the prefill endpoint and the TPOT entry the decode endpoint"):
//   - a split request gives a TTFT row with the prefill pod's features at
//     dispatch (pod_type "prefill") labelled with the client's TTFT, which
//     spans the prefill, the second hop, the KV transfer and the decode
//     pod's first step, and carrying the measured transfer (Sample.Transfer:
//     its time, tokens, bytes per token, both pods, their placement and the
//     transfers on its link), which the TTFT label then excludes
//     (features.Sample.Label, docs/PROTOCOL.md); and a TPOT row with the
//     decode pod's features at dispatch (pod_type "decode") labelled with
//     the client's TPOT;
//   - a request the router does not split (its uncached prompt is below
//     SplitThreshold) gives both rows from the decode pod (pod_type
//     "decode"), which ran it alone;
//   - a split whose prefill pod failed is recorded like a split (the
//     router chose that prefill pod and never learns the sidecar fell
//     back), so its TTFT row, on the prefill pod's features, carries the
//     wasted prefill and the decode pod's whole run, and no transfer.
type PD struct {
	// Layout is a sim.PDLayouts name; PrefillPods and DecodePods are placed
	// on it by sim.PlacePods.
	Layout      string `json:"layout"`
	PrefillPods int    `json:"prefill_pods"`
	DecodePods  int    `json:"decode_pods"`
	// SplitThreshold is llm-d's pd-profile-handler threshold: a prompt with
	// fewer uncached tokens on the chosen decode pod is not split.
	SplitThreshold int `json:"split_threshold"`
	// Links are the link classes' speeds, one per features.LinkClass, in
	// class order.
	Links              []Link  `json:"links"`
	KVBytesPerToken    float64 `json:"kv_bytes_per_token"`
	PrefillFailureRate float64 `json:"prefill_failure_rate"`
}

// Link is one link class as a manifest spells it.
type Link struct {
	Class       string  `json:"class"` // a features.LinkClass name
	BytesPerSec float64 `json:"bytes_per_sec"`
	LatencyMs   float64 `json:"latency_ms"`
}

// ManifestLinks writes sim's links in a manifest's form.
func ManifestLinks(l sim.Links) []Link {
	out := make([]Link, len(l))
	for c, k := range l {
		out[c] = Link{Class: features.LinkClass(c).String(), BytesPerSec: k.BytesPerSec,
			LatencyMs: float64(k.Latency) / float64(time.Millisecond)}
	}
	return out
}

// simLinks is the inverse of ManifestLinks: every class exactly once, in
// class order, so that a manifest reads the same to a person and to sim.
func (p *PD) simLinks() (sim.Links, error) {
	var out sim.Links
	if len(p.Links) != len(out) {
		return out, fmt.Errorf("pd links: %d given, want one per link class (%d)", len(p.Links), len(out))
	}
	for c, l := range p.Links {
		class, ok := features.ParseLinkClass(l.Class)
		if !ok || int(class) != c {
			return out, fmt.Errorf("pd links: entry %d is %q, want %s", c, l.Class, features.LinkClass(c))
		}
		if math.IsNaN(l.LatencyMs) || math.IsInf(l.LatencyMs, 0) {
			return out, fmt.Errorf("pd links: %s latency %g ms", l.Class, l.LatencyMs)
		}
		out[c] = sim.Link{BytesPerSec: l.BytesPerSec, Latency: time.Duration(math.Round(l.LatencyMs * float64(time.Millisecond)))}
	}
	return out, out.Validate()
}

// config is the disaggregated fleet a P/D trace runs on.
func (t *Trace) pdConfig() (sim.PDConfig, error) {
	p := t.PD
	if t.Fleet.Servers != p.PrefillPods+p.DecodePods {
		return sim.PDConfig{}, fmt.Errorf("pd: fleet servers %d, want prefill_pods + decode_pods = %d (every pod runs the fleet's engine)",
			t.Fleet.Servers, p.PrefillPods+p.DecodePods)
	}
	prefill, decode, err := sim.PlacePods(p.Layout, p.PrefillPods, p.DecodePods)
	if err != nil {
		return sim.PDConfig{}, fmt.Errorf("pd: %w", err)
	}
	links, err := p.simLinks()
	if err != nil {
		return sim.PDConfig{}, err
	}
	cfg := sim.PDConfig{
		Prefill: t.Fleet, Decode: t.Fleet, PrefillPods: prefill, DecodePods: decode,
		Links: links, KVBytesPerToken: p.KVBytesPerToken, PrefillFailureRate: p.PrefillFailureRate, Seed: t.Seed,
	}
	return cfg, cfg.Validate()
}

// pdRouter is the trace's P/D router with its split threshold.
func (t *Trace) pdRouter() (sim.PDRouter, error) {
	r, ok := sim.NewPDRouter(t.Router)
	if !ok {
		return nil, fmt.Errorf("p/d router %q, want one of %v", t.Router, sim.PDRouterNames)
	}
	if t.PD.SplitThreshold < 0 {
		return nil, fmt.Errorf("pd: split_threshold %d, need at least 0", t.PD.SplitThreshold)
	}
	switch r := r.(type) {
	case *sim.Greedy:
		r.SplitThreshold = t.PD.SplitThreshold
	case *sim.TopologyConstant:
		r.SplitThreshold = t.PD.SplitThreshold
	default:
		if t.PD.SplitThreshold != 0 {
			return nil, fmt.Errorf("pd: router %s never splits, so split_threshold %d means nothing", t.Router, t.PD.SplitThreshold)
		}
	}
	return r, nil
}

// validatePD checks everything a P/D trace needs without running it.
func (t *Trace) validatePD() error {
	if _, err := t.pdConfig(); err != nil {
		return err
	}
	_, err := t.pdRouter()
	return err
}

// Pod roles as llm-d's role label spells them.
const (
	PodTypePrefill = "prefill"
	PodTypeDecode  = "decode"
)

// pdSamples simulates a P/D trace and returns its rows (see PD) in the
// order the router would have recorded them: by the time of the first
// token (TTFT rows) or of the last (TPOT rows), ties in submission order.
func (t *Trace) pdSamples(ctx context.Context, reqs []*sim.Request) ([]features.Sample, error) {
	cfg, err := t.pdConfig()
	if err != nil {
		return nil, err
	}
	router, err := t.pdRouter()
	if err != nil {
		return nil, err
	}
	f, err := sim.SimulatePD(ctx, cfg, router, sim.PDHooks{}, reqs...)
	if err != nil {
		return nil, fmt.Errorf("simulate p/d: %w", err)
	}
	at := func(d time.Duration) time.Time { return trace.Epoch().Add(d) }
	var rows []features.Sample
	for _, o := range f.Outcomes() {
		d := o.Decode
		if !d.Done {
			continue // rejected: the client got no tokens, the router no labels
		}
		ttft := features.Sample{Row: d.Row, ActualTTFTMs: math.Trunc(float64(d.TTFT()) / 1e6), Timestamp: at(d.FirstToken)}
		ttft.Row.PodType = PodTypeDecode
		if o.Split {
			ttft.Row = o.Prefill.Row
			ttft.Row.PodType = PodTypePrefill
			ttft.Transfer = measuredTransfer(o)
		}
		if ttft.ActualTTFTMs > 0 {
			rows = append(rows, ttft)
		}
		if o.Request.OutputTokens > 1 {
			tpotRow := d.Row
			tpotRow.PodType = PodTypeDecode
			rows = append(rows, features.Sample{Row: tpotRow, ActualTPOTMs: float64(d.TPOT()) / 1e6,
				Timestamp: at(d.Finish)})
		}
	}
	slices.SortStableFunc(rows, func(a, b features.Sample) int { return a.Timestamp.Compare(b.Timestamp) })
	return rows, nil
}

// measuredTransfer is a split request's KV transfer as the sidecar reports
// it (the names PDOutcome.Sample gives the pods), nil when none completed.
func measuredTransfer(o *sim.PDOutcome) *features.Transfer {
	d := o.KVTransferTime()
	if d <= 0 {
		return nil
	}
	tr := &features.Transfer{
		Ms:         float64(d) / 1e6,
		Tokens:     int64(o.KVTransferTokens),
		PrefillPod: fmt.Sprintf("prefill-%d", o.PrefillPod),
		DecodePod:  fmt.Sprintf("decode-%d", o.DecodePod),
		Prefill:    o.PrefillTopology,
		Decode:     o.DecodeTopology,
		Concurrent: int64(o.Transfer.Concurrent),
	}
	if o.KVTransferTokens > 0 {
		tr.BytesPerToken = o.KVTransferBytes / float64(o.KVTransferTokens)
	}
	return tr
}
