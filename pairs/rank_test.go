package pairs

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/wire"
)

func place(region, zone, rack, node string) features.Topology {
	return features.Topology{Region: region, Zone: zone, Rack: rack, Node: node}
}

var (
	rackA1 = place("eu", "eu-1", "r1", "n1")
	rackA2 = place("eu", "eu-1", "r1", "n2")
	rackB  = place("eu", "eu-1", "r2", "n3")
	zoneB  = place("eu", "eu-2", "r9", "n9")
	usEast = place("us", "us-1", "r1", "n1")
)

// pod is a candidate with waiting requests (100 ms of TTFT each in
// testModels), running ones (1 ms of TPOT each) and a prefix-cache score.
func pod(name string, topo features.Topology, waiting, running int64, prefix float64) Candidate {
	return Candidate{Pod: name, Topology: topo, Row: features.Row{
		NumRequestWaiting: waiting, NumRequestRunning: running, PrefixCacheScore: prefix}}
}

func names(req *Request, o Option) [2]string {
	p := ""
	if o.Split() {
		p = req.Prefill[o.Prefill].Pod
	}
	return [2]string{p, req.Decode[o.Decode].Pod}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// rankCase is a request's candidates and the ranking they should get.
type rankCase struct {
	name    string
	prefill []Candidate
	decode  []Candidate
	want    [2]string // best option: prefill pod ("" for no split), decode pod
	order   [][2]string
}

// checkRanked checks res's best option and the order of its pairs.
func checkRanked(t *testing.T, req *Request, res *Result, want [2]string, order [][2]string) {
	t.Helper()
	if got := names(req, res.Best); got != want {
		t.Errorf("best = %v, want %v (pairs %+v, no split %+v)", got, want, res.Pairs, res.NoSplit)
	}
	var got [][2]string
	for _, o := range res.Pairs {
		got = append(got, names(req, o))
	}
	if !slices.Equal(got, order) {
		t.Errorf("pairs ranked %v, want %v", got, order)
	}
}

func TestRankPicksThePairNotThePods(t *testing.T) {
	tests := []rankCase{{
		// The idle prefill pod across the ocean prefills 200 ms faster, but
		// its 537 MB of KV cache take a second to arrive; the busier pod in
		// the decode pod's rack wins, and beats the decode pod's own prefill.
		name:    "same rack beats a faster prefill across regions",
		prefill: []Candidate{pod("p-far", usEast, 0, 0, 0), pod("p-near", rackA2, 2, 0, 0)},
		decode:  []Candidate{pod("d", rackA1, 3, 10, 0)},
		want:    [2]string{"p-near", "d"},
		order:   [][2]string{{"p-near", "d"}, {"p-far", "d"}},
	}, {
		// An idle decode pod prefills as fast as the prefill pod; the split
		// adds a transfer between zones.
		name:    "no split when transfer and prefill exceed the decode pod's own prefill",
		prefill: []Candidate{pod("p", zoneB, 0, 0, 0)},
		decode:  []Candidate{pod("d", rackA1, 0, 10, 0)},
		want:    [2]string{"", "d"},
		order:   [][2]string{{"p", "d"}},
	}, {
		// Among pairs: the decode pod with a warm prefix cache moves a
		// quarter of the prompt; the cold one on the same rack the whole.
		name:    "the decode pod's cached prefix is not transferred",
		prefill: []Candidate{pod("p", rackB, 0, 0, 0)},
		decode:  []Candidate{pod("d-cold", rackA1, 5, 10, 0), pod("d-warm", rackA2, 5, 10, 0.75)},
		want:    [2]string{"p", "d-warm"},
		order:   [][2]string{{"p", "d-warm"}, {"p", "d-cold"}},
	}, {
		// Both decode pods are on the prefill pod's node: the busier one's
		// first step, beyond the calm one's, is the pairs' difference.
		name:    "the decode pod's load counts",
		prefill: []Candidate{pod("p", rackA1, 0, 0, 0)},
		decode:  []Candidate{pod("d-busy", rackA1, 9, 60, 0), pod("d-calm", rackA1, 9, 5, 0)},
		want:    [2]string{"p", "d-calm"},
		order:   [][2]string{{"p", "d-calm"}, {"p", "d-busy"}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := testModels(t, links())
			req := &Request{InputTokenLength: 4096, Prefill: tt.prefill, Decode: tt.decode}
			var res Result
			if err := Rank(&m, req, &res); err != nil {
				t.Fatal(err)
			}
			checkRanked(t, req, &res, tt.want, tt.order)
			if res.RankedBy != wire.RankByTTFT || res.TotalPairs != len(tt.prefill)*len(tt.decode) || res.UnknownPairs != 0 {
				t.Errorf("ranked by %s, %d pairs, %d unknown", res.RankedBy, res.TotalPairs, res.UnknownPairs)
			}
		})
	}
}

func TestRankGreedyWouldPickTheFarPod(t *testing.T) {
	// The premise of the first case above: on prefill time alone, the far
	// pod is better.
	m := testModels(t, links())
	req := &Request{InputTokenLength: 4096,
		Prefill: []Candidate{pod("p-far", usEast, 0, 0, 0), pod("p-near", rackA2, 2, 0, 0)},
		Decode:  []Candidate{pod("d", rackA1, 3, 10, 0)}}
	var res Result
	if err := Rank(&m, req, &res); err != nil {
		t.Fatal(err)
	}
	near, far := res.Pairs[0], res.Pairs[1]
	if !(far.PrefillPart.Ms < near.PrefillPart.Ms) || !(far.Transfer.Ms > near.Transfer.Ms+near.PrefillPart.Ms-far.PrefillPart.Ms) {
		t.Fatalf("far pair prefill %v transfer %v, near %v %v", far.PrefillPart.Ms, far.Transfer.Ms, near.PrefillPart.Ms, near.Transfer.Ms)
	}
	if far.Link != features.CrossRegion || near.Link != features.SameRack {
		t.Fatalf("links %s and %s", far.Link, near.Link)
	}
}

func TestRankParts(t *testing.T) {
	tm := links()
	m := testModels(t, tm)
	p := pod("p", rackB, 1, 7, 0.5)
	p.Row.PodType = "" // takes the role "prefill"
	p.Concurrent = 3
	d := pod("d", rackA1, 2, 30, 0.25)
	d.Concurrent = 2
	req := &Request{InputTokenLength: 1000, KVBytesPerToken: 1 << 10, Prefill: []Candidate{p}, Decode: []Candidate{d}}
	var res Result
	if err := Rank(&m, req, &res); err != nil {
		t.Fatal(err)
	}
	pair := res.Pairs[0]
	// Each part is the model's estimate on the candidate's row with the
	// request's fields and the role's pod type, as /predict would give.
	var buf []float64
	pRow := features.Row{InputTokenLength: 1000, NumRequestWaiting: 1, NumRequestRunning: 7, PrefixCacheScore: 0.5, PodType: "prefill"}
	dRow := features.Row{InputTokenLength: 1000, NumRequestWaiting: 2, NumRequestRunning: 30, PrefixCacheScore: 0.25, PodType: "decode"}
	if want := m.Statistic.Predict(m.TTFT, &pRow, buf); pair.PrefillPart != want {
		t.Errorf("prefill part %+v, want %+v", pair.PrefillPart, want)
	}
	if want := m.Statistic.Predict(m.TPOT, &dRow, buf); pair.TPOT != want {
		t.Errorf("TPOT %+v, want %+v", pair.TPOT, want)
	}
	// The only decode candidate is the lightest: its first step is the
	// one the prefill part holds.
	if pair.DecodeLoadMs != 0 {
		t.Errorf("decode load %v ms with one decode candidate", pair.DecodeLoadMs)
	}
	if want := m.Statistic.Predict(m.TTFT, &dRow, buf); res.NoSplit[0].TTFT != want {
		t.Errorf("no-split TTFT %+v, want %+v", res.NoSplit[0].TTFT, want)
	}
	// 750 tokens move (D has a quarter), 1 KiB each, between racks,
	// sharing the busier link.
	if pair.TransferTokens != 750 || tm.lastTokens != 750 || tm.lastBytes != 1024 || tm.lastParallel != 3 {
		t.Errorf("transfer of %d tokens; model asked %d tokens × %v bytes, %d concurrent",
			pair.TransferTokens, tm.lastTokens, tm.lastBytes, tm.lastParallel)
	}
	if want := 1 + 750*1024*3/10e6; !near(pair.Transfer.Ms, want) {
		t.Errorf("transfer %v ms, want %v", pair.Transfer.Ms, want)
	}
	if lo, hi := pair.Transfer.Bounds[0], pair.Transfer.Bounds[1]; !near(lo, pair.Transfer.Ms*math.Exp(-0.3*0.9)) || !near(hi, pair.Transfer.Ms*math.Exp(0.3*0.9)) {
		t.Errorf("transfer bounds %v around %v", pair.Transfer.Bounds, pair.Transfer.Ms)
	}
	// TTFT and its bounds are the parts' sums: no decode step is added to
	// the prefill part, which holds it.
	for k, got := range []float64{pair.TTFT.Ms, pair.TTFT.Bounds[0], pair.TTFT.Bounds[1]} {
		parts := [2]float64{pair.PrefillPart.Ms, pair.Transfer.Ms}
		if k > 0 {
			parts = [2]float64{pair.PrefillPart.Bounds[k-1], pair.Transfer.Bounds[k-1]}
		}
		if want := parts[0] + parts[1]; !near(got, want) {
			t.Errorf("TTFT value %d = %v, want the parts' sum %v", k, got, want)
		}
	}
	if !(pair.TTFT.Bounds[0] < pair.TTFT.Ms && pair.TTFT.Ms < pair.TTFT.Bounds[1]) || pair.TTFT.Uncertainty() <= 0 {
		t.Errorf("TTFT %+v", pair.TTFT)
	}
}

func TestRankQuantileObjective(t *testing.T) {
	m := testModels(t, links())
	m.Statistic = predictor.Statistic{Objective: predictor.Quantile, Quantile: 0.9}
	req := &Request{InputTokenLength: 1000, Prefill: []Candidate{pod("p", rackB, 0, 0, 0)}, Decode: []Candidate{pod("d", rackA1, 0, 0, 0)}}
	var res Result
	if err := Rank(&m, req, &res); err != nil {
		t.Fatal(err)
	}
	tr := res.Pairs[0].Transfer
	central := 1 + 1000*float64(128<<10)/10e6
	if want := central * math.Exp(0.3*0.8); !near(tr.Ms, want) {
		t.Errorf("transfer at q0.9 = %v, want %v", tr.Ms, want)
	}
	if !(res.Pairs[0].PrefillPart.Ms > res.Pairs[0].PrefillPart.Bounds[0]) {
		t.Errorf("prefill part %+v is not a quantile above the 5%% bound", res.Pairs[0].PrefillPart)
	}
}

func TestRankK(t *testing.T) {
	m := testModels(t, links())
	var prefill, decode []Candidate
	for i := range 5 {
		prefill = append(prefill, pod("p", rackB, int64(i), 0, 0))
		decode = append(decode, pod("d", rackA1, 1, int64(10*i), 0))
	}
	for _, tt := range []struct{ k, pairs, noSplit int }{{0, 25, 5}, {1, 1, 1}, {3, 3, 3}, {7, 7, 5}, {100, 25, 5}} {
		req := &Request{InputTokenLength: 2000, K: tt.k, Prefill: prefill, Decode: decode}
		var all, res Result
		full := *req
		full.K = 0
		if err := Rank(&m, &full, &all); err != nil {
			t.Fatal(err)
		}
		if err := Rank(&m, req, &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Pairs) != tt.pairs || len(res.NoSplit) != tt.noSplit || res.TotalPairs != 25 {
			t.Errorf("k=%d: %d pairs, %d no-split of %d, want %d and %d", tt.k, len(res.Pairs), len(res.NoSplit), res.TotalPairs, tt.pairs, tt.noSplit)
		}
		// The best k are the head of the full ranking.
		if !slices.Equal(res.Pairs, all.Pairs[:len(res.Pairs)]) || res.Best != all.Best {
			t.Errorf("k=%d: not the head of the full ranking", tt.k)
		}
		for i := 1; i < len(all.Pairs); i++ {
			if all.Pairs[i].TTFT.Ms < all.Pairs[i-1].TTFT.Ms {
				t.Fatalf("pairs out of order at %d", i)
			}
		}
	}
}

func TestRankSLOHeadroom(t *testing.T) {
	m := testModels(t, links())
	// d-fast: idle queue, a long batch (TPOT 20+60 = 80 ms);
	// d-steady: 1 waiting, a short batch (TPOT 25 ms). Same prefill pod,
	// same node.
	prefill := []Candidate{pod("p", rackA1, 0, 0, 0)}
	decode := []Candidate{pod("d-fast", rackA1, 0, 60, 0), pod("d-steady", rackA1, 1, 5, 0)}
	req := &Request{InputTokenLength: 1000, Prefill: prefill, Decode: decode}
	var res Result
	if err := Rank(&m, req, &res); err != nil {
		t.Fatal(err)
	}
	if got := names(req, res.Pairs[0]); got != [2]string{"p", "d-steady"} {
		// Same prefill, same link: the pair TTFT differs by the first
		// decode step only, which favours the short batch too.
		t.Fatalf("by TTFT, first pair %v", got)
	}
	if got := names(req, res.NoSplit[0]); got != [2]string{"", "d-fast"} {
		t.Fatalf("by TTFT, first no-split option %v (%+v)", got, res.NoSplit)
	}

	tests := []struct {
		name       string
		ttft, tpot float64
		first      string // best no-split decode pod
	}{
		{"TPOT SLO the fast pod misses", 0, 50, "d-steady"},
		{"both SLOs, tight TPOT", 1000, 50, "d-steady"},
		{"TTFT SLO alone keeps TTFT order", 400, 0, "d-fast"},
		// Both pods meet both SLOs; d-steady has more TPOT room to spare,
		// which does not rank: TTFT does.
		{"loose SLOs: every option meets them, least TTFT first", 10000, 100, "d-fast"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &Request{InputTokenLength: 1000, TTFTSLOMs: tt.ttft, TPOTSLOMs: tt.tpot, Prefill: prefill, Decode: decode}
			var res Result
			if err := Rank(&m, req, &res); err != nil {
				t.Fatal(err)
			}
			if res.RankedBy != wire.RankBySLOHeadroom {
				t.Errorf("ranked by %s", res.RankedBy)
			}
			if got := req.Decode[res.NoSplit[0].Decode].Pod; got != tt.first {
				t.Errorf("first no-split option %s, want %s", got, tt.first)
			}
			for _, o := range append(res.NoSplit, res.Pairs...) {
				wantT, wantP, slack := 0.0, 0.0, math.Inf(1)
				if tt.ttft > 0 {
					wantT = tt.ttft - o.TTFT.Ms
					slack = min(slack, wantT/tt.ttft)
				}
				if tt.tpot > 0 {
					wantP = tt.tpot - o.TPOT.Ms
					slack = min(slack, wantP/tt.tpot)
				}
				if !near(o.TTFTHeadroomMs, wantT) || !near(o.TPOTHeadroomMs, wantP) || !near(o.Score, -min(slack, 0)) {
					t.Errorf("%v: headroom %v/%v score %v, want %v/%v %v", names(req, o), o.TTFTHeadroomMs, o.TPOTHeadroomMs, o.Score, wantT, wantP, -min(slack, 0))
				}
			}
		})
	}
}

