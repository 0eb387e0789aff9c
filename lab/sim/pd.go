package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/headroomhq/headroom/features"
)

// PDConfig is a disaggregated fleet: a pool of prefill pods and a pool of
// decode pods, each pod an Engine placed on the topology, and the links
// the KV cache crosses between them.
type PDConfig struct {
	// Prefill and Decode configure the engines of each pool; their Servers
	// field is ignored (the pods below say how many).
	Prefill, Decode Config
	// PrefillPods and DecodePods place each pod. There may be no prefill
	// pods (every request then runs on a decode pod alone); there must be a
	// decode pod.
	PrefillPods, DecodePods []features.Topology
	Links                   Links
	// KVBytesPerToken is the size of one token's KV cache, which depends on
	// the model: layers × KV heads × head dim × 2 (K and V) × bytes per
	// element; 256 KiB for Qwen3-32B in bf16 (the default engine's model).
	KVBytesPerToken float64
	// PrefillFailureRate is the probability that a prefill pod's answer is
	// an error after it ran the prompt (a lost connection, a failed KV
	// export); the sidecar then sends the request to the decode pod alone.
	PrefillFailureRate float64
	// Seed drives the failures; a run is a pure function of its inputs and
	// the seed.
	Seed uint64
}

// DefaultKVBytesPerToken is Qwen3-32B's KV size in bf16: 64 layers × 8 KV
// heads × 128 dims × 2 (K, V) × 2 bytes.
const DefaultKVBytesPerToken = 64 * 8 * 128 * 2 * 2

// Validate reports the first setting a disaggregated fleet cannot run with.
func (c PDConfig) Validate() error {
	if len(c.DecodePods) == 0 {
		return fmt.Errorf("pd config: no decode pods, need at least 1")
	}
	for _, p := range []struct {
		name string
		cfg  Config
	}{{"prefill", c.Prefill}, {"decode", c.Decode}} {
		cfg := p.cfg
		cfg.Servers = 1
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("pd config: %s engines: %w", p.name, err)
		}
	}
	if err := c.Links.Validate(); err != nil {
		return fmt.Errorf("pd config: %w", err)
	}
	if !(c.KVBytesPerToken > 0) || math.IsInf(c.KVBytesPerToken, 0) {
		return fmt.Errorf("pd config: kv_bytes_per_token = %g, need a positive number", c.KVBytesPerToken)
	}
	if !(c.PrefillFailureRate >= 0 && c.PrefillFailureRate <= 1) {
		return fmt.Errorf("pd config: prefill_failure_rate = %g, need 0 to 1", c.PrefillFailureRate)
	}
	return nil
}

// PodState is one candidate pod as a P/D router sees it: its ServerState
// (Index is its index in its own pool) and its placement.
type PodState struct {
	ServerState
	Topology features.Topology
	// Transfers is the number of KV transfers into or out of the pod now
	// (after their link's setup latency or still in it): the contention a
	// sidecar can see on its own pod.
	Transfers int
}

// PDChoice is a P/D router's decision for one request: the decode pod, and
// the prefill pod or NoSplit.
type PDChoice struct {
	Prefill int // index into the prefill pool, or NoSplit
	Decode  int // index into the decode pool
}

// NoSplit, as PDChoice.Prefill, sends the request to the decode pod alone,
// which runs its prefill too.
const NoSplit = -1

// PDRouter picks, for each request, a decode pod and either a prefill pod
// or NoSplit. prefill may be empty. A router may keep state between calls
// (a fleet calls it from one goroutine).
type PDRouter interface {
	RoutePD(req *Request, prefill, decode []PodState) PDChoice
}

// PDOutcome is what happened to one request in a disaggregated fleet: the
// route it took and, for a split, its prefill run and KV transfer. These
// are the fields a routing sidecar can report, from which a transfer model
// can be learned.
type PDOutcome struct {
	Request *Request
	// Decode is the request on its decode pod. Its Dispatch is the client's
	// dispatch, so its TTFT, TPOT and E2E are what the client saw, across
	// the prefill, the transfer and the decode; Server is the decode pod.
	Decode *Outcome
	// Prefill is the prompt's run on the prefill pod (with max_tokens=1),
	// nil unless the router split the request. Its TTFT is the prefill time.
	Prefill *Outcome
	// Split says the router chose a prefill pod. PrefillFailed says that
	// pod answered with an error, after which the decode pod ran the
	// request alone (no transfer).
	Split, PrefillFailed bool
	PrefillPod           int // NoSplit unless Split
	DecodePod            int
	PrefillTopology      features.Topology
	DecodeTopology       features.Topology
	// KVTransferTokens is the prompt less what the decode pod had cached
	// when the transfer started; KVTransferBytes is that at the configured
	// bytes per token. Transfer is nil when no transfer took place.
	KVTransferTokens int
	KVTransferBytes  float64
	Transfer         *Transfer
}

