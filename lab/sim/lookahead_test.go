package sim

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// randomWorkload is n requests with exponential gaps of mean gap, prompts
// of 50 to 1 550 tokens drawn from five shared contents (so prefixes hit and
// get evicted), and a quarter of them waiting for an earlier one.
func randomWorkload(seed uint64, n int, gap time.Duration) []*Request {
	rng := rand.New(rand.NewPCG(seed, 7))
	reqs := make([]*Request, n)
	var at time.Duration
	for i := range n {
		at += time.Duration(rng.ExpFloat64() * float64(gap))
		r := promptReq(i+1, at, 50+rng.IntN(1500), 1+rng.IntN(150), uint64(rng.IntN(5)))
		if i > 0 && rng.IntN(4) == 0 {
			r.After = 1 + rng.IntN(i)
			r.Think = time.Duration(rng.IntN(50)) * time.Millisecond
		}
		reqs[i] = r
	}
	return reqs
}

// tightConfig is three small servers whose caches fill, so that runs evict
// cached blocks and preempt running sequences: every path of the pool's
// journal is taken.
func tightConfig() Config {
	cfg := testConfig()
	cfg.Servers, cfg.KVBlocks = 3, 300
	return cfg
}

// outcomeView is an outcome without its pointers, for comparing runs.
type outcomeView struct {
	ID, Server                       int
	Dispatch, FirstToken, Finish     time.Duration
	PrefixHitTokens, Preemptions     int
	Rejected, Done                   bool
	KV                               float64
	Waiting, Running, PrefillInFlght int64
}

func views(outs []*Outcome) []outcomeView {
	v := make([]outcomeView, len(outs))
	for i, o := range outs {
		v[i] = outcomeView{o.Request.ID, o.Server, o.Dispatch, o.FirstToken, o.Finish, o.PrefixHitTokens, o.Preemptions,
			o.Rejected, o.Done, o.Row.KVCachePercentage, o.Row.NumRequestWaiting, o.Row.NumRequestRunning, o.Row.PrefillTokensInFlight}
	}
	return v
}

// peekingRouter looks ahead on every server, to the first token and to the
// finish, then routes as inner does: a run with it must be the run without.
type peekingRouter struct {
	inner Router
	seen  map[int][]Foresight // by request ID: per server, to the finish
	first map[int][]time.Duration
}

func (p *peekingRouter) Route(req *Request, servers []ServerState) int {
	return p.inner.Route(req, servers)
}

func (p *peekingRouter) RouteLookahead(req *Request, servers []ServerState, la *Lookahead) int {
	fs := make([]Foresight, len(servers))
	ft := make([]time.Duration, len(servers))
	for i := range servers {
		fs[i], _ = la.Finish(i)
		ft[i], _ = la.FirstToken(i, 0)
	}
	p.seen[req.ID], p.first[req.ID] = fs, ft
	return p.inner.Route(req, servers)
}

func TestLookaheadLeavesTheFleetUnchanged(t *testing.T) {
	cfg := tightConfig()
	reqs := randomWorkload(1, 200, 30*time.Millisecond)
	plain := runFleet(t, cfg, FleetOptions{Router: DefaultLoadPrefix()}, reqs...)
	peek := &peekingRouter{inner: DefaultLoadPrefix(), seen: map[int][]Foresight{}, first: map[int][]time.Duration{}}
	peeked := runFleet(t, cfg, FleetOptions{Router: peek}, reqs...)

	s := plain.Summary()
	if s.Preemptions == 0 || s.Evictions == 0 || s.Completed != len(reqs) {
		t.Fatalf("the workload must preempt and evict to test the journal: %+v", s)
	}
	if !reflect.DeepEqual(views(plain.Outcomes()), views(peeked.Outcomes())) {
		t.Error("looking ahead changed the run")
	}
	for i, e := range plain.decode.engines {
		if a, b := e.Stats(), peeked.decode.engines[i].Stats(); a != b {
			t.Errorf("server %d: stats %+v without lookaheads, %+v with", i, a, b)
		}
	}
	st := peeked.LookaheadStats()
	if st.Decisions != len(reqs) || st.Forks != 2*cfg.Servers*len(reqs) || st.Steps == 0 || st.Cutoffs != 0 {
		t.Errorf("lookahead stats %+v", st)
	}
}

// With nothing else sent to its server before its first token, a request's
// TTFT is exactly what the lookahead foresaw: the fork is the engine.
func TestLookaheadForeseesExactlyWithoutLaterArrivals(t *testing.T) {
	cfg := tightConfig()
	reqs := randomWorkload(2, 200, 100*time.Millisecond)
	peek := &peekingRouter{inner: &RoundRobin{}, seen: map[int][]Foresight{}, first: map[int][]time.Duration{}}
	f := runFleet(t, cfg, FleetOptions{Router: peek}, reqs...)
	outs := f.Outcomes()
	exact, finishes := 0, 0
	for _, o := range outs {
		disturbed, disturbedBeforeFinish := false, false
		for _, p := range outs {
			if p == o || p.Server != o.Server || p.Dispatch < o.Dispatch || (p.Dispatch == o.Dispatch && p.Request.ID < o.Request.ID) {
				continue
			}
			arrive := p.Dispatch + cfg.Cost.Frontend()
			disturbed = disturbed || arrive <= o.FirstToken
			disturbedBeforeFinish = disturbedBeforeFinish || arrive <= o.Finish
		}
		first, fs := peek.first[o.Request.ID][o.Server], peek.seen[o.Request.ID][o.Server]
		if fs.TTFT != first {
			t.Fatalf("request %d: TTFT %v looking to the first token, %v looking to the finish", o.Request.ID, first, fs.TTFT)
		}
		if !disturbed {
			exact++
			if first != o.TTFT() {
				t.Errorf("request %d alone on server %d until its first token: foresaw TTFT %v, got %v", o.Request.ID, o.Server, first, o.TTFT())
			}
		}
		if !disturbedBeforeFinish {
			finishes++
			if !fs.Finished || fs.E2E != o.E2E() || fs.TPOT != o.TPOT() {
				t.Errorf("request %d alone until its finish: foresaw %+v, got E2E %v TPOT %v", o.Request.ID, fs, o.E2E(), o.TPOT())
			}
		}
	}
	t.Logf("%d of %d requests undisturbed to their first token, %d to their finish", exact, len(outs), finishes)
	if exact < len(outs)/4 || finishes < 10 {
		t.Errorf("only %d requests undisturbed to their first token, %d to their finish, of %d: the test checks too little", exact, finishes, len(outs))
	}
}