func TestRankWithoutTransferEstimates(t *testing.T) {
	prefill := []Candidate{pod("p-near", rackA2, 0, 0, 0), pod("p-far", usEast, 0, 0, 0)}
	decode := []Candidate{pod("d1", rackA1, 3, 0, 0), pod("d2", rackB, 1, 0, 0)}

	t.Run("no transfer model", func(t *testing.T) {
		m := testModels(t, nil)
		req := &Request{InputTokenLength: 1000, Prefill: prefill, Decode: decode}
		var res Result
		if err := Rank(&m, req, &res); err != nil {
			t.Fatal(err)
		}
		if res.TransferModel || len(res.Pairs) != 0 || res.UnknownPairs != 4 || res.Best.Split() {
			t.Fatalf("transfer model %v, %d pairs, %d unknown, best %+v", res.TransferModel, len(res.Pairs), res.UnknownPairs, res.Best)
		}
		want := []features.LinkClass{features.SameRack, features.SameZone, features.CrossRegion}
		if !slices.Equal(res.UnknownLinks, want) {
			t.Errorf("unknown links %v, want %v", res.UnknownLinks, want)
		}
		if got := names(req, res.Best); got != [2]string{"", "d2"} {
			t.Errorf("best %v", got)
		}
	})
	t.Run("a class the model has not seen", func(t *testing.T) {
		tm := links()
		delete(tm.bytesPerMs, features.CrossRegion)
		m := testModels(t, tm)
		req := &Request{InputTokenLength: 1000, Prefill: prefill, Decode: decode}
		var res Result
		if err := Rank(&m, req, &res); err != nil {
			t.Fatal(err)
		}
		if !res.TransferModel || len(res.Pairs) != 2 || res.UnknownPairs != 2 ||
			!slices.Equal(res.UnknownLinks, []features.LinkClass{features.CrossRegion}) {
			t.Fatalf("%d pairs, %d unknown (%v)", len(res.Pairs), res.UnknownPairs, res.UnknownLinks)
		}
		for _, o := range res.Pairs {
			if req.Prefill[o.Prefill].Pod != "p-near" {
				t.Errorf("pair %v ranked without a transfer estimate", names(req, o))
			}
		}
	})
}

