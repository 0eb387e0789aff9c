package demo

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
)

// The P/D demo (headroom demo --pd): the same arrivals through a prefill
// pool and a decode pool placed on a topology, under llm-d's two P/D
// schedulers and under Headroom's pair prediction. The joint policies are
// the real service, trained in this process on what the fleet's routing
// sidecar reports (the prefill pod's TTFT with the KV transfer it
// contains, the decode pod's TPOT), asked POST /predict/pairs for every
// request.
const (
	// PDGreedy is llm-d's P/D scheduling today (sim.Greedy): the decode
	// pod by load, then the prefill pod by load and prefix affinity.
	PDGreedy = "greedy"
	// PDTopologyConstant adds llm-d's constant topology-affinity scores
	// (sim.TopologyConstant).
	PDTopologyConstant = "topology-constant"
	// PDJoint routes each request to the pair of least predicted TTFT
	// (sim.JointRouter on Headroom's pairs), splitting as greedy does
	// (llm-d's prefix-based decider on each decode pod).
	PDJoint = "joint"
	// PDJointSLO routes on the SLOs instead (the least predicted TTFT
	// among the routes expected to meet them, the least violation when
	// none is; sim.PairRule); with
	// PDOptions.DecideSplit it decides the split too, every pair and every
	// decode pod alone competing.
	PDJointSLO = "joint-slo"
	// PDOracle is joint's rule on foreseen latencies (sim.PairOracle):
	// joint − oracle is what pair prediction error costs.
	PDOracle = "oracle"
)

// PDPolicies lists the P/D policies, in the order they run and report.
var PDPolicies = []string{PDGreedy, PDTopologyConstant, PDJoint, PDJointSLO, PDOracle}

// PDOptions configure a P/D demo run. Options' Servers and Engine apply to
// each pod (Servers is ignored: the pools' sizes are PrefillPods and
// DecodePods); SLO is what joint-slo routes on and what every policy's
// slo_attainment is measured against. Zero values mean DefaultPDOptions'.
type PDOptions struct {
	Options
	// Layout places the pods and sets the links (sim.PlacePods,
	// sim.LayoutLinks): one of sim.PDLayouts.
	Layout                  string
	PrefillPods, DecodePods int
	// KVBytesPerToken is the model's KV size; the sidecar reports it with
	// every transfer.
	KVBytesPerToken float64
	// PrefillFailureRate is the chance a prefill pod fails after its run
	// (the decode pod then serves the request alone); drawn from Seed.
	PrefillFailureRate float64
	// SplitThreshold is llm-d's prefix-based-pd-decider nonCachedTokens
	// for the greedy policies: fewer uncached prompt tokens on the chosen
	// decode pod than this and the request is not split.
	SplitThreshold int
	// DecideSplit lets joint-slo decide whether to split on the predicted
	// SLO headroom of every route, instead of following the decider.
	DecideSplit bool
	// TrustExtrapolation lets the joint policies route on estimates the
	// service marks extrapolated (a pod loaded beyond what the TTFT model
	// was trained on); by default a request on which an extrapolated route
	// could be the better one is routed by topology-constant, and one whose
	// extrapolated routes rank below a trusted route on that route
	// (sim.PairRule.AvoidExtrapolation).
	TrustExtrapolation bool
}

// DefaultPDOptions: 4 prefill and 4 decode pods over 2 zones of 2 racks
// (a pool that spans racks and zones), the monolithic demo's traffic
// (agentic sessions, 16 requests/s, bursty) and cadence, SLOs of 1 s TTFT
// and 25 ms TPOT for joint-slo, and llm-d's sample P/D configuration's
// split threshold (16 uncached tokens).
func DefaultPDOptions() PDOptions {
	o := PDOptions{
		Options: DefaultOptions(), Layout: "zones", PrefillPods: 4, DecodePods: 4,
		KVBytesPerToken: sim.DefaultKVBytesPerToken, SplitThreshold: 16,
	}
	o.SLO = SLO{TTFTMs: 1000, TPOTMs: 25}
	return o
}

