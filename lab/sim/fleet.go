package sim

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Hooks are called as a fleet runs, in simulated-time order, from the
// goroutine that drives it. Any of them may be nil. A router that learns
// (say, one that asks a latency predictor) uses OnFirstToken and OnFinish to
// collect its training data: each Outcome carries Row, the features the
// router saw at dispatch, beside the latencies it produced.
type Hooks struct {
	// OnDispatch follows the router's choice; states are every candidate as
	// the router saw them and are valid only during the call.
	OnDispatch func(o *Outcome, states []ServerState)
	// OnFirstToken: o.TTFT() is known.
	OnFirstToken func(o *Outcome)
	// OnFinish: o.TPOT() and o.E2E() are known.
	OnFinish func(o *Outcome)
	// OnReject: the chosen server can never hold the request.
	OnReject func(o *Outcome)
}

// FleetOptions are the parts of a fleet beyond its Config.
type FleetOptions struct {
	Router Router // nil means DefaultLoadPrefix
	Hooks  Hooks
	// ScrapeInterval, when positive, makes the router see servers' gauges
	// (KV use, waiting, running) as of the last scrape, refreshed at most
	// this often, as llm-d's metrics scraping does; 0 means always fresh.
	// Prefix scores and the router's own counts are always current.
	ScrapeInterval time.Duration
}

// Fleet is N identical engines behind a router. Requests are submitted with
// their arrival times; Step processes one event at a time (a dispatch or an
// engine event) in time order, Run processes them all.
type Fleet struct {
	cfg     Config
	opts    FleetOptions
	servers []*Engine
	now     time.Duration

	pending  schedule
	byID     map[int]*Outcome
	outcomes []*Outcome // in submission order

	inFlight        []int
	prefillInFlight []int64
	states          []ServerState
	scraped         []ServerGauges
	lastScrape      time.Duration
	scrapedOnce     bool

	journal   poolJournal // reused by every lookahead
	lookStats LookaheadStats
}