func TestRankErrors(t *testing.T) {
	full := testModels(t, links())
	req := &Request{InputTokenLength: 10, Prefill: []Candidate{pod("p", rackA1, 0, 0, 0)}, Decode: []Candidate{pod("d", rackA1, 0, 0, 0)}}
	for _, tt := range []struct {
		name string
		m    Models
		req  Request
		want error
	}{
		{"no TPOT model", Models{TTFT: full.TTFT}, *req, ErrNotReady},
		{"no TTFT model", Models{TPOT: full.TPOT}, *req, ErrNotReady},
		{"no decode pods", full, Request{InputTokenLength: 10, Prefill: req.Prefill}, nil},
	} {
		var res Result
		err := Rank(&tt.m, &tt.req, &res)
		if err == nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	// No prefill pods is not an error: only the no-split options remain.
	var res Result
	if err := Rank(&full, &Request{InputTokenLength: 10, Decode: req.Decode}, &res); err != nil || len(res.Pairs) != 0 || res.Best.Split() {
		t.Errorf("no prefill pods: %v, %+v", err, res)
	}
}

func TestRankReusesResult(t *testing.T) {
	m := testModels(t, links())
	var prefill, decode []Candidate
	for i := range 16 {
		prefill = append(prefill, pod("p", rackB, int64(i%3), int64(i), 0.1))
		decode = append(decode, pod("d", rackA1, int64(i%2), int64(i), 0.2))
	}
	req := &Request{InputTokenLength: 3000, Prefill: prefill, Decode: decode}
	var res Result
	if err := Rank(&m, req, &res); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if err := Rank(&m, req, &res); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("Rank into a used Result allocates %v times", allocs)
	}
}

