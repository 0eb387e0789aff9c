package sim_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
)

func TestPickPair(t *testing.T) {
	decode := []sim.PodState{
		{ServerState: sim.ServerState{Index: 0, InFlight: 3}},
		{ServerState: sim.ServerState{Index: 1, InFlight: 1}},
	}
	est := func(p, d int, ttft, tpot float64) sim.PairEstimate {
		return sim.PairEstimate{Prefill: p, Decode: d, TTFTMs: ttft, TPOTMs: tpot}
	}
	slo := sim.PairSLO{TTFTMs: 500, TPOTMs: 30}
	for _, tc := range []struct {
		name string
		est  []sim.PairEstimate
		slo  sim.PairSLO
		want int
	}{
		{"least TTFT", []sim.PairEstimate{est(0, 0, 300, 20), est(1, 1, 200, 25), est(sim.NoSplit, 0, 250, 20)}, sim.PairSLO{}, 1},
		{"no split when it is fastest", []sim.PairEstimate{est(0, 0, 300, 20), est(sim.NoSplit, 1, 150, 28)}, sim.PairSLO{}, 1},
		{"TPOT breaks a TTFT tie", []sim.PairEstimate{est(0, 0, 200, 25), est(1, 0, 200, 21)}, sim.PairSLO{}, 1},
		{"then the decode pod's in-flight count", []sim.PairEstimate{est(0, 0, 200, 21), est(0, 1, 200, 21)}, sim.PairSLO{}, 1},
		// The faster route misses TPOT (−10% headroom); the slower meets both.
		{"SLO: meeting both beats a faster TTFT", []sim.PairEstimate{est(0, 0, 100, 33), est(1, 1, 400, 27)}, slo, 1},
		// Both miss: 40% spare on TTFT but 10% over on TPOT beats 20% over
		// on TTFT with 3% to spare on TPOT; the tightest is what counts.
		{"SLO: the worst objective's violation", []sim.PairEstimate{est(0, 0, 300, 33), est(1, 1, 600, 29)}, slo, 0},
		// Spare is not ranked: the TPOT objective, tighter, would decide alone.
		{"SLO: least TTFT among the routes meeting both", []sim.PairEstimate{est(0, 0, 300, 20), est(1, 1, 200, 27)}, slo, 1},
		{"SLO: the least violation when none meets", []sim.PairEstimate{est(0, 0, 1000, 20), est(1, 1, 600, 20)}, slo, 1},
		{"SLO: equal headroom falls back to TTFT", []sim.PairEstimate{est(0, 0, 300, 24), est(1, 1, 250, 24)}, slo, 1},
		{"unusable estimates are skipped", []sim.PairEstimate{
			est(0, 0, math.NaN(), 20), est(0, 0, -1, 20), est(0, 0, math.Inf(1), 20), est(0, 0, 10, math.NaN()),
			est(2, 0, 10, 20), est(0, 2, 10, 20), est(-2, 0, 10, 20), est(1, 1, 400, 20)}, sim.PairSLO{}, 7},
		{"nothing usable", []sim.PairEstimate{est(0, 5, 10, 10)}, sim.PairSLO{}, -1},
		{"nothing at all", nil, sim.PairSLO{}, -1},
	} {
		rule := sim.PairRule{SLO: tc.slo, DecideSplit: true}
		if got := rule.Pick(&sim.Request{PromptTokens: 100}, tc.est, 2, decode); got != tc.want {
			t.Errorf("%s: picked %d, want %d", tc.name, got, tc.want)
		}
	}
}

type failingScorer struct{ err error }

func (s failingScorer) ScorePairs(*sim.Request, []sim.PodState, []sim.PodState) ([]sim.PairEstimate, error) {
	return nil, s.err
}

