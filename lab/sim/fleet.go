package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/headroomhq/headroom/features"
)

// One run loop serves every fleet. A PDFleet is a prefill pool (possibly
// empty), a decode pool and the network between them, behind a PDRouter;
// a Fleet is the same loop with no prefill pool, every request running on
// one server alone (fleet.go's second half). Requests are submitted with
// their arrival times; Step processes one event at a time in time order,
// Run processes them all.

// PDFleet is a fleet behind a P/D router, with llm-d's routing-sidecar
// flow: the prefill pod runs the prompt with max_tokens=1, the sidecar then
// sends the request to the decode pod, which pulls the KV cache over the
// link between them and decodes; without a split, or when the prefill pod
// fails, the decode pod runs the whole request (pd.go).
type PDFleet struct {
	cfg    PDConfig
	router PDRouter
	hooks  PDHooks
	rng    *rand.Rand // the prefill failures, drawn per split at dispatch
	now    time.Duration
	what   string // "fleet" or "pd fleet", for errors

	prefill, decode pool
	net             *network

	// pending carries each request's decode Outcome; byID maps it back.
	pending  schedule
	byID     map[int]*PDOutcome
	outcomes []*PDOutcome // in submission order
	// byPrefill finds a request's PDOutcome from its prefill run.
	byPrefill map[*Outcome]*PDOutcome

	la        Lookahead   // reused by every dispatch of a router that looks ahead
	journal   poolJournal // reused by every lookahead
	lookStats LookaheadStats
}

// pool is one pool's engines with the router's bookkeeping for them.
// Invariants: inFlight[i] counts the router's requests submitted to pod i
// and not finished there; prefillInFlight[i] their prompt tokens, less the
// prefix hit at dispatch, without a first token yet; transfers[i] the KV
// transfers into or out of pod i under way.
type pool struct {
	name            string // what a pod of it is called in errors
	engines         []*Engine
	topo            []features.Topology
	inFlight        []int
	prefillInFlight []int64
	transfers       []int
	states          []PodState

	// The gauges as of the last scrape (ScrapeInterval > 0).
	scrapeInterval time.Duration
	scraped        []ServerGauges
	lastScrape     time.Duration
	scrapedOnce    bool
}

func newPool(name string, cfg Config, pods []features.Topology, scrapeInterval time.Duration) (pool, error) {
	p := pool{
		name:            name,
		engines:         make([]*Engine, len(pods)),
		topo:            pods,
		inFlight:        make([]int, len(pods)),
		prefillInFlight: make([]int64, len(pods)),
		transfers:       make([]int, len(pods)),
		states:          make([]PodState, len(pods)),
		scrapeInterval:  scrapeInterval,
		scraped:         make([]ServerGauges, len(pods)),
	}
	cfg.Servers = 1
	for i := range pods {
		e, err := NewEngine(cfg)
		if err != nil {
			return pool{}, err
		}
		p.engines[i] = e
	}
	return p, nil
}

// view returns every pod as a router sees it for req at now: the gauges as
// of the last scrape (refreshed at most every scrapeInterval, always when
// it is 0), the prefix score and the router's own counts current. The slice
// is reused by the next call.
func (p *pool) view(req *Request, now time.Duration) []PodState {
	if p.scrapeInterval <= 0 || !p.scrapedOnce || now-p.lastScrape >= p.scrapeInterval {
		for i, e := range p.engines {
			p.scraped[i] = e.Gauges()
		}
		p.lastScrape, p.scrapedOnce = now, true
	}
	for i, e := range p.engines {
		g := p.scraped[i]
		p.states[i] = PodState{
			ServerState: ServerState{
				Index:                 i,
				KVCachePercentage:     g.KVCachePercentage,
				NumRequestWaiting:     g.Waiting,
				NumRequestRunning:     g.Running,
				PrefixCacheScore:      e.PrefixCacheScore(req),
				InFlight:              p.inFlight[i],
				PrefillTokensInFlight: p.prefillInFlight[i],
			},
			Topology:  p.topo[i],
			Transfers: p.transfers[i],
		}
	}
	return p.states
}

// submit sends o to pod i at time at, charging the router's counts. The
// router discounts a request's prompt by its prefix score, as llm-d's
// in-flight prefill count does.
func (p *pool) submit(i int, o *Outcome, prefixScore float64, at time.Duration) error {
	o.Server = i
	o.prefillCharge = int64(math.Round(float64(o.Request.PromptTokens) * (1 - prefixScore)))
	if o.kvReady > 0 {
		o.prefillCharge = 0 // the prompt's KV arrives; only the decode is left
	}
	p.prefillInFlight[i] += o.prefillCharge
	p.inFlight[i]++
	return p.engines[i].Submit(o, at)
}