func TestRankDoesNotPairAPodWithItself(t *testing.T) {
	m := testModels(t, links())
	both := pod("both-0", rackA1, 0, 3, 0)
	req := &Request{InputTokenLength: 1000, Prefill: []Candidate{both, pod("p", rackA2, 0, 0, 0)},
		Decode: []Candidate{both, pod("d", rackB, 0, 0, 0)}}
	var res Result
	if err := Rank(&m, req, &res); err != nil {
		t.Fatal(err)
	}
	if res.TotalPairs != 3 || len(res.Pairs) != 3 || len(res.NoSplit) != 2 {
		t.Fatalf("%d pairs of %d, %d no-split", len(res.Pairs), res.TotalPairs, len(res.NoSplit))
	}
	for _, o := range res.Pairs {
		if o.Prefill == 0 && o.Decode == 0 {
			t.Errorf("pod paired with itself: %+v", o)
		}
	}
}

// routeByID routes each simulated request as its entry says, and keeps
// the pods' states when the request it watches is routed.
type routeByID struct {
	route           map[int]sim.PDChoice
	watch           int
	prefill, decode []sim.PodState
}

func (r *routeByID) RoutePD(req *sim.Request, prefill, decode []sim.PodState) sim.PDChoice {
	if req.ID == r.watch {
		r.prefill, r.decode = slices.Clone(prefill), slices.Clone(decode)
	}
	return r.route[req.ID]
}

