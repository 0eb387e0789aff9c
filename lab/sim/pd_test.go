package sim_test

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/lab/sim/workload"
)

// pdTestConfig is one prefill and one decode pool of the test engine on a
// small cluster: two zones, two racks in the first, two nodes per rack.
func pdTestConfig(prefill, decode []features.Topology) sim.PDConfig {
	engine := sim.Config{Name: "test", Servers: 1, KVBlocks: 1000, PrefixCaching: true,
		MaxNumSeqs: 64, MaxNumBatchedTokens: 512,
		Cost: sim.CostModel{StepMs: 10, PrefillTokenMs: 0.1, DecodeSeqMs: 0.5, ContextTokenMs: 0.001, FrontendMs: 3}}
	return sim.PDConfig{Prefill: engine, Decode: engine, PrefillPods: prefill, DecodePods: decode,
		Links: sim.DefaultLinks(), KVBytesPerToken: sim.DefaultKVBytesPerToken}
}

var (
	nodeA  = features.Topology{Node: "a", Rack: "r1", Zone: "z1", Region: "eu"}
	nodeB  = features.Topology{Node: "b", Rack: "r1", Zone: "z1", Region: "eu"}
	nodeC  = features.Topology{Node: "c", Rack: "r2", Zone: "z1", Region: "eu"}
	nodeZ2 = features.Topology{Node: "d", Rack: "r1", Zone: "z2", Region: "eu"}
)

// contentReq is a request whose prompt blocks are identified by content.
func contentReq(id int, at time.Duration, prompt, output int, content uint64) *sim.Request {
	ids := make([]uint64, prompt/sim.BlockSize)
	for i := range ids {
		ids[i] = content<<20 | uint64(i)
	}
	return &sim.Request{ID: id, Arrival: at, PromptTokens: prompt, OutputTokens: output, BlockHashes: sim.ChainBlocks(ids)}
}

// fixedPair always splits onto the same pair, or never splits.
type fixedPair sim.PDChoice

func (p fixedPair) RoutePD(*sim.Request, []sim.PodState, []sim.PodState) sim.PDChoice {
	return sim.PDChoice(p)
}