// NewPDFleet builds an idle disaggregated fleet.
func NewPDFleet(cfg PDConfig, router PDRouter, hooks PDHooks) (*PDFleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if router == nil {
		return nil, fmt.Errorf("pd fleet: no router")
	}
	f, err := newPDFleet("pd fleet", "decode pod", cfg, router, hooks)
	if err != nil {
		return nil, fmt.Errorf("pd fleet: %w", err)
	}
	return f, nil
}

// newPDFleet builds the fleet of a valid cfg; what and decodeName name the
// fleet and its decode pods in errors.
func newPDFleet(what, decodeName string, cfg PDConfig, router PDRouter, hooks PDHooks) (*PDFleet, error) {
	f := &PDFleet{
		cfg: cfg, router: router, hooks: hooks, what: what,
		rng:       rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)),
		net:       newNetwork(cfg.Links),
		byID:      make(map[int]*PDOutcome),
		byPrefill: make(map[*Outcome]*PDOutcome),
	}
	var err error
	if f.prefill, err = newPool("prefill pod", cfg.Prefill, cfg.PrefillPods, cfg.ScrapeInterval); err != nil {
		return nil, fmt.Errorf("prefill pool: %w", err)
	}
	if f.decode, err = newPool(decodeName, cfg.Decode, cfg.DecodePods, cfg.ScrapeInterval); err != nil {
		return nil, fmt.Errorf("decode pool: %w", err)
	}
	return f, nil
}

// SimulatePD runs reqs to completion on a new disaggregated fleet.
func SimulatePD(ctx context.Context, cfg PDConfig, router PDRouter, hooks PDHooks, reqs ...*Request) (*PDFleet, error) {
	f, err := NewPDFleet(cfg, router, hooks)
	return simulate(ctx, f, err, reqs)
}

// simulate runs reqs to completion on f, the new fleet of a constructor
// that returned err.
func simulate[F interface {
	Submit(reqs ...*Request) error
	Run(ctx context.Context) error
}](ctx context.Context, f F, err error, reqs []*Request) (F, error) {
	var none F
	if err != nil {
		return none, err
	}
	if err := f.Submit(reqs...); err != nil {
		return none, err
	}
	if err := f.Run(ctx); err != nil {
		return none, err
	}
	return f, nil
}