// exactTransfer is a transfer model that knows the transfer's time.
type exactTransfer float64

func (x exactTransfer) Predict(features.LinkClass, int64, float64, int64) (float64, bool) {
	return float64(x), true
}
func (x exactTransfer) Quantile(_ features.LinkClass, central, _ float64) float64 { return central }
func (x exactTransfer) SharedMs(*features.Row, []float64) float64                 { return 0 }

// A pair's TTFT and the choice to split, against the simulator's truth:
// one request split onto a prefill pod and a decode pod on one node, and
// the same request on the decode pod alone, on a decode pod idle or
// decoding for other requests. Models that predict exactly what they
// learn (the TTFT model on the prefill row its label, the client's TTFT
// less the transfer; on the decode row the TTFT alone; the TPOT model the
// request's TPOT on the decode pod; the transfer model the transfer) must
// give the pair the simulated TTFT, and split exactly when that is
// shorter. When the decode pod decodes for 40 others, splitting is right
// by less than one TPOT: adding a decode step to the prefill pod's label,
// as Rank once did, chose not to split.
func TestRankPairTTFTIsTheSimulatedOne(t *testing.T) {
	node := place("eu", "z1", "r1", "n1")
	engine := sim.Config{Name: "test", Servers: 1, KVBlocks: 100000, PrefixCaching: true, MaxNumSeqs: 64, MaxNumBatchedTokens: 512,
		Cost: sim.CostModel{StepMs: 10, PrefillTokenMs: 0.1, DecodeSeqMs: 0.5, ContextTokenMs: 0.001, FrontendMs: 3}}
	cfg := sim.PDConfig{Prefill: engine, Decode: engine, PrefillPods: []features.Topology{node},
		DecodePods: []features.Topology{node}, Links: sim.DefaultLinks(), KVBytesPerToken: sim.DefaultKVBytesPerToken}
	const prompt, watched = 704, 1
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	for _, tc := range []struct {
		name      string
		decoding  int // requests the decode pod is decoding when the watched one arrives
		wantSplit bool
	}{
		{"idle decode pod: its own prefill beats prefill, hop and transfer", 0, false},
		{"busy decode pod: the split wins by less than a TPOT", 40, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(c sim.PDChoice) (*sim.PDOutcome, *routeByID) {
				r := &routeByID{route: map[int]sim.PDChoice{watched: c}, watch: watched}
				reqs := []*sim.Request{{ID: watched, Arrival: time.Second, PromptTokens: prompt, OutputTokens: 5}}
				for i := range tc.decoding {
					reqs = append(reqs, &sim.Request{ID: 100 + i, PromptTokens: 32, OutputTokens: 4000})
					r.route[100+i] = sim.PDChoice{Prefill: sim.NoSplit}
				}
				f, err := sim.SimulatePD(t.Context(), cfg, r, sim.PDHooks{}, reqs...)
				if err != nil {
					t.Fatal(err)
				}
				return f.Outcomes()[0], r
			}
			split, seen := run(sim.PDChoice{Prefill: 0, Decode: 0})
			alone, _ := run(sim.PDChoice{Prefill: sim.NoSplit, Decode: 0})
			if split.Request.ID != watched || !split.Split || alone.Split {
				t.Fatalf("outcomes %+v, %+v", split, alone)
			}
			ttftSplit, ttftAlone := ms(split.Decode.TTFT()), ms(alone.Decode.TTFT())
			transfer, tpot := ms(split.KVTransferTime()), ms(split.Decode.TPOT())
			if margin := ttftAlone - ttftSplit; tc.wantSplit != (margin > 0) || margin > tpot {
				t.Fatalf("splitting gains %.3f ms with a TPOT of %.3f: not the case the test is about", margin, tpot)
			}

			label := ttftSplit - transfer
			perDecode := (ttftAlone - label) / float64(features.PodDecode-features.PodPrefill)
			m := Models{
				TTFT: lineModel(t, features.DefaultTTFTColumns, label-perDecode*float64(features.PodPrefill),
					map[string]float64{"pod_type": perDecode}, 0.2),
				TPOT:      lineModel(t, features.DefaultTPOTColumns, tpot, nil, 0.1),
				Transfer:  exactTransfer(transfer),
				Statistic: predictor.Statistic{Objective: predictor.Mean},
			}
			candidate := func(s sim.PodState, name string) Candidate {
				row := s.Row(split.Request)
				row.PodType = ""
				return Candidate{Pod: name, Topology: s.Topology, Row: row}
			}
			req := &Request{InputTokenLength: prompt, Prefill: []Candidate{candidate(seen.prefill[0], "p")},
				Decode: []Candidate{candidate(seen.decode[0], "d")}}
			var res Result
			if err := Rank(&m, req, &res); err != nil {
				t.Fatal(err)
			}
			if len(res.Pairs) != 1 || len(res.NoSplit) != 1 {
				t.Fatalf("%d pairs, %d no-split options", len(res.Pairs), len(res.NoSplit))
			}
			if got := res.Pairs[0].TTFT.Ms; math.Abs(got-ttftSplit) > 1e-6 {
				t.Errorf("pair TTFT %.6f ms, simulated %.6f (%+.3f; a TPOT is %.3f)", got, ttftSplit, got-ttftSplit, tpot)
			}
			if got := res.NoSplit[0].TTFT.Ms; math.Abs(got-ttftAlone) > 1e-6 {
				t.Errorf("no-split TTFT %.6f ms, simulated %.6f", got, ttftAlone)
			}
			if res.Best.Split() != tc.wantSplit {
				t.Errorf("best splits: %v, want %v (pair %.3f ms, alone %.3f)", res.Best.Split(), tc.wantSplit, res.Pairs[0].TTFT.Ms, res.NoSplit[0].TTFT.Ms)
			}
		})
	}
}