func (o *PDOptions) setDefaults() error {
	def := DefaultPDOptions()
	o.Servers = 1 // each pod is one engine; the pools say how many
	if err := o.Options.setDefaults(); err != nil {
		return err
	}
	if o.Layout == "" {
		o.Layout = def.Layout
	}
	if o.PrefillPods == 0 && o.DecodePods == 0 {
		o.PrefillPods, o.DecodePods = def.PrefillPods, def.DecodePods
	}
	if o.KVBytesPerToken == 0 {
		o.KVBytesPerToken = def.KVBytesPerToken
	}
	switch {
	case !slices.Contains(sim.PDLayouts, o.Layout):
		return fmt.Errorf("demo --pd: layout %q: want one of %s", o.Layout, strings.Join(sim.PDLayouts, ", "))
	case o.PrefillPods < 1 || o.DecodePods < 1:
		return fmt.Errorf("demo --pd: %d prefill and %d decode pods: need at least 1 of each", o.PrefillPods, o.DecodePods)
	case !(o.KVBytesPerToken > 0) || math.IsInf(o.KVBytesPerToken, 0):
		return fmt.Errorf("demo --pd: kv bytes per token %v: want a positive number", o.KVBytesPerToken)
	case !(o.PrefillFailureRate >= 0 && o.PrefillFailureRate <= 1):
		return fmt.Errorf("demo --pd: prefill failure rate %v: want 0 to 1", o.PrefillFailureRate)
	case o.SplitThreshold < 0:
		return fmt.Errorf("demo --pd: split threshold %d: want 0 or more", o.SplitThreshold)
	}
	return nil
}

func (o *PDOptions) fleet() (sim.PDConfig, error) {
	engine, err := o.engine()
	if err != nil {
		return sim.PDConfig{}, fmt.Errorf("demo --pd: %w", err)
	}
	p, d, err := sim.PlacePods(o.Layout, o.PrefillPods, o.DecodePods)
	if err != nil {
		return sim.PDConfig{}, fmt.Errorf("demo --pd: %w", err)
	}
	cfg := sim.PDConfig{Prefill: engine, Decode: engine, PrefillPods: p, DecodePods: d,
		Links: sim.LayoutLinks(o.Layout), KVBytesPerToken: o.KVBytesPerToken,
		PrefillFailureRate: o.PrefillFailureRate, Seed: o.Seed}
	return cfg, cfg.Validate()
}

// RunPD runs the P/D demo: a warm-up on its own traffic routed by the
// joint policy from a cold start (topology-constant until the first
// model), then the same arrivals under each of PDPolicies. The greedy runs
// do not touch the service; the joint runs keep reporting samples and
// retraining, as in Run.
func RunPD(ctx context.Context, opts PDOptions) (*Result, error) {
	start := time.Now()
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	cfg, err := opts.fleet()
	if err != nil {
		return nil, err
	}
	res := &Result{Layout: opts.Layout, PrefillPods: opts.PrefillPods, DecodePods: opts.DecodePods,
		KVBytesPerToken: opts.KVBytesPerToken}
	jointRule := sim.PairRule{SplitThreshold: opts.SplitThreshold, AvoidExtrapolation: !opts.TrustExtrapolation}
	return compare(ctx, start, &opts.Options, cfg, nil, res, PDPolicies,
		func(l *learner, name string, reqs []*sim.Request) (PolicyResult, error) {
			rule := jointRule
			switch name {
			case warmupPhase, PDJoint:
				return l.learn(ctx, name, reqs, l.joint(ctx, &opts, rule))
			case PDJointSLO:
				rule.SLO = sim.PairSLO{TTFTMs: opts.SLO.TTFTMs, TPOTMs: opts.SLO.TPOTMs}
				rule.DecideSplit = opts.DecideSplit
				return l.learn(ctx, name, reqs, l.joint(ctx, &opts, rule))
			case PDOracle:
				o := &sim.PairOracle{Rule: rule}
				return l.runFixed(ctx, name, reqs, o, func() (estimate, bool) {
					e := o.Foresight()
					return estimate{TTFTMs: e.TTFTMs, TPOTMs: e.TPOTMs, TransferMs: e.TransferMs}, e.TTFTMs > 0
				})
			}
			router, err := pdBaseline(name, opts.SplitThreshold)
			if err != nil {
				return PolicyResult{}, err
			}
			return l.runFixed(ctx, name, reqs, router, nil)
		})
}

// pdBaseline builds one of llm-d's P/D schedulers by name.
func pdBaseline(name string, splitThreshold int) (sim.PDRouter, error) {
	g := sim.Greedy{SplitThreshold: splitThreshold}
	switch name {
	case PDGreedy:
		return &g, nil
	case PDTopologyConstant:
		return &sim.TopologyConstant{Greedy: g}, nil
	}
	return nil, fmt.Errorf("demo --pd: no baseline policy %q", name)
}