// Without DecideSplit, llm-d's decider says which routes compete through
// each decode pod: the pairs where enough of the prompt is uncached, the
// pod alone elsewhere.
func TestPairRuleFollowsTheDecider(t *testing.T) {
	decode := []sim.PodState{
		{ServerState: sim.ServerState{Index: 0, PrefixCacheScore: 0.5}},
		{ServerState: sim.ServerState{Index: 1, PrefixCacheScore: 0.95}},
	}
	req := &sim.Request{PromptTokens: 1000} // 500 and 50 tokens uncached
	est := []sim.PairEstimate{
		{Prefill: sim.NoSplit, Decode: 0, TTFTMs: 50, TPOTMs: 30},
		{Prefill: 0, Decode: 0, TTFTMs: 200, TPOTMs: 20},
		{Prefill: 0, Decode: 1, TTFTMs: 150, TPOTMs: 20},
		{Prefill: sim.NoSplit, Decode: 1, TTFTMs: 180, TPOTMs: 30},
	}
	for _, tc := range []struct {
		rule        sim.PairRule
		prefillPods int
		want        int
	}{
		{sim.PairRule{DecideSplit: true}, 1, 0},   // the fastest route of all
		{sim.PairRule{}, 1, 2},                    // threshold 0: only pairs
		{sim.PairRule{SplitThreshold: 100}, 1, 3}, // pod 0 by pairs (200 ms), pod 1 alone (180 ms)
		{sim.PairRule{SplitThreshold: 501}, 1, 0}, // neither has enough uncached: both alone
		{sim.PairRule{SplitThreshold: 0}, 0, 0},   // no prefill pods: alone
		{sim.PairRule{SplitThreshold: 100}, 0, 0},
	} {
		if got := tc.rule.Pick(req, est, tc.prefillPods, decode); got != tc.want {
			t.Errorf("%+v with %d prefill pods: picked %d, want %d", tc.rule, tc.prefillPods, got, tc.want)
		}
	}
}

func TestJointRouterFallsBack(t *testing.T) {
	prefill := []sim.PodState{{ServerState: sim.ServerState{Index: 0}}}
	decode := []sim.PodState{{ServerState: sim.ServerState{Index: 0, NumRequestRunning: 5}}, {ServerState: sim.ServerState{Index: 1}}}
	req := &sim.Request{ID: 1, PromptTokens: 100, OutputTokens: 5}
	want := (&sim.Greedy{}).RoutePD(req, prefill, decode)
	for _, tc := range []struct {
		err                    error
		notReady, failed, errs int
	}{
		{fmt.Errorf("predict pairs: %w", sim.ErrNoModel), 1, 0, 0},
		{errors.New("connection refused"), 0, 1, 1},
		{nil, 0, 1, 1}, // no estimates and no error: nothing usable
	} {
		j := &sim.JointRouter{Scorer: failingScorer{tc.err}}
		if got := j.RoutePD(req, prefill, decode); got != want {
			t.Errorf("%v: routed %+v, want greedy's %+v", tc.err, got, want)
		}
		if j.Stats.NotReady != tc.notReady || j.Stats.Failed != tc.failed || j.Stats.Routed != 0 {
			t.Errorf("%v: stats %+v", tc.err, j.Stats)
		}
		if (j.Stats.LastError != nil) != (tc.errs > 0) {
			t.Errorf("%v: last error %v", tc.err, j.Stats.LastError)
		}
		if _, ok := j.Last(); ok {
			t.Errorf("%v: Last reports an estimate after a fallback", tc.err)
		}
	}
}

// linkScorer estimates split routes from a fleet's own cost model and links,
// for one request on idle pods: prefill on P, then the KV over the link
// (unless blind), then the decode pod's frontend and one step. It offers no
// no-split routes, so that the test is about the pair alone.
type linkScorer struct {
	cfg   sim.PDConfig
	blind bool
}