// The decode pod's load enters a pair's TTFT as its first step beyond the
// lightest decode candidate's: the prefill part holds a first step on the
// decode pod routers chose, the lightest, so only the excess is added,
// shifting the value and both bounds, at the mean and at a quantile.
func TestRankDecodeLoad(t *testing.T) {
	for _, stat := range []predictor.Statistic{{Objective: predictor.Mean}, {Objective: predictor.Quantile, Quantile: 0.9}} {
		m := testModels(t, links())
		m.Statistic = stat
		// TPOT 20 + running: 25, 45 and 30 ms.
		decode := []Candidate{pod("d-5", rackA1, 0, 5, 0), pod("d-25", rackA1, 0, 25, 0), pod("d-10", rackA1, 0, 10, 0)}
		req := &Request{InputTokenLength: 1000, Prefill: []Candidate{pod("p", rackA2, 0, 0, 0)}, Decode: decode}
		var res Result
		if err := Rank(&m, req, &res); err != nil {
			t.Fatal(err)
		}
		// A quantile scales every central TPOT by one factor.
		lightest := res.Pairs[0].TPOT.Ms
		scale := lightest / 25
		for _, o := range res.Pairs {
			load := o.TPOT.Ms - lightest
			if want := []float64{0, 20, 5}[o.Decode] * scale; !near(o.DecodeLoadMs, load) || !near(load, want) {
				t.Errorf("%v %v: decode load %v, want %v (%v)", stat, names(req, o), o.DecodeLoadMs, load, want)
			}
			for k, got := range []float64{o.TTFT.Ms, o.TTFT.Bounds[0], o.TTFT.Bounds[1]} {
				want := o.PrefillPart.Ms + o.Transfer.Ms + load
				if k > 0 {
					want = o.PrefillPart.Bounds[k-1] + o.Transfer.Bounds[k-1] + load
				}
				if !near(got, want) {
					t.Errorf("%v %v: TTFT value %d = %v, want %v", stat, names(req, o), k, got, want)
				}
			}
		}
		if order := []string{names(req, res.Pairs[0])[1], names(req, res.Pairs[1])[1], names(req, res.Pairs[2])[1]}; !slices.Equal(order, []string{"d-5", "d-10", "d-25"}) {
			t.Errorf("%v: pairs ranked %v", stat, order)
		}
	}
}