// Simulate runs reqs to completion on a new fleet of cfg and returns the
// fleet, for its outcomes and summaries.
func Simulate(ctx context.Context, cfg Config, opts FleetOptions, reqs ...*Request) (*Fleet, error) {
	f, err := NewFleet(cfg, opts)
	if err != nil {
		return nil, err
	}
	if err := f.Submit(reqs...); err != nil {
		return nil, err
	}
	if err := f.Run(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// NewFleet builds a fleet of cfg.Servers idle engines.
func NewFleet(cfg Config, opts FleetOptions) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Router == nil {
		opts.Router = DefaultLoadPrefix()
	}
	f := &Fleet{
		cfg:             cfg,
		opts:            opts,
		servers:         make([]*Engine, cfg.Servers),
		byID:            make(map[int]*Outcome),
		inFlight:        make([]int, cfg.Servers),
		prefillInFlight: make([]int64, cfg.Servers),
		states:          make([]ServerState, cfg.Servers),
		scraped:         make([]ServerGauges, cfg.Servers),
	}
	for i := range f.servers {
		e, err := NewEngine(cfg)
		if err != nil {
			return nil, err
		}
		f.servers[i] = e
	}
	return f, nil
}

// Submit schedules requests. IDs must be new; a request's After must name a
// request submitted before or in the same call; arrivals of requests that
// do not wait for another must not be in the past.
func (f *Fleet) Submit(reqs ...*Request) error {
	known := func(id int) bool { _, ok := f.byID[id]; return ok }
	if err := checkSubmission(reqs, known, f.now); err != nil {
		return err
	}
	for _, r := range reqs {
		o := &Outcome{Request: r, Server: -1}
		f.byID[r.ID] = o
		f.outcomes = append(f.outcomes, o)
	}
	for _, r := range reqs {
		var parent *Outcome
		if r.After != 0 {
			parent = f.byID[r.After]
		}
		f.pending.add(f.byID[r.ID], parent, f.now)
	}
	return nil
}

// checkSubmission applies Submit's rules to a batch, before any of it is
// scheduled: every request valid, its ID new (known reports the IDs
// submitted before) and unique in the batch, its After naming a request
// submitted before or in the batch, and its arrival not before now unless it
// waits for another request.
func checkSubmission(reqs []*Request, known func(id int) bool, now time.Duration) error {
	batch := make(map[int]bool, len(reqs))
	for _, r := range reqs {
		if err := r.Validate(); err != nil {
			return err
		}
		if batch[r.ID] || known(r.ID) {
			return fmt.Errorf("request %d submitted twice", r.ID)
		}
		if r.After == 0 && r.Arrival < now {
			return fmt.Errorf("request %d arrives at %v, before now %v", r.ID, r.Arrival, now)
		}
		batch[r.ID] = true
	}
	for _, r := range reqs {
		if r.After != 0 && !batch[r.After] && !known(r.After) {
			return fmt.Errorf("request %d waits for request %d, which was never submitted", r.ID, r.After)
		}
	}
	return nil
}

// Step processes the next event and reports whether there was one. At equal
// times, engine events come before dispatches (so the router sees the
// freshest state), and engines in index order.
func (f *Fleet) Step() (bool, error) {
	si, st := -1, time.Duration(0)
	for i, e := range f.servers {
		if t, ok := e.Next(); ok && (si < 0 || t < st) {
			si, st = i, t
		}
	}
	if at, ok := f.pending.next(); ok && (si < 0 || at < st) {
		return true, f.dispatch(at, f.pending.pop())
	}
	if si < 0 {
		if n := f.pending.waiting(); n > 0 {
			return false, fmt.Errorf("fleet: %d requests still wait for requests that never ended", n)
		}
		return false, nil
	}
	f.now = st
	for _, ev := range f.servers[si].Advance() {
		o := ev.Outcome
		switch ev.Kind {
		case FirstToken:
			f.prefillInFlight[o.Server] -= o.prefillCharge
			if f.opts.Hooks.OnFirstToken != nil {
				f.opts.Hooks.OnFirstToken(o)
			}
		case Finished:
			f.inFlight[o.Server]--
			if f.opts.Hooks.OnFinish != nil {
				f.opts.Hooks.OnFinish(o)
			}
			f.pending.release(o, o.Finish)
		}
	}
	return true, nil
}

func (f *Fleet) dispatch(at time.Duration, o *Outcome) error {
	f.now = at
	r := o.Request
	o.Dispatch = at
	states := f.States(r)
	var idx int
	if lr, ok := f.opts.Router.(LookaheadRouter); ok {
		f.lookStats.Decisions++
		idx = lr.RouteLookahead(r, states, &Lookahead{f: f, req: r, dispatch: at})
	} else {
		idx = f.opts.Router.Route(r, states)
	}
	if idx < 0 || idx >= len(f.servers) {
		return fmt.Errorf("fleet: router chose server %d for request %d, have %d", idx, r.ID, len(f.servers))
	}
	o.Server = idx
	o.Row = states[idx].Row(r)
	if f.opts.Hooks.OnDispatch != nil {
		f.opts.Hooks.OnDispatch(o, states)
	}
	e := f.servers[idx]
	if !e.Fits(r) {
		o.Rejected = true
		if f.opts.Hooks.OnReject != nil {
			f.opts.Hooks.OnReject(o)
		}
		f.pending.release(o, at)
		return nil
	}
	// The router discounts a request's prompt by its prefix score, as
	// llm-d's in-flight prefill count does.
	o.prefillCharge = int64(math.Round(float64(r.PromptTokens) * (1 - states[idx].PrefixCacheScore)))
	f.prefillInFlight[idx] += o.prefillCharge
	f.inFlight[idx]++
	return e.Submit(o, at+f.cfg.Cost.Frontend())
}

// States returns every server as the router would see it for req now. The
// slice is reused by the next call.
func (f *Fleet) States(req *Request) []ServerState {
	if f.opts.ScrapeInterval <= 0 || !f.scrapedOnce || f.now-f.lastScrape >= f.opts.ScrapeInterval {
		for i, e := range f.servers {
			f.scraped[i] = e.Gauges()
		}
		f.lastScrape, f.scrapedOnce = f.now, true
	}
	for i, e := range f.servers {
		g := f.scraped[i]
		f.states[i] = ServerState{
			Index:                 i,
			KVCachePercentage:     g.KVCachePercentage,
			NumRequestWaiting:     g.Waiting,
			NumRequestRunning:     g.Running,
			PrefixCacheScore:      e.PrefixCacheScore(req),
			InFlight:              f.inFlight[i],
			PrefillTokensInFlight: f.prefillInFlight[i],
		}
	}
	return f.states
}

// Run steps until nothing is left or ctx ends.
func (f *Fleet) Run(ctx context.Context) error {
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("fleet run at %v: %w", f.now, err)
			}
		}
		more, err := f.Step()
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
}

// Now is the time of the last processed event.
func (f *Fleet) Now() time.Duration { return f.now }

// Outcomes returns every submitted request's outcome, in submission order.
func (f *Fleet) Outcomes() []*Outcome { return f.outcomes }

// LookaheadStats counts the work of the router's lookaheads so far; zero
// unless the router is a LookaheadRouter.
func (f *Fleet) LookaheadStats() LookaheadStats { return f.lookStats }

// Engines returns the fleet's engines, for their stats.
func (f *Fleet) Engines() []*Engine { return f.servers }

// Summary summarises the run so far.
func (f *Fleet) Summary() Summary {
	s := Summarize(f.outcomes)
	for _, e := range f.servers {
		s.Evictions += e.Stats().Evictions
	}
	return s
}