func (s linkScorer) ScorePairs(req *sim.Request, prefill, decode []sim.PodState) ([]sim.PairEstimate, error) {
	var out []sim.PairEstimate
	c := s.cfg.Prefill.Cost
	for _, p := range prefill {
		uncached := float64(req.PromptTokens) * (1 - p.PrefixCacheScore)
		pre := c.FrontendMs + c.StepMs + c.PrefillTokenMs*uncached
		for _, d := range decode {
			xfer := 0.0
			if !s.blind {
				link := s.cfg.Links[features.ClassOf(p.Topology, d.Topology)]
				bytes := float64(req.PromptTokens) * (1 - d.PrefixCacheScore) * s.cfg.KVBytesPerToken
				xfer = float64(link.Latency)/1e6 + 1e3*bytes/link.BytesPerSec
			}
			dec := s.cfg.Decode.Cost.FrontendMs + s.cfg.Decode.Cost.StepMs
			out = append(out, sim.PairEstimate{Prefill: p.Index, Decode: d.Index, TTFTMs: pre + xfer + dec,
				TPOTMs: s.cfg.Decode.Cost.StepMs, PrefillMs: pre, TransferMs: xfer, DecodeMs: dec})
		}
	}
	return out, nil
}

// Two idle prefill pods, the first in the other zone, the second on the
// decode pod's rack: greedy takes the first (nothing tells them apart but
// the index), and so does a joint router whose scorer leaves the transfer
// out; with the transfer in, the joint router takes the rack and the
// request's first token comes the cross-zone transfer's time sooner.
func TestJointRouterTakesTheNearPairWhenTheTransferCounts(t *testing.T) {
	cfg := pdTestConfig([]features.Topology{nodeZ2, nodeA}, []features.Topology{nodeB})
	const prompt = 2000
	run := func(r sim.PDRouter) *sim.PDOutcome {
		return runPD(t, cfg, r, contentReq(1, 0, prompt, 5, 1)).Outcomes()[0]
	}
	greedy := run(&sim.Greedy{})
	blind := &sim.JointRouter{Scorer: linkScorer{cfg: cfg, blind: true}}
	aware := &sim.JointRouter{Scorer: linkScorer{cfg: cfg}}
	if aware.Rule.DecideSplit || aware.Rule.SplitThreshold != 0 {
		t.Fatal("the zero rule is not llm-d's decider splitting everything")
	}
	blindOut, awareOut := run(blind), run(aware)
	for _, tc := range []struct {
		name  string
		o     *sim.PDOutcome
		class features.LinkClass
	}{
		{"greedy", greedy, features.CrossZone},
		{"joint without the transfer", blindOut, features.CrossZone},
		{"joint", awareOut, features.SameRack},
	} {
		if !tc.o.Split || tc.o.Transfer == nil || tc.o.Transfer.Class != tc.class {
			t.Errorf("%s: split %v, transfer %+v, want one over %s", tc.name, tc.o.Split, tc.o.Transfer, tc.class)
		}
	}
	if aware.Stats.Routed != 1 || aware.Stats.Split != 1 {
		t.Errorf("joint stats %+v", aware.Stats)
	}
	// 2000 tokens × 256 KiB: 175 ms across zones, 13 ms on the rack.
	bytes := float64(prompt) * cfg.KVBytesPerToken
	saved := 1e3 * (bytes/cfg.Links[features.CrossZone].BytesPerSec - bytes/cfg.Links[features.SameRack].BytesPerSec)
	got := ms(greedy.Decode.TTFT()) - ms(awareOut.Decode.TTFT())
	if math.Abs(got-saved) > 1 {
		t.Errorf("joint's TTFT is %.1f ms below greedy's, want the transfer's difference, %.1f ms", got, saved)
	}
	if e, ok := aware.Last(); !ok || e.Prefill != 1 || e.Decode != 0 || e.TransferMs <= 0 {
		t.Errorf("joint's last estimate %+v (%v), want pair (1, 0) with its transfer", e, ok)
	}
}

// recordingOracle keeps what the oracle foresaw for each request.
type recordingOracle struct {
	sim.PairOracle
	seen map[int]sim.PairEstimate
}

func (o *recordingOracle) RoutePDLookahead(req *sim.Request, prefill, decode []sim.PodState, la *sim.Lookahead) sim.PDChoice {
	c := o.PairOracle.RoutePDLookahead(req, prefill, decode, la)
	o.seen[req.ID] = o.Foresight()
	return c
}