// scriptRouter sends each request to a fixed server, and the requests it
// has no entry for to last.
type scriptRouter struct {
	to   map[int]int
	last Router
}

func (s scriptRouter) Route(req *Request, servers []ServerState) int {
	if i, ok := s.to[req.ID]; ok {
		return i
	}
	return s.last.Route(req, servers)
}

func (s scriptRouter) RouteLookahead(req *Request, servers []ServerState, la *Lookahead) int {
	if i, ok := s.to[req.ID]; ok {
		return i
	}
	if lr, ok := s.last.(LookaheadRouter); ok {
		return lr.RouteLookahead(req, servers, la)
	}
	return s.last.Route(req, servers)
}

// The oracle's definition, checked by brute force: after random traffic
// routed at random, the last request goes to the server where it really
// gets its first token soonest (found by running the whole fleet once per
// choice), and the oracle foresaw that TTFT exactly.
func TestOraclePicksTheTrulyFastestServer(t *testing.T) {
	cfg := tightConfig()
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		reqs := randomWorkload(seed, 40, 30*time.Millisecond)
		for _, r := range reqs {
			r.After, r.Think = 0, 0
		}
		last := reqs[len(reqs)-1]
		to := map[int]int{}
		for _, r := range reqs[:len(reqs)-1] {
			to[r.ID] = rng.IntN(cfg.Servers)
		}
		ttft := make([]time.Duration, cfg.Servers)
		for i := range ttft {
			to[last.ID] = i
			f := runFleet(t, cfg, FleetOptions{Router: scriptRouter{to: to}}, reqs...)
			ttft[i] = f.Outcomes()[len(reqs)-1].TTFT()
		}
		delete(to, last.ID)
		oracle := &TTFTOracle{}
		var foresaw time.Duration
		f := runFleet(t, cfg, FleetOptions{Router: scriptRouter{to: to, last: oracle}, Hooks: Hooks{
			OnDispatch: func(o *Outcome, _ []ServerState) {
				if o.Request == last {
					foresaw = oracle.Foresight()
				}
			},
		}}, reqs...)
		o := f.Outcomes()[len(reqs)-1]
		best := ttft[0]
		for _, d := range ttft {
			best = min(best, d)
		}
		if o.TTFT() != best || foresaw != best || ttft[o.Server] != best {
			t.Errorf("seed %d: TTFT by server %v; the oracle chose %d, foresaw %v and got %v", seed, ttft, o.Server, foresaw, o.TTFT())
		}
	}
}

// exhaustiveOracle looks at every server to the first token without
// limits: the oracle's early stopping must not change a single choice.
type exhaustiveOracle struct{}

func (exhaustiveOracle) Route(req *Request, servers []ServerState) int { return 0 }

func (exhaustiveOracle) RouteLookahead(req *Request, servers []ServerState, la *Lookahead) int {
	best, bestTTFT := -1, time.Duration(0)
	for i := range servers {
		ttft, ok := la.FirstToken(i, 0)
		if ok && (best < 0 || ttft < bestTTFT || (ttft == bestTTFT && better(servers[i], servers[best]))) {
			best, bestTTFT = i, ttft
		}
	}
	return best
}

func TestOracleStopsEarlyWithoutChangingItsChoices(t *testing.T) {
	cfg := tightConfig()
	reqs := randomWorkload(3, 150, 30*time.Millisecond)
	full := runFleet(t, cfg, FleetOptions{Router: exhaustiveOracle{}}, reqs...)
	fast := runFleet(t, cfg, FleetOptions{Router: &TTFTOracle{}}, reqs...)
	if !reflect.DeepEqual(views(full.Outcomes()), views(fast.Outcomes())) {
		t.Error("the oracle's early stopping changed its choices")
	}
	a, b := full.LookaheadStats(), fast.LookaheadStats()
	t.Logf("exhaustive %+v, oracle %+v", a, b)
	if b.Cutoffs == 0 || b.Steps >= a.Steps {
		t.Errorf("early stopping saved nothing: %d steps against %d exhaustive", b.Steps, a.Steps)
	}
}

func TestOracleWithoutLookaheadRoutesAsLoadPrefix(t *testing.T) {
	states := []ServerState{{Index: 0, NumRequestRunning: 5}, {Index: 1, PrefixCacheScore: 0.9}}
	if got, want := (&TTFTOracle{}).Route(nil, states), DefaultLoadPrefix().Route(nil, states); got != want {
		t.Errorf("server %d, load-prefix picks %d", got, want)
	}
}