func TestRankOneOrderOverEveryOption(t *testing.T) {
	m := testModels(t, links())
	var prefill, decode []Candidate
	for i := range 4 {
		prefill = append(prefill, pod(fmt.Sprintf("p%d", i), []features.Topology{rackA2, rackB, zoneB, usEast}[i], int64(i%3), 0, 0))
		// d2 and d3 are twins: their options tie.
		decode = append(decode, pod(fmt.Sprintf("d%d", i), rackA1, int64(min(i, 2)), int64(10*min(i, 2)), 0.1*float64(min(i, 2))))
	}
	for _, matrix := range []bool{false, true} {
		req := &Request{InputTokenLength: 3000, Prefill: prefill, Decode: decode, Matrix: matrix}
		var res Result
		if err := Rank(&m, req, &res); err != nil {
			t.Fatal(err)
		}
		all := append(slices.Clone(res.EveryNoSplit), res.EveryPair...)
		if len(res.EveryPair) != 16 || len(res.EveryNoSplit) != 4 {
			t.Fatalf("%d pairs, %d no-split", len(res.EveryPair), len(res.EveryNoSplit))
		}
		for _, a := range all {
			for _, b := range all {
				c := cmp.Or(cmp.Compare(a.Score, b.Score), cmp.Compare(a.TTFT.Ms, b.TTFT.Ms), cmp.Compare(a.TPOT.Ms, b.TPOT.Ms))
				if (c < 0) != (a.Rank < b.Rank) || (c == 0) != (a.Rank == b.Rank) {
					t.Fatalf("options %v (rank %d) and %v (rank %d) compare %d", names(req, a), a.Rank, names(req, b), b.Rank, c)
				}
			}
		}
		if res.Best.Rank != 0 {
			t.Errorf("best has rank %d", res.Best.Rank)
		}
		for j := range decode {
			if res.EveryNoSplit[j].Decode != j {
				t.Errorf("EveryNoSplit[%d] is decode %d", j, res.EveryNoSplit[j].Decode)
			}
			for i := range prefill {
				o := res.EveryPair[res.PairAt[j*len(prefill)+i]]
				if o.Prefill != i || o.Decode != j || o.Extrapolated != res.PrefillExtrapolated[i] {
					t.Errorf("PairAt(%d, %d) is %+v", i, j, o)
				}
			}
		}
		if tie := res.EveryNoSplit[2].Rank; tie != res.EveryNoSplit[3].Rank {
			t.Errorf("twin decode pods ranked %d and %d", tie, res.EveryNoSplit[3].Rank)
		}
		// A matrix answer has no lists; the lists are the head of the order.
		if matrix != (len(res.Pairs) == 0 && len(res.NoSplit) == 0) {
			t.Errorf("matrix %v: %d pairs, %d no-split listed", matrix, len(res.Pairs), len(res.NoSplit))
		}
		for n := 1; n < len(res.Pairs); n++ {
			if res.Pairs[n].Rank < res.Pairs[n-1].Rank {
				t.Errorf("pairs listed out of rank at %d", n)
			}
		}
	}
}

func TestOrderedBitsOrderAsCompare(t *testing.T) {
	xs := []float64{math.NaN(), -math.NaN(), math.Inf(-1), -math.MaxFloat64, -1e300, -2, -1, -math.SmallestNonzeroFloat64,
		math.Copysign(0, -1), 0, math.SmallestNonzeroFloat64, 1e-300, 1, 1.0000000000000002, 2, math.MaxFloat64, math.Inf(1)}
	for _, x := range xs {
		for _, y := range xs {
			if got, want := cmp.Compare(orderedBits(x), orderedBits(y)), cmp.Compare(x, y); got != want {
				t.Errorf("%v against %v: ordered bits compare %d, floats %d", x, y, got, want)
			}
		}
	}
}

func TestRankTransferPerPairConcurrency(t *testing.T) {
	// Pairs through one decode pod over one link class share a transfer
	// estimate only when they share the busier link's concurrency.
	tm := links()
	m := testModels(t, tm)
	var prefill []Candidate
	for i := range 6 {
		p := pod(fmt.Sprintf("p%d", i), rackB, 0, 0, 0)
		p.Concurrent = int64(1 + i%3)
		prefill = append(prefill, p)
	}
	d := pod("d", rackA1, 0, 0, 0.5)
	d.Concurrent = 2
	req := &Request{InputTokenLength: 2000, Prefill: prefill, Decode: []Candidate{d}}
	var res Result
	if err := Rank(&m, req, &res); err != nil {
		t.Fatal(err)
	}
	for _, o := range res.EveryPair {
		concurrent := max(prefill[o.Prefill].Concurrent, d.Concurrent)
		central, _ := tm.Predict(features.SameZone, o.TransferTokens, 0, concurrent)
		if want := m.Statistic.Of(central, &linkDistribution{tm, features.SameZone}); o.Transfer != want {
			t.Errorf("pair %v: transfer %+v, want %+v", names(req, o), o.Transfer, want)
		}
	}
}