// What the oracle foresees is what happens when nothing arrives after the
// request: the TTFT, TPOT and transfer of the route it takes, including a
// transfer sharing its link with one already under way.
func TestPairOracleForeseesTheRoute(t *testing.T) {
	near := pdTestConfig([]features.Topology{nodeA, nodeZ2}, []features.Topology{nodeC, nodeB})
	far := pdTestConfig([]features.Topology{nodeA, nodeA}, []features.Topology{nodeZ2, nodeZ2})
	for _, tc := range []struct {
		name      string
		cfg       sim.PDConfig
		splitOnly bool
		reqs      []*sim.Request
		exact     []int // the requests nothing arrived after in time to change
	}{
		{"alone", near, false, []*sim.Request{contentReq(1, 0, 2000, 5, 1)}, []int{1}},
		{"split only", near, true, []*sim.Request{contentReq(1, 0, 2000, 5, 1)}, []int{1}},
		// Request 1's 786 MB cross the zones from about 375 to 640 ms;
		// request 2's prefill ends in the middle, and its KV shares the link.
		{"sharing a link", far, true, []*sim.Request{contentReq(1, 0, 3000, 5, 1), contentReq(2, 400*time.Millisecond, 800, 5, 2)}, []int{2}},
	} {
		o := &recordingOracle{PairOracle: sim.PairOracle{Rule: sim.PairRule{SLO: sim.PairSLO{TPOTMs: 100}, DecideSplit: !tc.splitOnly}},
			seen: map[int]sim.PairEstimate{}}
		f := runPD(t, tc.cfg, o, tc.reqs...)
		for _, id := range tc.exact {
			out := f.Outcomes()[id-1]
			e := o.seen[id]
			if out.Split != (e.Prefill != sim.NoSplit) || out.DecodePod != e.Decode || out.Split != tc.splitOnly {
				t.Errorf("%s: request %d took split %v to %d, foresaw %+v", tc.name, id, out.Split, out.DecodePod, e)
			}
			if got := ms(out.Decode.TTFT()); math.Abs(got-e.TTFTMs) > 1e-3 {
				t.Errorf("%s: request %d TTFT %.4f ms, foreseen %.4f", tc.name, id, got, e.TTFTMs)
			}
			if got := ms(out.Decode.TPOT()); math.Abs(got-e.TPOTMs) > 1e-3 {
				t.Errorf("%s: request %d TPOT %.4f ms, foreseen %.4f", tc.name, id, got, e.TPOTMs)
			}
			if got := ms(out.KVTransferTime()); math.Abs(got-e.TransferMs) > 1e-3 {
				t.Errorf("%s: request %d transfer %.4f ms, foreseen %.4f", tc.name, id, got, e.TransferMs)
			}
		}
		if tc.name == "sharing a link" {
			if x := f.Outcomes()[1].Transfer; x == nil || x.Concurrent != 2 {
				t.Errorf("%s: the second transfer did not share its link: %+v", tc.name, x)
			}
		}
		if s := f.LookaheadStats(); s.Decisions != len(tc.reqs) || s.Forks == 0 {
			t.Errorf("%s: lookahead stats %+v", tc.name, s)
		}
	}
}

// The oracle takes the near pair of TestJointRouterTakesTheNearPairWhenTheTransferCounts.
func TestPairOracleTakesTheNearPair(t *testing.T) {
	cfg := pdTestConfig([]features.Topology{nodeZ2, nodeA}, []features.Topology{nodeB})
	o := runPD(t, cfg, &sim.PairOracle{}, contentReq(1, 0, 2000, 5, 1)).Outcomes()[0]
	if o.Transfer == nil || o.Transfer.Class != features.SameRack {
		t.Errorf("oracle's transfer %+v, want one over the rack", o.Transfer)
	}
}

type fixedScorer []sim.PairEstimate

func (s fixedScorer) ScorePairs(*sim.Request, []sim.PodState, []sim.PodState) ([]sim.PairEstimate, error) {
	return s, nil
}