// PrefillTime is the prefill pod's TTFT, zero without a prefill run.
func (o *PDOutcome) PrefillTime() time.Duration {
	if o.Prefill == nil || o.Prefill.FirstToken == 0 {
		return 0
	}
	return o.Prefill.TTFT()
}

// KVTransferTime is the measured transfer time (actual_kv_transfer_ms),
// zero without a completed transfer.
func (o *PDOutcome) KVTransferTime() time.Duration {
	if o.Transfer == nil || o.Transfer.End == 0 {
		return 0
	}
	return o.Transfer.End - o.Transfer.Start
}

// PDHooks are called as a disaggregated fleet runs, in simulated-time
// order. Any may be nil.
type PDHooks struct {
	// OnTransfer: a KV transfer finished; o.KVTransferTime() is known.
	OnTransfer func(o *PDOutcome)
	// OnFirstToken: the client got its first token (o.Decode.FirstToken).
	OnFirstToken func(o *PDOutcome)
	// OnFinish: the request finished on its decode pod (or was rejected).
	OnFinish func(o *PDOutcome)
}

// PDFleet is a disaggregated fleet behind a P/D router, with llm-d's
// routing-sidecar flow: the prefill pod runs the prompt with max_tokens=1,
// the sidecar then sends the request to the decode pod, which pulls the KV
// cache over the link between them and decodes; without a split, or when
// the prefill pod fails, the decode pod runs the whole request.
type PDFleet struct {
	cfg    PDConfig
	router PDRouter
	hooks  PDHooks
	rng    *rand.Rand
	now    time.Duration

	prefill, decode pdPool
	net             *network

	// pending carries each request's decode Outcome; byID maps it back.
	pending  schedule
	byID     map[int]*PDOutcome
	outcomes []*PDOutcome
	// byPrefill finds a request's PDOutcome from its prefill run.
	byPrefill map[*Outcome]*PDOutcome

	journal   poolJournal // reused by every lookahead
	lookStats LookaheadStats
}

// pdPool is one pool's engines with the router's bookkeeping for them.
type pdPool struct {
	engines         []*Engine
	topo            []features.Topology
	inFlight        []int
	prefillInFlight []int64
	transfers       []int
	states          []PodState
}

func newPDPool(cfg Config, pods []features.Topology) (pdPool, error) {
	p := pdPool{
		engines:         make([]*Engine, len(pods)),
		topo:            pods,
		inFlight:        make([]int, len(pods)),
		prefillInFlight: make([]int64, len(pods)),
		transfers:       make([]int, len(pods)),
		states:          make([]PodState, len(pods)),
	}
	cfg.Servers = 1
	for i := range pods {
		e, err := NewEngine(cfg)
		if err != nil {
			return pdPool{}, err
		}
		p.engines[i] = e
	}
	return p, nil
}

// view returns every pod as a router sees it for req now; the slice is
// reused by the next call.
func (p *pdPool) view(req *Request) []PodState {
	for i, e := range p.engines {
		g := e.Gauges()
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

// submit sends o to pod i at time at, charging the router's counts.
func (p *pdPool) submit(i int, o *Outcome, prefixScore float64, at time.Duration) error {
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
	f := &PDFleet{
		cfg: cfg, router: router, hooks: hooks,
		rng:       rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)),
		net:       newNetwork(cfg.Links),
		byID:      make(map[int]*PDOutcome),
		byPrefill: make(map[*Outcome]*PDOutcome),
	}
	var err error
	if f.prefill, err = newPDPool(cfg.Prefill, cfg.PrefillPods); err != nil {
		return nil, fmt.Errorf("pd fleet: prefill pool: %w", err)
	}
	if f.decode, err = newPDPool(cfg.Decode, cfg.DecodePods); err != nil {
		return nil, fmt.Errorf("pd fleet: decode pool: %w", err)
	}
	return f, nil
}