// pdJointRouter is a joint policy's router. It falls back (before the
// first model, on a failure, when an extrapolated route could win) to
// topology-constant, llm-d's scheduler with its topology scorer, rather
// than plain greedy: greedy's pairs cross the slow links, which is what
// the joint router exists to avoid, and the fallbacks come in bursts, when
// the fleet is loaded past the model's experience (docs/DEMO.md, P/D).
func pdJointRouter(scorer sim.PairScorer, rule sim.PairRule, splitThreshold int) *sim.JointRouter {
	return &sim.JointRouter{Scorer: scorer, Rule: rule,
		Fallback: &sim.TopologyConstant{Greedy: sim.Greedy{SplitThreshold: splitThreshold}}}
}

// joint is a joint policy under rule: a sim.JointRouter on the service's
// pair predictions, whose entries are the routing sidecar's.
func (l *learner) joint(ctx context.Context, opts *PDOptions, rule sim.PairRule) learning {
	scorer := &PairScorer{Client: l.client, Timeout: opts.PredictTimeout, KVBytesPerToken: opts.KVBytesPerToken}
	scorer.Bind(ctx)
	joint := pdJointRouter(scorer, rule, opts.SplitThreshold)
	return learning{
		router: joint,
		estimate: func(*sim.PDOutcome) (estimate, bool) {
			e, ok := joint.Last()
			return estimate{TTFTMs: e.TTFTMs, TPOTMs: e.TPOTMs, TransferMs: e.TransferMs}, ok
		},
		stats: func() RouterStats {
			s := joint.Stats
			return RouterStats{Routed: s.Routed, NotReady: s.NotReady, Failed: s.Failed, Split: s.Split,
				Extrapolated: s.Extrapolated, LastError: s.LastError}
		},
		ttftEntry: func(o *sim.PDOutcome, at time.Time) features.Sample {
			return PDTTFTEntry(o, l.cfg.KVBytesPerToken, at)
		},
		tpotEntry: PDTPOTEntry,
		transfers: true,
	}
}

// The routing sidecar's reports. In llm-d's P/D mode the router reports
// the TTFT entry against the endpoint it sent the prompt to, and the TPOT
// entry against the decode endpoint (docs/PROTOCOL.md §6); Headroom's
// sidecar adds to the TTFT entry the KV transfer it measured, so that the
// trainer can take it out of the TTFT label and learn it on its own.

// PDTTFTEntry is the TTFT entry of a P/D request at its first token. A
// split request's entry is the prefill pod's dispatch-time row (pod_type
// prefill) with the client's TTFT, and, when its KV moved, the transfer:
// its time, the tokens that moved, the bytes per token, both pods and
// their placement, and the transfers on its link when it started. A
// request the decode pod served alone is the decode pod's row; one whose
// prefill pod failed is still the prefill pod's row (that is where the
// router sent it, and its TTFT includes the failed run) without a transfer.
func PDTTFTEntry(o *sim.PDOutcome, kvBytesPerToken float64, at time.Time) features.Sample {
	row, pod := o.Decode.Row, "decode"
	if o.Split {
		row, pod = o.Prefill.Row, "prefill"
	}
	row = predictRow(row)
	row.NumTokensGenerated = 0
	row.PodType = pod
	s := features.Sample{Row: row, ActualTTFTMs: math.Trunc(ms(o.Decode.TTFT())), Timestamp: at}
	if x := o.Transfer; o.Split && x != nil && x.End != 0 {
		s.Transfer = &features.Transfer{
			Ms:            ms(o.KVTransferTime()),
			Tokens:        int64(o.KVTransferTokens),
			BytesPerToken: kvBytesPerToken,
			PrefillPod:    PodName("prefill", o.PrefillPod),
			DecodePod:     PodName("decode", o.DecodePod),
			Prefill:       o.PrefillTopology,
			Decode:        o.DecodeTopology,
			Concurrent:    int64(x.Concurrent),
		}
	}
	return s
}

// PDTPOTEntry is the TPOT entry of a P/D request at its last token: the
// decode pod's row (pod_type decode), as TPOTEntry. ok is false for a
// one-token answer or a rejected request.
func PDTPOTEntry(o *sim.PDOutcome, at time.Time) (features.Sample, bool) {
	if !o.Decode.Done {
		return features.Sample{}, false
	}
	e, ok := TPOTEntry(o.Decode, at)
	e.Row.PodType = "decode"
	return e, ok
}

// PodName is a pod's name in samples and pair requests.
func PodName(pool string, i int) string { return fmt.Sprintf("%s-%d", pool, i) }