func runPD(t *testing.T, cfg sim.PDConfig, r sim.PDRouter, reqs ...*sim.Request) *sim.PDFleet {
	t.Helper()
	f, err := sim.SimulatePD(t.Context(), cfg, r, sim.PDHooks{}, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range f.Outcomes() {
		if !o.Decode.Done && !o.Decode.Rejected {
			t.Fatalf("request %d neither finished nor was rejected", o.Request.ID)
		}
	}
	return f
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// One request alone: the client's TTFT is the prefill pod's frontend and
// prefill, the sidecar's second hop (the decode pod's frontend), the
// transfer at the link's rate, and one step on the decode pod computing
// the last prompt token.
func TestPDSplitRequestTimeline(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    features.Topology
	}{{"same node", nodeA}, {"same rack", nodeB}, {"other rack", nodeC}, {"other zone", nodeZ2}} {
		cfg := pdTestConfig([]features.Topology{nodeA}, []features.Topology{tc.d})
		const prompt, output = 400, 5
		f := runPD(t, cfg, fixedPair{Prefill: 0, Decode: 0}, contentReq(1, time.Second, prompt, output, 1))
		o := f.Outcomes()[0]
		c := cfg.Prefill.Cost
		prefill := c.FrontendMs + c.StepMs + c.PrefillTokenMs*prompt + c.ContextTokenMs*prompt
		if math.Abs(ms(o.PrefillTime())-prefill) > 1e-4 {
			t.Errorf("%s: prefill %v, want %.4f ms", tc.name, o.PrefillTime(), prefill)
		}
		link := cfg.Links[features.ClassOf(nodeA, tc.d)]
		bytes := float64(prompt * sim.DefaultKVBytesPerToken)
		transfer := ms(link.Latency) + bytes/link.BytesPerSec*1e3
		if o.KVTransferTokens != prompt || o.KVTransferBytes != bytes {
			t.Errorf("%s: moved %d tokens, %g bytes; want %d, %g", tc.name, o.KVTransferTokens, o.KVTransferBytes, prompt, bytes)
		}
		if math.Abs(ms(o.KVTransferTime())-transfer) > 1e-5 {
			t.Errorf("%s: transfer %v, want %.5f ms", tc.name, o.KVTransferTime(), transfer)
		}
		if o.Transfer.Class != features.ClassOf(nodeA, tc.d) || o.Transfer.Concurrent != 1 {
			t.Errorf("%s: transfer class %v concurrency %d", tc.name, o.Transfer.Class, o.Transfer.Concurrent)
		}
		firstStep := c.StepMs + c.PrefillTokenMs*1 + c.ContextTokenMs*prompt
		ttft := prefill + c.FrontendMs + transfer + firstStep
		if math.Abs(ms(o.Decode.TTFT())-ttft) > 1e-4 {
			t.Errorf("%s: TTFT %v, want %.4f ms", tc.name, o.Decode.TTFT(), ttft)
		}
		if !o.Split || o.PrefillFailed || o.PrefillPod != 0 || o.DecodePod != 0 || o.DecodeTopology != tc.d {
			t.Errorf("%s: route %+v", tc.name, o)
		}
		s := o.Sample()
		if s.ActualKVTransferMs != ms(o.KVTransferTime()) || s.KVTransferTokens != prompt ||
			s.KVBytesPerToken != sim.DefaultKVBytesPerToken || s.LinkClass != features.ClassOf(nodeA, tc.d).String() ||
			s.PrefillPod != "prefill-0" || s.DecodePod != "decode-0" || *s.PrefillTopology != nodeA ||
			s.DecodeTopology != tc.d || s.ConcurrentTransfers != 1 || s.PrefillMs != ms(o.PrefillTime()) ||
			s.ActualTTFTMs != ms(o.Decode.TTFT()) {
			t.Errorf("%s: sample %+v", tc.name, s)
		}
		if o.Decode.PrefixHitTokens != 0 {
			t.Errorf("%s: transferred KV counted as %d prefix-hit tokens", tc.name, o.Decode.PrefixHitTokens)
		}
	}
}

// The decode pod receives only what it does not already cache, and keeps
// what it received in its prefix cache.
func TestPDTransfersOnlyWhatDecodeLacks(t *testing.T) {
	cfg := pdTestConfig([]features.Topology{nodeA}, []features.Topology{nodeC})
	const prompt = 410 // 25 full blocks and 10 tokens
	// Request 1 runs on the decode pod alone and leaves its prompt cached;
	// request 2 shares the first 160 tokens (10 blocks) and is split;
	// request 3 repeats request 2 exactly.
	first := contentReq(1, 0, prompt, 3, 1)
	second := contentReq(2, time.Second, prompt, 3, 2)
	second.BlockHashes = sim.ChainBlocks(append(blockIDs(1, 10), blockIDs(2, prompt/sim.BlockSize)[10:]...))
	third := &sim.Request{ID: 3, Arrival: 2 * time.Second, PromptTokens: prompt, OutputTokens: 3, BlockHashes: second.BlockHashes}
	r := &routeByID{1: {Prefill: sim.NoSplit}, 2: {Prefill: 0}, 3: {Prefill: 0}}
	f := runPD(t, cfg, r, first, second, third)
	outs := f.Outcomes()
	if outs[0].Split || outs[0].Transfer != nil || outs[0].Prefill != nil {
		t.Errorf("no-split request has a prefill or a transfer: %+v", outs[0])
	}
	if got := outs[1].KVTransferTokens; got != prompt-160 {
		t.Errorf("second request moved %d tokens, want %d (the decode pod had 160)", got, prompt-160)
	}
	if got := outs[2].KVTransferTokens; got != prompt-prompt/sim.BlockSize*sim.BlockSize {
		t.Errorf("repeat moved %d tokens, want only the partial block (%d)", got, prompt%sim.BlockSize)
	}
}

func blockIDs(content uint64, n int) []uint64 {
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = content<<20 | uint64(i)
	}
	return ids
}

type routeByID map[int]sim.PDChoice

func (m routeByID) RoutePD(r *sim.Request, _, _ []sim.PodState) sim.PDChoice { return m[r.ID] }