// SimulatePD runs reqs to completion on a new disaggregated fleet.
func SimulatePD(ctx context.Context, cfg PDConfig, router PDRouter, hooks PDHooks, reqs ...*Request) (*PDFleet, error) {
	f, err := NewPDFleet(cfg, router, hooks)
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

// Submit schedules requests, under the same rules as Fleet.Submit.
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

// Step processes the next event and reports whether there was one. At equal
// times engine events come first (prefill pods, then decode pods, each in
// index order), then transfers, then dispatches, so that the router sees
// the freshest state.
func (f *PDFleet) Step() (bool, error) {
	pool, si, st := (*pdPool)(nil), -1, time.Duration(0)
	for _, p := range []*pdPool{&f.prefill, &f.decode} {
		for i, e := range p.engines {
			if t, ok := e.Next(); ok && (si < 0 || t < st) {
				pool, si, st = p, i, t
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
			return false, fmt.Errorf("pd fleet: %d requests still wait for requests that never ended", n)
		}
		return false, nil
	}
	f.now = st
	for _, ev := range pool.engines[si].Advance() {
		o := ev.Outcome
		if pool == &f.prefill {
			// A prefill run has one output token: its first token is its end.
			if ev.Kind == Finished {
				pool.prefillInFlight[si] -= o.prefillCharge
				pool.inFlight[si]--
				if err := f.prefilled(f.byPrefill[o]); err != nil {
					return true, err
				}
			}
			continue
		}
		po := f.byID[o.Request.ID]
		switch ev.Kind {
		case FirstToken:
			pool.prefillInFlight[si] -= o.prefillCharge
			if f.hooks.OnFirstToken != nil {
				f.hooks.OnFirstToken(po)
			}
		case Finished:
			pool.inFlight[si]--
			if f.hooks.OnFinish != nil {
				f.hooks.OnFinish(po)
			}
			f.pending.release(po.Decode, o.Finish)
		}
	}
	return true, nil
}

func (f *PDFleet) dispatch(at time.Duration, po *PDOutcome) error {
	f.now = at
	r := po.Request
	d := po.Decode
	d.Dispatch = at
	pStates := f.prefill.view(r)
	dStates := f.decode.view(r)
	var c PDChoice
	if lr, ok := f.router.(PDLookaheadRouter); ok {
		f.lookStats.Decisions++
		la := &PDLookahead{f: f, req: r, dispatch: at, prefill: make([]prefillForesight, len(pStates))}
		c = lr.RoutePDLookahead(r, pStates, dStates, la)
	} else {
		c = f.router.RoutePD(r, pStates, dStates)
	}
	if c.Decode < 0 || c.Decode >= len(dStates) {
		return fmt.Errorf("pd fleet: router chose decode pod %d for request %d, have %d", c.Decode, r.ID, len(dStates))
	}
	if c.Prefill != NoSplit && (c.Prefill < 0 || c.Prefill >= len(pStates)) {
		return fmt.Errorf("pd fleet: router chose prefill pod %d for request %d, have %d", c.Prefill, r.ID, len(pStates))
	}
	po.DecodePod, po.DecodeTopology = c.Decode, f.decode.topo[c.Decode]
	d.Server = c.Decode
	d.Row = dStates[c.Decode].Row(r)
	if !f.decode.engines[c.Decode].Fits(r) {
		d.Rejected = true
		if f.hooks.OnFinish != nil {
			f.hooks.OnFinish(po)
		}
		f.pending.release(po.Decode, at)
		return nil
	}
	arrive := at + f.cfg.Decode.Cost.Frontend()
	if c.Prefill == NoSplit {
		return f.decode.submit(c.Decode, d, dStates[c.Decode].PrefixCacheScore, arrive)
	}
	po.Split = true
	po.PrefillPod, po.PrefillTopology = c.Prefill, f.prefill.topo[c.Prefill]
	// The sidecar asks the prefill pod for one token.
	pr := prefillCopy(r)
	p := &Outcome{Request: pr, Dispatch: at, Row: pStates[c.Prefill].Row(r)}
	po.Prefill = p
	po.PrefillFailed = f.rng.Float64() < f.cfg.PrefillFailureRate
	if !f.prefill.engines[c.Prefill].Fits(pr) {
		// The prefill pod refuses a prompt it can never hold: a failure
		// the sidecar sees at once.
		p.Rejected, po.PrefillFailed = true, true
		return f.decode.submit(c.Decode, d, dStates[c.Decode].PrefixCacheScore, arrive)
	}
	f.byPrefill[p] = po
	return f.prefill.submit(c.Prefill, p, pStates[c.Prefill].PrefixCacheScore, at+f.cfg.Prefill.Cost.Frontend())
}

// prefilled continues a split request whose prefill run has ended: the
// sidecar sends it to the decode pod, which (after its frontend) pulls the
// KV cache it does not already hold, or, after a failure, runs it alone.
func (f *PDFleet) prefilled(po *PDOutcome) error {
	delete(f.byPrefill, po.Prefill)
	i := po.DecodePod
	e := f.decode.engines[i]
	arrive := f.now + f.cfg.Decode.Cost.Frontend()
	if po.PrefillFailed {
		return f.decode.submit(i, po.Decode, e.PrefixCacheScore(po.Request), arrive)
	}
	r := po.Request
	cached := e.pool.matchLen(r.BlockHashes, r.promptBlocks()) * BlockSize
	po.KVTransferTokens = r.PromptTokens - cached
	po.KVTransferBytes = float64(po.KVTransferTokens) * f.cfg.KVBytesPerToken
	po.Transfer = f.net.start(arrive, po.PrefillTopology, po.DecodeTopology, po.KVTransferBytes, po)
	f.prefill.transfers[po.PrefillPod]++
	f.decode.transfers[po.DecodePod]++
	return nil
}

// transferred submits a request whose KV cache has arrived to its decode
// pod, where it starts with the whole prompt computed.
func (f *PDFleet) transferred(t *Transfer) error {
	po := t.owner
	f.prefill.transfers[po.PrefillPod]--
	f.decode.transfers[po.DecodePod]--
	if f.hooks.OnTransfer != nil {
		f.hooks.OnTransfer(po)
	}
	po.Decode.kvReady = po.Request.PromptTokens
	return f.decode.submit(po.DecodePod, po.Decode, 0, f.now)
}

// Run steps until nothing is left or ctx ends.
func (f *PDFleet) Run(ctx context.Context) error {
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("pd fleet run at %v: %w", f.now, err)
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

// LookaheadStats reports the work of the router's lookaheads so far.
func (f *PDFleet) LookaheadStats() LookaheadStats { return f.lookStats }

// PDSummary is a disaggregated run in aggregate: the client's latencies
// (Summary, over the decode side), how often requests were split, and the
// KV transfers.
type PDSummary struct {
	Summary
	Split         int         `json:"split"`
	SplitRate     float64     `json:"split_rate"`
	PrefillFailed int         `json:"prefill_failed"`
	KVTransfer    Percentiles `json:"kv_transfer"`
	KVTransferMiB float64     `json:"kv_transfer_mib"` // total
	PrefillPods   int         `json:"prefill_pods"`
	DecodePods    int         `json:"decode_pods"`
}

// Summary summarises the run so far.
func (f *PDFleet) Summary() PDSummary {
	decode := make([]*Outcome, len(f.outcomes))
	var transfers []float64
	s := PDSummary{PrefillPods: len(f.prefill.engines), DecodePods: len(f.decode.engines)}
	for i, o := range f.outcomes {
		decode[i] = o.Decode
		if o.Split {
			s.Split++
		}
		if o.PrefillFailed {
			s.PrefillFailed++
		}
		if d := o.KVTransferTime(); o.Transfer != nil && o.Transfer.End != 0 {
			transfers = append(transfers, durationMs(d))
			s.KVTransferMiB += o.KVTransferBytes / (1 << 20)
		}
	}
	s.Summary = Summarize(decode)
	for _, p := range []*pdPool{&f.prefill, &f.decode} {
		for _, e := range p.engines {
			s.Evictions += e.Stats().Evictions
		}
	}
	if len(f.outcomes) > 0 {
		s.SplitRate = float64(s.Split) / float64(len(f.outcomes))
	}
	s.KVTransfer = percentiles(transfers)
	return s
}