// Without a transfer model, the split-TTFT law (learned from entries that
// do not time the transfer) predicts each pair whole: its estimate for
// the link and the tokens that move, plus the prefill and decode pods'
// loads beyond the lightest candidates'. It ranks the faster link first
// and decides split against no split on one scale; with a transfer model
// the pair is composed from its parts as before.
func TestRankSplitTTFTLaw(t *testing.T) {
	// The law's latency holds the prefill's fixed part; its bandwidth the
	// prefill and the transfer per byte.
	law := func() *bandwidthModel {
		m := links()
		m.latencyMs, m.spread = 50, 0.2
		return m
	}
	tests := []rankCase{{
		name:    "the faster link first, and a split beats the decode pod's own prefill",
		prefill: []Candidate{pod("p-far", zoneB, 0, 0, 0), pod("p-near", rackA2, 0, 0, 0)},
		decode:  []Candidate{pod("d", rackA1, 0, 10, 0)},
		want:    [2]string{"p-near", "d"},
		order:   [][2]string{{"p-near", "d"}, {"p-far", "d"}},
	}, {
		name:    "no split when the only link is slower than the decode pod's own prefill",
		prefill: []Candidate{pod("p-abroad", usEast, 0, 0, 0)},
		decode:  []Candidate{pod("d", rackA1, 0, 10, 0)},
		want:    [2]string{"", "d"},
		order:   [][2]string{{"p-abroad", "d"}},
	}, {
		name:    "the prefill pod's load counts",
		prefill: []Candidate{pod("p-busy", rackA2, 3, 0, 0), pod("p-calm", rackA2, 0, 0, 0)},
		decode:  []Candidate{pod("d", rackA1, 9, 10, 0)},
		want:    [2]string{"p-calm", "d"},
		order:   [][2]string{{"p-calm", "d"}, {"p-busy", "d"}},
	}}
	for _, shared := range []float64{0, 0.01} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s, shared %v ms a token", tt.name, shared), func(t *testing.T) {
				m := testModels(t, nil)
				sl := law()
				sl.sharedMsPerUncached = shared
				m.SplitTTFT = sl
				req := &Request{InputTokenLength: 4096, Prefill: tt.prefill, Decode: tt.decode}
				var res Result
				if err := Rank(&m, req, &res); err != nil {
					t.Fatal(err)
				}
				if res.TransferModel || !res.SplitTTFTModel || res.UnknownPairs != 0 {
					t.Fatalf("transfer model %v, split-TTFT law %v, %d unknown", res.TransferModel, res.SplitTTFTModel, res.UnknownPairs)
				}
				checkRanked(t, req, &res, tt.want, tt.order)
				lightest, at := math.Inf(1), 0
				for _, o := range res.Pairs {
					if o.PrefillPart.Ms < lightest {
						lightest, at = o.PrefillPart.Ms, o.Prefill
					}
				}
				// The law's shared part (its prefill) is taken on the
				// lightest prefill candidate's row, for every pair.
				row := req.Prefill[at].Row
				row.InputTokenLength = req.InputTokenLength
				base := sl.SharedMs(&row, nil)
				if shared > 0 && !(base > 0) {
					t.Fatalf("shared part %v on %s", base, req.Prefill[at].Pod)
				}
				for _, o := range res.Pairs {
					central, _ := sl.Predict(o.Link, o.TransferTokens, 0, 0)
					if !near(o.SplitPart.Ms, central+base) || o.Transfer != (Estimate{}) {
						t.Errorf("%v: split part %v, want the law's %v + %v; transfer %+v", names(req, o), o.SplitPart.Ms, central, base, o.Transfer)
					}
					if !near(o.PrefillLoadMs, o.PrefillPart.Ms-lightest) {
						t.Errorf("%v: prefill load %v, want %v", names(req, o), o.PrefillLoadMs, o.PrefillPart.Ms-lightest)
					}
					if want := o.SplitPart.Ms + o.PrefillLoadMs + o.DecodeLoadMs; !near(o.TTFT.Ms, want) {
						t.Errorf("%v: TTFT %v, want the law plus the loads, %v", names(req, o), o.TTFT.Ms, want)
					}
					if lo, hi := o.TTFT.Bounds[0], o.TTFT.Bounds[1]; !(lo < o.TTFT.Ms && o.TTFT.Ms < hi) {
						t.Errorf("%v: TTFT bounds %v around %v", names(req, o), o.TTFT.Bounds, o.TTFT.Ms)
					}
				}
			})
		}
	}

	t.Run("a transfer model keeps the composition from parts", func(t *testing.T) {
		m := testModels(t, links())
		m.SplitTTFT = law()
		req := &Request{InputTokenLength: 4096, Prefill: tests[0].prefill, Decode: tests[0].decode}
		var res Result
		if err := Rank(&m, req, &res); err != nil {
			t.Fatal(err)
		}
		if !res.TransferModel || res.SplitTTFTModel {
			t.Fatalf("transfer model %v, split-TTFT law %v", res.TransferModel, res.SplitTTFTModel)
		}
		for _, o := range res.Pairs {
			if o.SplitPart != (Estimate{}) || !near(o.TTFT.Ms, o.PrefillPart.Ms+o.Transfer.Ms+o.DecodeLoadMs) {
				t.Errorf("%v: split part %+v, TTFT %v from parts %v + %v", names(req, o), o.SplitPart, o.TTFT.Ms, o.PrefillPart.Ms, o.Transfer.Ms)
			}
		}
	})
}