// The failure of docs/DEMO.md's P/D seed 1: a prefill pod loaded beyond
// anything the model was trained on is predicted fast (its prefix cache
// holds the session), an idle one slower. Trusting the estimate piles
// requests on the loaded pod; with AvoidExtrapolation the router falls
// back to greedy, which balances load, whenever an extrapolated route
// could be the better one, and routes on estimates otherwise: past an
// extrapolated route already predicted worse than a trusted one, since
// its estimate is likely low.
func TestJointRouterAvoidsExtrapolatedEstimates(t *testing.T) {
	prefill := []sim.PodState{
		{ServerState: sim.ServerState{Index: 0, NumRequestWaiting: 9, NumRequestRunning: 19, InFlight: 28, PrefixCacheScore: 0.86}},
		{ServerState: sim.ServerState{Index: 1, NumRequestRunning: 3, InFlight: 3, PrefixCacheScore: 0.3}},
	}
	decode := []sim.PodState{{ServerState: sim.ServerState{Index: 0}}}
	req := &sim.Request{ID: 1, PromptTokens: 4000, OutputTokens: 5}
	loaded := sim.PairEstimate{Prefill: 0, Decode: 0, TTFTMs: 948, TPOTMs: 20, Extrapolated: true}
	idle := sim.PairEstimate{Prefill: 1, Decode: 0, TTFTMs: 1107, TPOTMs: 20}
	greedy := (&sim.Greedy{}).RoutePD(req, prefill, decode)
	if greedy.Prefill != 1 {
		t.Fatalf("greedy routes to prefill pod %d; the test wants it to balance load onto pod 1", greedy.Prefill)
	}
	for _, tc := range []struct {
		name                 string
		avoid                bool
		est                  []sim.PairEstimate
		want                 sim.PDChoice
		routed, extrapolated int
	}{
		{"trusting takes the extrapolated estimate", false, []sim.PairEstimate{loaded, idle}, loaded.Choice(), 1, 0},
		{"avoiding falls back to greedy", true, []sim.PairEstimate{loaded, idle}, greedy, 0, 1},
		{"every route extrapolated: greedy", true, []sim.PairEstimate{loaded, {Prefill: 1, Decode: 0, TTFTMs: 2000, TPOTMs: 20, Extrapolated: true}}, greedy, 0, 1},
		{"an extrapolated route predicted worse than a trusted one: the trusted", true, []sim.PairEstimate{{Prefill: 0, Decode: 0, TTFTMs: 1300, TPOTMs: 20, Extrapolated: true}, idle}, idle.Choice(), 1, 0},
		{"an extrapolated route tied with the best trusted one: greedy", true, []sim.PairEstimate{idle, {Prefill: 0, Decode: 0, TTFTMs: 1107, TPOTMs: 20, Extrapolated: true}}, greedy, 0, 1},
		{"in range: routed on estimates", true, []sim.PairEstimate{{Prefill: 0, Decode: 0, TTFTMs: 948, TPOTMs: 20}, idle}, sim.PDChoice{Prefill: 0, Decode: 0}, 1, 0},
		// Prefill pods exist and the whole prompt is uncached: only pairs
		// compete, and an extrapolated no-split estimate does not count.
		{"a route that does not compete is not looked at", true, []sim.PairEstimate{idle, {Prefill: sim.NoSplit, Decode: 0, TTFTMs: 10, TPOTMs: 20, Extrapolated: true}}, idle.Choice(), 1, 0},
	} {
		j := &sim.JointRouter{Scorer: fixedScorer(tc.est), Rule: sim.PairRule{AvoidExtrapolation: tc.avoid}}
		if got := j.RoutePD(req, prefill, decode); got != tc.want {
			t.Errorf("%s: routed %+v, want %+v", tc.name, got, tc.want)
		}
		if j.Stats.Routed != tc.routed || j.Stats.Extrapolated != tc.extrapolated || j.Stats.Failed != 0 || j.Stats.NotReady != 0 {
			t.Errorf("%s: stats %+v, want %d routed and %d extrapolated fallbacks", tc.name, j.Stats, tc.routed, tc.extrapolated)
		}
	}
}
