package demo

import (
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/wire"
)

// pdEngine is a small engine for hand-made P/D fleets.
func pdEngine() sim.Config {
	return sim.Config{Name: "test", Servers: 1, KVBlocks: 2000, PrefixCaching: true, MaxNumSeqs: 64, MaxNumBatchedTokens: 512,
		Cost: sim.CostModel{StepMs: 10, PrefillTokenMs: 0.1, DecodeSeqMs: 0.5, ContextTokenMs: 0.001, FrontendMs: 3}}
}

type routeByID map[int]sim.PDChoice

func (m routeByID) RoutePD(r *sim.Request, _, _ []sim.PodState) sim.PDChoice { return m[r.ID] }

// The sidecar's entries, through the wire as the trainer decodes them: a
// split request's TTFT entry is the prefill pod's row with the client's
// TTFT and the measured transfer (so its TTFT label is the rest), a
// request the decode pod served alone is the decode pod's row, and the
// TPOT entry is always the decode pod's.
func TestPDEntries(t *testing.T) {
	p := features.Topology{Node: "n1", Rack: "r1", Zone: "z1", Region: "eu"}
	d := features.Topology{Node: "n2", Rack: "r2", Zone: "z2", Region: "eu"}
	cfg := sim.PDConfig{Prefill: pdEngine(), Decode: pdEngine(), PrefillPods: []features.Topology{p},
		DecodePods: []features.Topology{d}, Links: sim.DefaultLinks(), KVBytesPerToken: sim.DefaultKVBytesPerToken}
	reqs := []*sim.Request{
		{ID: 1, PromptTokens: 1024, OutputTokens: 8},
		{ID: 2, Arrival: 5 * time.Second, PromptTokens: 640, OutputTokens: 4},
	}
	f, err := sim.SimulatePD(t.Context(), cfg, routeByID{1: {Prefill: 0, Decode: 0}, 2: {Prefill: sim.NoSplit, Decode: 0}},
		sim.PDHooks{}, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	at := DefaultEpoch
	split, alone := f.Outcomes()[0], f.Outcomes()[1]
	for _, tc := range []struct {
		name     string
		o        *sim.PDOutcome
		pod      string
		transfer bool
	}{{"split", split, "prefill", true}, {"alone", alone, "decode", false}} {
		e := PDTTFTEntry(tc.o, cfg.KVBytesPerToken, at)
		got, errs := wire.DecodeEntry(wire.AppendEntry(nil, &e))
		if len(errs) > 0 {
			t.Fatalf("%s: the trainer refuses the TTFT entry: %v", tc.name, errs)
		}
		if got.Row.PodType != tc.pod || got.Row.InputTokenLength != int64(tc.o.Request.PromptTokens) {
			t.Errorf("%s: TTFT entry row %+v, want the %s pod's", tc.name, got.Row, tc.pod)
		}
		label, ok := got.Label(features.TTFT)
		want := float64(int(ms(tc.o.Decode.TTFT()))) - ms(tc.o.KVTransferTime())
		if !ok || label != want {
			t.Errorf("%s: TTFT label %v (%v), want %v", tc.name, label, ok, want)
		}
		if (got.Transfer != nil && got.Transfer.Ms > 0) != tc.transfer {
			t.Fatalf("%s: transfer %+v", tc.name, got.Transfer)
		}
		if tc.transfer {
			x := got.Transfer
			if x.Tokens != 1024 || x.BytesPerToken != cfg.KVBytesPerToken || x.Prefill != p || x.Decode != d ||
				x.PrefillPod != "prefill-0" || x.DecodePod != "decode-0" || x.Concurrent != 1 || x.Class() != features.CrossZone {
				t.Errorf("%s: transfer %+v", tc.name, x)
			}
			if v, ok := got.Label(features.KVTransfer); !ok || v != ms(tc.o.KVTransferTime()) {
				t.Errorf("%s: transfer label %v, want %v", tc.name, v, ms(tc.o.KVTransferTime()))
			}
		}
		tp, ok := PDTPOTEntry(tc.o, at)
		if !ok || tp.Row.PodType != "decode" || !(tp.ActualTPOTMs > 0) || tp.Transfer != nil {
			t.Errorf("%s: TPOT entry %+v (%v)", tc.name, tp, ok)
		}
	}
}

// Over 2 + 2 pods spanning two zones every decode pod has one prefill pod
// in its zone and one across; greedy ignores which, and the joint router,
// trained on the fleet's own samples, takes the near one because its model
// learned what the far link costs. A joint router that ignored the transfer
// (or a transfer model that did not tell the links apart) would split its
// pairs across the zones as greedy does.
func TestJointLearnsToAvoidTheSlowLink(t *testing.T) {
	opts := DefaultPDOptions()
	opts.PrefillPods, opts.DecodePods = 2, 2
	opts.Rate, opts.Duration, opts.Warmup = 4, 20*time.Second, 30*time.Second
	opts.Service.NoXGBoost = true
	// What the transfer's learning buys, alone: on this small fleet the
	// guard against extrapolated estimates hands a sixth of the requests
	// to greedy, which crosses the zones (docs/DEMO.md, P/D).
	opts.TrustExtrapolation = true
	res, err := RunPD(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	share := func(name string) float64 {
		p := res.Policy(name)
		n := 0
		for _, c := range p.Links {
			n += c
		}
		if n == 0 {
			t.Fatalf("%s moved no KV", name)
		}
		return float64(p.Links["cross-zone"]) / float64(n)
	}
	greedy, joint := res.Policy(PDGreedy), res.Policy(PDJoint)
	if joint.Router == nil || joint.Router.Routed < joint.Requests*9/10 {
		t.Fatalf("joint routed %+v of %d requests on pair predictions", joint.Router, joint.Requests)
	}
	if g, j := share(PDGreedy), share(PDJoint); g < 0.3 || j > 0.1 {
		t.Errorf("cross-zone transfers: greedy %.0f%%, joint %.0f%%; want greedy ≥ 30%% and joint ≤ 10%%", 100*g, 100*j)
	}
	if joint.KVTransferP95Ms >= greedy.KVTransferP95Ms || joint.TTFTP95Ms >= greedy.TTFTP95Ms {
		t.Errorf("joint KV transfer p95 %.1f ms and TTFT p95 %.1f ms, greedy %.1f and %.1f",
			joint.KVTransferP95Ms, joint.TTFTP95Ms, greedy.KVTransferP95Ms, greedy.TTFTP95Ms)
	}
	if m := res.Model.Transfer; m.HoldoutMAPE == nil || m.HoldoutRows == 0 {
		t.Errorf("no transfer model on a holdout: %+v", m)
	}
}

type extrapolatedScorer struct{}

func (extrapolatedScorer) ScorePairs(_ *sim.Request, prefill, decode []sim.PodState) ([]sim.PairEstimate, error) {
	var out []sim.PairEstimate
	for _, p := range prefill {
		for _, d := range decode {
			out = append(out, sim.PairEstimate{Prefill: p.Index, Decode: d.Index, TTFTMs: 100, TPOTMs: 20, Extrapolated: true})
		}
	}
	return out, nil
}

// A joint policy's fallback is llm-d's scheduler with its topology scorer:
// of two idle prefill pods, one across the zones and one on the decode
// pod's rack, greedy takes the first (nothing but the index tells them
// apart) and the joint router, falling back because every estimate is
// extrapolated, takes the rack, as topology-constant does.
func TestJointPolicyFallsBackToTopologyConstant(t *testing.T) {
	near := features.Topology{Node: "n2", Rack: "r1", Zone: "z1", Region: "eu"}
	far := features.Topology{Node: "n3", Rack: "r2", Zone: "z2", Region: "eu"}
	prefill := []sim.PodState{
		{ServerState: sim.ServerState{Index: 0}, Topology: far},
		{ServerState: sim.ServerState{Index: 1}, Topology: near},
	}
	decode := []sim.PodState{{ServerState: sim.ServerState{Index: 0}, Topology: features.Topology{Node: "n1", Rack: "r1", Zone: "z1", Region: "eu"}}}
	req := &sim.Request{ID: 1, PromptTokens: 2000, OutputTokens: 5}
	if g := (&sim.Greedy{SplitThreshold: 16}).RoutePD(req, prefill, decode); g.Prefill != 0 {
		t.Fatalf("greedy takes prefill pod %d; the test wants it to take the far one", g.Prefill)
	}
	for _, rule := range []sim.PairRule{
		{SplitThreshold: 16, AvoidExtrapolation: true},
		{SplitThreshold: 16, AvoidExtrapolation: true, SLO: sim.PairSLO{TTFTMs: 1000, TPOTMs: 25}},
	} {
		j := pdJointRouter(extrapolatedScorer{}, rule, 16)
		if got := j.RoutePD(req, prefill, decode); got != (sim.PDChoice{Prefill: 1, Decode: 0}) {
			t.Errorf("SLO %+v: fell back to %+v, want the near prefill pod 1", rule.SLO, got)
		}
		if j.Stats.Extrapolated != 1 || j.Stats.Routed != 0 {
			t.Errorf("SLO %+v: stats %+v, want one extrapolated fallback", rule.SLO, j.Stats)
		}
	}
}