// Submit schedules requests. IDs must be new; a request's After must name a
// request submitted before or in the same call; arrivals of requests that
// do not wait for another must not be in the past.
func (f *PDFleet) Submit(reqs ...*Request) error {
	known := func(id int) bool { _, ok := f.byID[id]; return ok }
	if err := checkSubmission(reqs, known, f.now); err != nil {
		return err
	}
	for _, r := range reqs {
		o := &PDOutcome{Request: r, Decode: &Outcome{Request: r, Server: -1}, PrefillPod: NoSplit, DecodePod: -1}
		f.byID[r.ID] = o
		f.outcomes = append(f.outcomes, o)
	}
	for _, r := range reqs {
		var parent *Outcome
		if r.After != 0 {
			parent = f.byID[r.After].Decode
		}
		f.pending.add(f.byID[r.ID].Decode, parent, f.now)
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
// times engine events come first (prefill pods, then decode pods, each in
// index order), then transfers, then dispatches, so that the router sees
// the freshest state.
func (f *PDFleet) Step() (bool, error) {
	pl, si, st := (*pool)(nil), -1, time.Duration(0)
	for _, p := range []*pool{&f.prefill, &f.decode} {
		for i, e := range p.engines {
			if t, ok := e.Next(); ok && (si < 0 || t < st) {
				pl, si, st = p, i, t
			}
		}
	}
	nt, netOK := f.net.next()
	at, dueOK := f.pending.next()
	switch {
	case dueOK && (si < 0 || at < st) && (!netOK || at < nt):
		return true, f.dispatch(at, f.byID[f.pending.pop().Request.ID])
	case netOK && (si < 0 || nt < st):
		f.now = nt
		for _, t := range f.net.advance(nt) {
			if err := f.transferred(t); err != nil {
				return true, err
			}
		}
		return true, nil
	case si < 0:
		if n := f.pending.waiting(); n > 0 {
			return false, fmt.Errorf("%s: %d requests still wait for requests that never ended", f.what, n)
		}
		return false, nil
	}
	f.now = st
	for _, ev := range pl.engines[si].Advance() {
		o := ev.Outcome
		if pl == &f.prefill {
			// A prefill run has one output token: its first token is its end.
			switch ev.Kind {
			case Finished:
				pl.prefillInFlight[si] -= o.prefillCharge
				pl.inFlight[si]--
				if err := f.prefilled(f.byPrefill[o]); err != nil {
					return true, err
				}
			case TimedOut:
				pl.prefillInFlight[si] -= o.prefillCharge
				pl.inFlight[si]--
				po := f.byPrefill[o]
				delete(f.byPrefill, o)
				po.Decode.TimedOut = true
				f.ended(po)
			}
			continue
		}
		po := f.byID[o.Request.ID]
		switch ev.Kind {
		case FirstToken:
			pl.prefillInFlight[si] -= o.prefillCharge
			if f.hooks.OnFirstToken != nil {
				f.hooks.OnFirstToken(po)
			}
		case Finished:
			pl.inFlight[si]--
			f.ended(po)
		case TimedOut:
			if o.FirstToken == 0 {
				pl.prefillInFlight[si] -= o.prefillCharge
			}
			pl.inFlight[si]--
			f.ended(po)
		}
	}
	return true, nil
}

// ended reports a request that finished or timed out and releases the
// requests that wait for it.
func (f *PDFleet) ended(po *PDOutcome) {
	if f.hooks.OnFinish != nil {
		f.hooks.OnFinish(po)
	}
	f.pending.release(po.Decode, f.now)
}

// dispatch routes po's request at time at and sends it on its way: to the
// decode pod alone, or to its prefill pod first (the sidecar's one-token
// run); a request its decode pod can never hold is rejected there.
func (f *PDFleet) dispatch(at time.Duration, po *PDOutcome) error {
	f.now = at
	r := po.Request
	d := po.Decode
	d.Dispatch = at
	if f.cfg.ClientTimeout > 0 {
		d.Deadline = at + f.cfg.ClientTimeout
	}
	pStates := f.prefill.view(r, at)
	dStates := f.decode.view(r, at)
	var c PDChoice
	if lr, ok := f.router.(PDLookaheadRouter); ok {
		pf := f.la.prefill[:0]
		for range pStates {
			pf = append(pf, prefillForesight{})
		}
		f.la = Lookahead{f: f, req: r, dispatch: at, prefill: pf}
		c = lr.RoutePDLookahead(r, pStates, dStates, &f.la)
	} else {
		c = f.router.RoutePD(r, pStates, dStates)
	}
	if c.Decode < 0 || c.Decode >= len(dStates) {
		return fmt.Errorf("%s: router chose %s %d for request %d, have %d", f.what, f.decode.name, c.Decode, r.ID, len(dStates))
	}
	if c.Prefill != NoSplit && (c.Prefill < 0 || c.Prefill >= len(pStates)) {
		return fmt.Errorf("%s: router chose prefill pod %d for request %d, have %d", f.what, c.Prefill, r.ID, len(pStates))
	}
	po.DecodePod, po.DecodeTopology = c.Decode, f.decode.topo[c.Decode]
	d.Server = c.Decode
	d.Row = dStates[c.Decode].Row(r)
	d.Rejected = !f.decode.engines[c.Decode].Fits(r)
	if !d.Rejected && c.Prefill != NoSplit {
		po.Split = true
		po.PrefillPod, po.PrefillTopology = c.Prefill, f.prefill.topo[c.Prefill]
		// The sidecar asks the prefill pod for one token.
		pr := prefillCopy(r)
		po.Prefill = &Outcome{Request: pr, Dispatch: at, Row: pStates[c.Prefill].Row(r), Deadline: d.Deadline}
		po.PrefillFailed = f.rng.Float64() < f.cfg.PrefillFailureRate
		if !f.prefill.engines[c.Prefill].Fits(pr) {
			// The prefill pod refuses a prompt it can never hold: a failure
			// the sidecar sees at once.
			po.Prefill.Rejected, po.PrefillFailed = true, true
		}
	}
	if f.hooks.OnDispatch != nil {
		f.hooks.OnDispatch(po, pStates, dStates)
	}
	switch {
	case d.Rejected:
		if f.hooks.OnFinish != nil {
			f.hooks.OnFinish(po)
		}
		f.pending.release(po.Decode, at)
		return nil
	case !po.Split || po.Prefill.Rejected:
		return f.decode.submit(c.Decode, d, dStates[c.Decode].PrefixCacheScore, at+f.cfg.Decode.Steps().Frontend())
	}
	f.byPrefill[po.Prefill] = po
	return f.prefill.submit(c.Prefill, po.Prefill, pStates[c.Prefill].PrefixCacheScore, at+f.cfg.Prefill.Steps().Frontend())
}

// Run steps until nothing is left or ctx ends.
func (f *PDFleet) Run(ctx context.Context) error {
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%s run at %v: %w", f.what, f.now, err)
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

// Outcomes returns every submitted request's outcome, in submission order.
func (f *PDFleet) Outcomes() []*PDOutcome { return f.outcomes }

// Now is the simulated time of the last event processed.
func (f *PDFleet) Now() time.Duration { return f.now }

// LookaheadStats reports the work of the router's lookaheads so far; zero
// unless the router looks ahead.
func (f *PDFleet) LookaheadStats() LookaheadStats { return f.lookStats }

// Hooks are called as a Fleet runs, in simulated-time order, from the
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
	// ClientTimeout is PDConfig.ClientTimeout: a request not finished this
	// long after its dispatch is dropped and counts as timed out (no hook
	// reports it; its Outcome says TimedOut).
	ClientTimeout time.Duration
}

// Fleet is N identical engines behind a router: a PDFleet on
// SinglePool(cfg) behind DecodeOnly(router), each request served by one
// server alone, seen through single-pool types (Outcome, Hooks, Summary);
// its Step, Run, Now and LookaheadStats are the PDFleet's.
// TestPDNoSplitIsTheSinglePoolFleet holds a P/D fleet that never splits to
// the same times, servers and rows.
type Fleet struct {
	*PDFleet
	on      Hooks
	states  []ServerState // the candidates of the last dispatch, for OnDispatch
	serving []*Outcome    // each request's Outcome, in submission order
}

// Simulate runs reqs to completion on a new fleet of cfg and returns the
// fleet, for its outcomes and summaries.
func Simulate(ctx context.Context, cfg Config, opts FleetOptions, reqs ...*Request) (*Fleet, error) {
	f, err := NewFleet(cfg, opts)
	return simulate(ctx, f, err, reqs)
}

// NewFleet builds a fleet of cfg.Servers idle engines.
func NewFleet(cfg Config, opts FleetOptions) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Router == nil {
		opts.Router = DefaultLoadPrefix()
	}
	f := &Fleet{on: opts.Hooks}
	pd := SinglePool(cfg)
	pd.ScrapeInterval, pd.ClientTimeout = opts.ScrapeInterval, opts.ClientTimeout
	var err error
	if f.PDFleet, err = newPDFleet("fleet", "server", pd, &DecodeOnly{Router: opts.Router}, f.pdHooks()); err != nil {
		return nil, err
	}
	return f, nil
}

// pdHooks passes the run loop's events on to the fleet's Hooks.
func (f *Fleet) pdHooks() PDHooks {
	var h PDHooks
	if f.on.OnDispatch != nil {
		h.OnDispatch = func(o *PDOutcome, _, decode []PodState) {
			f.states = serverStates(f.states, decode)
			f.on.OnDispatch(o.Decode, f.states)
		}
	}
	if f.on.OnFirstToken != nil {
		h.OnFirstToken = func(o *PDOutcome) { f.on.OnFirstToken(o.Decode) }
	}
	if f.on.OnFinish != nil || f.on.OnReject != nil {
		h.OnFinish = func(o *PDOutcome) {
			if o.Decode.TimedOut {
				return
			}
			if o.Decode.Rejected {
				if f.on.OnReject != nil {
					f.on.OnReject(o.Decode)
				}
			} else if f.on.OnFinish != nil {
				f.on.OnFinish(o.Decode)
			}
		}
	}
	return h
}

// SinglePool is the PDFleet configuration of a fleet without
// disaggregation: cfg.Servers decode pods of cfg (placed nowhere: no KV ever
// moves), no prefill pods.
func SinglePool(cfg Config) PDConfig {
	return PDConfig{
		Prefill: cfg, Decode: cfg, DecodePods: make([]features.Topology, cfg.Servers),
		Links: DefaultLinks(), KVBytesPerToken: DefaultKVBytesPerToken,
	}
}

// serverStates fills dst with the pods' single-pool states.
func serverStates(dst []ServerState, pods []PodState) []ServerState {
	dst = dst[:0]
	for _, p := range pods {
		dst = append(dst, p.ServerState)
	}
	return dst
}

// Submit schedules requests, under PDFleet.Submit's rules.
func (f *Fleet) Submit(reqs ...*Request) error {
	n := len(f.outcomes)
	if err := f.PDFleet.Submit(reqs...); err != nil {
		return err
	}
	for _, o := range f.outcomes[n:] {
		f.serving = append(f.serving, o.Decode)
	}
	return nil
}

// Outcomes returns every submitted request's outcome, in submission order.
func (f *Fleet) Outcomes() []*Outcome { return f.serving }

// Summary summarises the run so far.
func (f *Fleet) Summary() Summary { return f.PDFleet.Summary().Summary }