// A fleet that never splits is the single-pool fleet: the same requests,
// routed the same way, get exactly the same latencies.
func TestPDNoSplitIsTheSinglePoolFleet(t *testing.T) {
	reqs, err := workload.Agentic(workload.AgenticOptions{
		Sessions: 6, Turns: 4, SystemPromptTokens: 600,
		Message:  workload.LogNormal{Mu: math.Log(150), Sigma: 0.8, Min: 8, Max: 2000},
		Output:   workload.LogNormal{Mu: math.Log(40), Sigma: 0.7, Min: 2, Max: 400},
		Arrivals: workload.Poisson(20), Seed: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := pdTestConfig([]features.Topology{nodeA}, []features.Topology{nodeA, nodeB, nodeC})
	single := cfg.Decode
	single.Servers = 3
	want, err := sim.Simulate(t.Context(), single, sim.FleetOptions{Router: sim.DefaultLoadPrefix()}, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	router, _ := sim.NewPDRouter("decode-only")
	got := runPD(t, cfg, router, reqs...)
	for i, o := range got.Outcomes() {
		w := want.Outcomes()[i]
		if o.Split || o.Decode.Server != w.Server || o.Decode.Dispatch != w.Dispatch ||
			o.Decode.FirstToken != w.FirstToken || o.Decode.Finish != w.Finish || o.Decode.Row != w.Row {
			t.Fatalf("request %d: P/D fleet %+v, single pool %+v", o.Request.ID, *o.Decode, *w)
		}
	}
	if s := got.Summary(); s.SplitRate != 0 || s.KVTransfer.N != 0 || s.Completed != want.Summary().Completed {
		t.Errorf("summary %+v", s)
	}
}

// When the prefill pod fails, the decode pod runs the request alone after
// the wasted prefill: no transfer, a full prefill on the decode pod.
func TestPDFallsBackToDecodeAlone(t *testing.T) {
	cfg := pdTestConfig([]features.Topology{nodeA}, []features.Topology{nodeB})
	cfg.PrefillFailureRate = 1
	const prompt, output = 300, 4
	f := runPD(t, cfg, fixedPair{Prefill: 0, Decode: 0}, contentReq(1, 0, prompt, output, 1))
	o := f.Outcomes()[0]
	c := cfg.Decode.Cost
	prefill := c.FrontendMs + c.StepMs + c.PrefillTokenMs*prompt + c.ContextTokenMs*prompt
	wantTTFT := prefill + prefill // the failed prefill, then the decode pod's own
	if !o.Split || !o.PrefillFailed || o.Transfer != nil || o.KVTransferTime() != 0 {
		t.Errorf("fallback outcome %+v", o)
	}
	if math.Abs(ms(o.Decode.TTFT())-wantTTFT) > 1e-4 || !o.Decode.Done {
		t.Errorf("fallback TTFT %v, want %.4f ms", o.Decode.TTFT(), wantTTFT)
	}

	// A prompt the prefill pod can never hold fails at once: the decode pod
	// (with a larger cache) runs it without waiting for anything.
	cfg = pdTestConfig([]features.Topology{nodeA}, []features.Topology{nodeB})
	cfg.Prefill.KVBlocks = 10
	f = runPD(t, cfg, fixedPair{Prefill: 0, Decode: 0}, contentReq(1, 0, prompt, output, 1))
	o = f.Outcomes()[0]
	if !o.PrefillFailed || !o.Prefill.Rejected || math.Abs(ms(o.Decode.TTFT())-prefill) > 1e-4 {
		t.Errorf("prefill pod too small: failed %v rejected %v TTFT %v, want %.4f ms",
			o.PrefillFailed, o.Prefill.Rejected, o.Decode.TTFT(), prefill)
	}
}

// Requests split at the same moment onto one link share it, and say so.
func TestPDConcurrentTransfersContend(t *testing.T) {
	cfg := pdTestConfig([]features.Topology{nodeA, nodeA}, []features.Topology{nodeC, nodeC})
	r := routeByID{1: {Prefill: 0, Decode: 0}, 2: {Prefill: 1, Decode: 1}}
	f := runPD(t, cfg, r, contentReq(1, 0, 400, 2, 1), contentReq(2, 0, 400, 2, 2))
	l := cfg.Links[features.SameZone]
	alone := ms(l.Latency) + 400*sim.DefaultKVBytesPerToken/l.BytesPerSec*1e3
	for _, o := range f.Outcomes() {
		if want := ms(l.Latency) + 2*(alone-ms(l.Latency)); math.Abs(ms(o.KVTransferTime())-want) > 1e-5 {
			t.Errorf("request %d: transfer %v, want %.5f ms (half the link)", o.Request.ID, o.KVTransferTime(), want)
		}
		if math.Abs(o.Transfer.MeanConcurrent-2) > 1e-6 || o.Sample().MeanConcurrent != o.Transfer.MeanConcurrent {
			t.Errorf("request %d: mean concurrency %g, want 2", o.Request.ID, o.Transfer.MeanConcurrent)
		}
	}
	if got := f.Outcomes()[1].Transfer.Concurrent; got != 2 {
		t.Errorf("second transfer saw %d on its link, want 2", got)
	}
}

// A run is a pure function of its inputs and seed; failures follow the
// seed and the configured rate.
func TestPDIsDeterministicBySeed(t *testing.T) {
	reqs, err := workload.Chat(workload.DefaultChat(300, 40))
	if err != nil {
		t.Fatal(err)
	}
	cfg := pdTestConfig([]features.Topology{nodeA, nodeC, nodeZ2}, []features.Topology{nodeA, nodeB, nodeZ2})
	cfg.PrefillFailureRate = 0.2
	run := func(name string, seed uint64) []sim.PDOutcome {
		cfg.Seed = seed
		router, ok := sim.NewPDRouter(name)
		if !ok {
			t.Fatalf("no router %q", name)
		}
		f := runPD(t, cfg, router, reqs...)
		var out []sim.PDOutcome
		for _, o := range f.Outcomes() {
			c := *o
			c.Request, c.Decode, c.Prefill, c.Transfer = nil, nil, nil, nil
			out = append(out, c, sim.PDOutcome{Decode: &sim.Outcome{FirstToken: o.Decode.FirstToken, Finish: o.Decode.Finish}})
		}
		return out
	}
	for _, name := range sim.PDRouterNames {
		a, b := run(name, 7), run(name, 7)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: two runs with seed 7 differ", name)
		}
	}
	cfg.Seed = 7
	router, _ := sim.NewPDRouter("greedy")
	s7 := runPD(t, cfg, router, reqs...).Summary()
	cfg.Seed = 8
	router, _ = sim.NewPDRouter("greedy")
	s8 := runPD(t, cfg, router, reqs...).Summary()
	if s7.PrefillFailed == s8.PrefillFailed && s7.TTFT == s8.TTFT {
		t.Error("seeds 7 and 8 give the same failures and latencies")
	}
	for _, s := range []sim.PDSummary{s7, s8} {
		if rate := float64(s.PrefillFailed) / float64(s.Split); rate < 0.13 || rate > 0.27 {
			t.Errorf("prefill failure rate %.3f over %d splits, configured 0.2", rate, s.Split)
		}
		if s.Completed != len(reqs) || s.SplitRate != 1 || s.KVTransfer.N != s.Split-s.PrefillFailed {
			t.Errorf("summary %+v", s)
		}
	}
}

func TestPDConfigValidate(t *testing.T) {
	good := pdTestConfig([]features.Topology{nodeA}, []features.Topology{nodeB})
	for _, tc := range []struct {
		name   string
		break_ func(*sim.PDConfig)
	}{
		{"no decode pods", func(c *sim.PDConfig) { c.DecodePods = nil }},
		{"bad prefill engine", func(c *sim.PDConfig) { c.Prefill.KVBlocks = 0 }},
		{"no kv size", func(c *sim.PDConfig) { c.KVBytesPerToken = 0 }},
		{"NaN kv size", func(c *sim.PDConfig) { c.KVBytesPerToken = math.NaN() }},
		{"failure rate above 1", func(c *sim.PDConfig) { c.PrefillFailureRate = 1.5 }},
		{"link without bandwidth", func(c *sim.PDConfig) { c.Links[features.CrossZone].BytesPerSec = 0 }},
	} {
		c := good
		tc.break_(&c)
		if _, err := sim.NewPDFleet(c, &sim.Greedy{}, sim.PDHooks{}); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if _, err := sim.NewPDFleet(good, nil, sim.PDHooks{}); err == nil {
		t.Error("no router: accepted")
	}
	bad := routeByID{1: {Prefill: 5, Decode: 0}}
	if _, err := sim.SimulatePD(t.Context(), good, bad, sim.PDHooks{}, contentReq(1, 0, 100, 2, 1)); err == nil {
		t.Error("a router naming a missing prefill pod: no error")
	}
}

// seeing records the pods a router saw for each request, routing by a
// fixed table.
type seeing struct {
	routeByID
	prefill, decode map[int][]sim.PodState
}

func (s *seeing) RoutePD(req *sim.Request, prefill, decode []sim.PodState) sim.PDChoice {
	s.prefill[req.ID] = append([]sim.PodState(nil), prefill...)
	s.decode[req.ID] = append([]sim.PodState(nil), decode...)
	return s.routeByID.RoutePD(req, prefill, decode)
}

// A router sees the transfers in flight on each pod (what a sidecar knows
// of its own links), and the first-token hook fires once per request with
// the client's first token known.
func TestPDRouterSeesTransfersInFlight(t *testing.T) {
	cfg := pdTestConfig([]features.Topology{nodeA, nodeB}, []features.Topology{nodeZ2, nodeC})
	r := &seeing{routeByID: routeByID{1: {Prefill: 0, Decode: 0}, 2: {Prefill: 1, Decode: 1}, 3: {Prefill: 1, Decode: 1}},
		prefill: map[int][]sim.PodState{}, decode: map[int][]sim.PodState{}}
	// Request 1's 400-token prefill ends near 56 ms; its 105 MB then cross
	// the zones for 35 ms. Request 2 comes in the middle, request 3 after.
	reqs := []*sim.Request{contentReq(1, 0, 400, 2, 1), contentReq(2, 75*time.Millisecond, 400, 2, 2),
		contentReq(3, 500*time.Millisecond, 400, 2, 3)}
	first := map[int]int{}
	f, err := sim.SimulatePD(t.Context(), cfg, r, sim.PDHooks{OnFirstToken: func(o *sim.PDOutcome) {
		if o.Decode.FirstToken == 0 {
			t.Errorf("request %d: first-token hook before its first token", o.Request.ID)
		}
		first[o.Request.ID]++
	}}, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	if o := f.Outcomes()[0]; o.Transfer == nil || o.Transfer.Start > 75*time.Millisecond || o.Transfer.End < 75*time.Millisecond {
		t.Fatalf("request 1's transfer %+v does not span request 2's arrival", o.Transfer)
	}
	for id, want := range map[int][2][]int{
		1: {{0, 0}, {0, 0}},
		2: {{1, 0}, {1, 0}},
		3: {{0, 0}, {0, 0}},
	} {
		for side, pods := range [][]sim.PodState{r.prefill[id], r.decode[id]} {
			for i, p := range pods {
				if p.Transfers != want[side][i] {
					t.Errorf("request %d saw %d transfers on pod %d of pool %d, want %d", id, p.Transfers, i, side, want[side][i])
				}
			}
		}
	}
	for _, req := range reqs {
		if first[req.ID] != 1 {
			t.Errorf("request %d: first-token hook fired %d times", req.ID, first[req.ID])
		}
	}
}

// OnDispatch sees each route as recorded (split or alone, a rejection
// already marked) with the candidates the router saw; with a scrape
// interval the pods' gauges are as old as the last scrape, while prefix
// scores and the router's own counts stay current.
func TestPDDispatchHookAndScrapedGauges(t *testing.T) {
	for _, interval := range []time.Duration{0, time.Hour} {
		cfg := pdTestConfig([]features.Topology{nodeA}, []features.Topology{nodeB})
		cfg.ScrapeInterval = interval
		type seen struct {
			split, rejected    bool
			prefillN, decodeN  int
			running, inFlight  int
			prefillPod, decode int
		}
		var got []seen
		hooks := sim.PDHooks{OnDispatch: func(o *sim.PDOutcome, prefill, decode []sim.PodState) {
			got = append(got, seen{o.Split, o.Decode.Rejected, len(prefill), len(decode),
				decode[0].NumRequestRunning, decode[0].InFlight, o.PrefillPod, o.DecodePod})
		}}
		reqs := []*sim.Request{
			contentReq(1, 0, 64, 400, 1),                                            // alone: decodes for seconds
			contentReq(2, time.Second, 64, 5, 2),                                    // split: the decode pod has 1 running now
			{ID: 3, Arrival: 2 * time.Second, PromptTokens: 20000, OutputTokens: 2}, // never fits
		}
		choices := map[int]sim.PDChoice{1: {Prefill: sim.NoSplit, Decode: 0}, 2: {Prefill: 0, Decode: 0}, 3: {Prefill: 0, Decode: 0}}
		f, err := sim.SimulatePD(t.Context(), cfg, pdRouterFunc(func(r *sim.Request, _, _ []sim.PodState) sim.PDChoice {
			return choices[r.ID]
		}), hooks, reqs...)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || len(f.Outcomes()) != 3 {
			t.Fatalf("interval %v: %d dispatches seen, want 3", interval, len(got))
		}
		wantRunning := 1
		if interval > 0 {
			wantRunning = 0 // scraped at the first dispatch, when nothing ran
		}
		want := []seen{
			{false, false, 1, 1, 0, 0, sim.NoSplit, 0},
			{true, false, 1, 1, wantRunning, 1, 0, 0},
			{false, true, 1, 1, wantRunning, 1, sim.NoSplit, 0},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("interval %v: saw %+v, want %+v", interval, got, want)
		}
	}
}

type pdRouterFunc func(r *sim.Request, prefill, decode []sim.PodState) sim.PDChoice

func (f pdRouterFunc) RoutePD(r *sim.Request, prefill, decode []sim.PodState) sim.PDChoice {
	return f(r, prefill, decode)
}
