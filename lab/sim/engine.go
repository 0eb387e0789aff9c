// Package sim is a discrete-event model of vLLM engines and a fleet of them
// behind a router, for asking "what if" questions (a bigger KV cache, prefix
// caching off, another router) of a recorded or generated workload.
//
// An Engine schedules the way vLLM does, one step at a time: continuous
// batching under a cap on running sequences, chunked prefill under a token
// budget, a paged KV cache with a refcounted prefix cache and LRU eviction,
// and preemption by recompute, vLLM's asynchronous scheduling, and clients
// that give up. A step's duration comes from a StepModel: the linear
// CostModel fitted to one H200 trace, or the Roofline, which prices a step
// from the model's architecture and the GPU with coefficients fitted
// across real runs. Time is simulated (no clock, no goroutines) and a run
// is a pure function of its inputs.
package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/headroomhq/headroom/features"
)

// Outcome is what happened to one request. Times are from the start of the
// run; FirstToken and Finish are zero until they happen.
type Outcome struct {
	Request *Request
	Server  int
	// Dispatch is when the router sent the request (its arrival, or later if
	// it waited for the request named in After). Latencies count from here,
	// as the router measures them.
	Dispatch   time.Duration
	FirstToken time.Duration
	Finish     time.Duration
	// Row is the chosen server as the router saw it at dispatch: the
	// features llm-d's router would attach to this request's training entry.
	Row features.Row
	// PrefixHitTokens is how many prompt tokens were found in the prefix
	// cache when the request was first scheduled (hits on a recompute after
	// preemption are not counted).
	PrefixHitTokens int
	Preemptions     int
	// Rejected is set when the request can never fit in the server's KV
	// cache; it then never runs.
	Rejected bool
	Done     bool
	// Deadline, when positive, is when the client gives up on the request
	// (its time-out after Dispatch); the engine then drops it at its next
	// step, waiting or running, and frees its blocks, as vLLM aborts a
	// request whose client disconnected. TimedOut says it did.
	Deadline time.Duration
	TimedOut bool
	// Queued is when the engine's scheduler first saw the request: its
	// arrival at an idle engine, else the start of the step after it. An
	// engine-side log (vLLM's queued timestamp) measures latencies from
	// here.
	Queued time.Duration

	prefillCharge int64 // tokens added to the router's prefill-in-flight count
	started       bool
	// kvReady is how many leading tokens' KV arrived from a prefill pod (P/D
	// disaggregation, pd.go): on first admission they count as computed, so
	// the decode pod computes only the rest. A preemption loses them, and
	// the recompute pays for them, as vLLM's would.
	kvReady int
}

// TTFT is the time from dispatch to the first token.
func (o *Outcome) TTFT() time.Duration { return o.FirstToken - o.Dispatch }

// E2E is the time from dispatch to the last token.
func (o *Outcome) E2E() time.Duration { return o.Finish - o.Dispatch }

// TPOT is the mean time between output tokens after the first, as the
// router computes it: (e2e − ttft)/(tokens − 1). It is 0 (absent) for a
// one-token answer.
func (o *Outcome) TPOT() time.Duration {
	if o.Request.OutputTokens < 2 {
		return 0
	}
	return (o.Finish - o.FirstToken) / time.Duration(o.Request.OutputTokens-1)
}

// seq is a request inside an engine.
type seq struct {
	out       *Outcome
	req       *Request
	blocks    []int32
	computed  int // tokens whose KV is computed
	generated int // output tokens sampled
	hashed    int // leading blocks registered in (or taken from) the prefix cache
	sched     int // tokens scheduled in the current step
	// eligible is the first step (by the engine's step count) that may
	// admit the sequence: with asynchronous scheduling, the step after the
	// one already scheduled when it arrived.
	eligible int

	copy *seq // this sequence's copy in the lookahead being forked; nil otherwise
}

// numTokens is the sequence's length so far: prompt plus sampled output.
func (s *seq) numTokens() int { return s.req.PromptTokens + s.generated }

// decoding reports whether the next step computes exactly the newest
// sampled token.
func (s *seq) decoding() bool { return s.generated > 0 && s.computed == s.numTokens()-1 }

type inboxEntry struct {
	at  time.Duration
	seq *seq
}

// EventKind says what happened to a request during Engine.Advance.
type EventKind int

const (
	FirstToken EventKind = iota // the first output token was sampled
	Finished                    // the last output token was sampled
	TimedOut                    // the request passed its deadline and was dropped
)

// Event is one request reaching a milestone at the end of a step.
type Event struct {
	Kind    EventKind
	Outcome *Outcome
}

// Engine is one vLLM server. It is driven from outside: Submit hands it
// requests, Next says when something next happens, Advance makes it happen.
type Engine struct {
	cfg  Config
	step StepModel // cfg.Steps()
	pool *blockPool
	now  time.Duration

	inbox   []inboxEntry // requests in transit, in arrival order
	waiting []*seq       // FCFS; preempted sequences go back to the front
	running []*seq       // in admission order: the newest is preempted first

	busy    bool
	stepEnd time.Duration
	batch   []*seq
	budget  int

	steps       int
	busyTime    time.Duration
	preemptions int
	hitScratch  []int32
	events      []Event
	// nextDeadline is the earliest Deadline of the sequences waiting or
	// running, 0 when none has one: no step before it looks for time-outs.
	nextDeadline time.Duration
}

// NewEngine returns an idle engine with an empty cache.
func NewEngine(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Engine{cfg: cfg, step: cfg.Steps(), pool: newBlockPool(cfg.KVBlocks, cfg.PrefixCaching)}, nil
}

// Fits reports whether a request can ever run here: its whole sequence (the
// prompt and all but the last output token) must fit in the KV cache, or
// it would preempt itself forever, and within MaxModelLen.
func (e *Engine) Fits(r *Request) bool {
	if e.cfg.MaxModelLen > 0 && r.PromptTokens+r.OutputTokens > e.cfg.MaxModelLen {
		return false
	}
	return blocksFor(r.PromptTokens+r.OutputTokens-1) <= e.cfg.KVBlocks
}

// Submit delivers a request to the engine at time at, which must not be
// before the engine's current time. The caller checks Fits first.
func (e *Engine) Submit(o *Outcome, at time.Duration) error {
	if at < e.now {
		return fmt.Errorf("engine: request %d submitted at %v, before now %v", o.Request.ID, at, e.now)
	}
	if !e.Fits(o.Request) {
		return fmt.Errorf("engine: request %d needs %d blocks, the cache has %d", o.Request.ID,
			blocksFor(o.Request.PromptTokens+o.Request.OutputTokens-1), e.cfg.KVBlocks)
	}
	s := &seq{out: o, req: o.Request}
	i, _ := slices.BinarySearchFunc(e.inbox, at, func(x inboxEntry, t time.Duration) int {
		if x.at <= t {
			return -1 // keep arrival order among equal times
		}
		return 1
	})
	e.inbox = slices.Insert(e.inbox, i, inboxEntry{at, s})
	return nil
}

// Next returns the time of the engine's next event, if it has one.
func (e *Engine) Next() (time.Duration, bool) {
	switch {
	case len(e.inbox) > 0 && (!e.busy || e.inbox[0].at <= e.stepEnd):
		return e.inbox[0].at, true
	case e.busy:
		return e.stepEnd, true
	}
	return 0, false
}

// Advance processes the engine's next event: a request arriving (which
// starts a step if the engine was idle) or the end of the current step
// (which updates every scheduled sequence and starts the next step). It
// returns the milestones reached; the slice is reused by the next call.
func (e *Engine) Advance() []Event {
	e.events = e.events[:0]
	t, ok := e.Next()
	if !ok {
		return e.events
	}
	e.now = t
	if len(e.inbox) > 0 && e.inbox[0].at == t {
		// Everything arriving at this instant joins together, so that a
		// burst is scheduled as one batch, not one request per step.
		for len(e.inbox) > 0 && e.inbox[0].at == t {
			s := e.inbox[0].seq
			s.out.Queued, s.eligible = t, e.steps+1
			if e.busy {
				s.out.Queued = e.stepEnd
				if e.cfg.AsyncScheduling {
					s.eligible = e.steps + 2
				}
			}
			if d := s.out.Deadline; d > 0 && (e.nextDeadline == 0 || d < e.nextDeadline) {
				e.nextDeadline = d
			}
			e.waiting = append(e.waiting, s)
			e.inbox = e.inbox[1:]
		}
		if !e.busy {
			e.startStep()
		}
		return e.events
	}
	e.finishStep()
	e.startStep()
	return e.events
}

// startStep picks the next batch, the way vLLM's scheduler does with
// chunked prefill: every decoding sequence first gets its one token, then
// running prefills get chunks, then waiting requests are admitted, all
// within the token budget and the cap on running sequences.
func (e *Engine) startStep() {
	if e.nextDeadline > 0 && e.now >= e.nextDeadline {
		e.dropTimedOut()
	}
	e.batch = e.batch[:0]
	e.budget = e.cfg.MaxNumBatchedTokens
	for i := 0; i < len(e.running) && e.budget > 0; i++ {
		if s := e.running[i]; s.decoding() {
			e.scheduleRunning(s, 1)
		}
	}
	for i := 0; i < len(e.running) && e.budget > 0; i++ {
		if s := e.running[i]; !s.decoding() && s.sched == 0 {
			e.scheduleRunning(s, min(s.numTokens()-s.computed, e.budget))
		}
	}
	e.admitWaiting()
	if len(e.batch) == 0 {
		e.busy = false
		return
	}
	var b Batch
	for _, s := range e.batch {
		ctx := s.computed + s.sched
		if s.decoding() {
			b.DecodeSeqs++
			b.DecodeContext += ctx
			b.Sampling++
		} else {
			b.PrefillTokens += s.sched
			b.PrefillSeqs++
			b.PrefillContext += ctx
			b.PrefillPairs += float64(s.sched)*float64(s.computed) + float64(s.sched)*float64(s.sched+1)/2
			if ctx == s.numTokens() {
				b.Sampling++
			}
		}
		b.ContextTokens += ctx
	}
	d := e.step.StepTime(b)
	e.busy = true
	e.stepEnd = e.now + d
	e.steps++
	e.busyTime += d
}

// dropTimedOut removes the waiting and running sequences whose deadline
// has passed, freeing their blocks, and finds the next deadline.
func (e *Engine) dropTimedOut() {
	e.nextDeadline = 0
	keep := func(s *seq) bool {
		d := s.out.Deadline
		if d == 0 || d > e.now {
			if d > 0 && (e.nextDeadline == 0 || d < e.nextDeadline) {
				e.nextDeadline = d
			}
			return true
		}
		e.pool.releaseAll(s.blocks)
		s.blocks = nil
		s.out.TimedOut = true
		e.events = append(e.events, Event{TimedOut, s.out})
		return false
	}
	e.waiting = slices.DeleteFunc(e.waiting, func(s *seq) bool { return !keep(s) })
	e.running = slices.DeleteFunc(e.running, func(s *seq) bool { return !keep(s) })
}

// scheduleRunning gives a running sequence n more tokens, preempting the
// newest running sequences until its blocks fit. If it is itself the newest,
// it is preempted and gets nothing.
func (e *Engine) scheduleRunning(s *seq, n int) {
	need := blocksFor(s.computed+n) - len(s.blocks)
	for need > e.pool.numFree() {
		victim := e.running[len(e.running)-1]
		e.preempt(victim)
		if victim == s {
			return
		}
	}
	for range need {
		s.blocks = append(s.blocks, e.pool.allocate())
	}
	s.sched = n
	e.budget -= n
	e.batch = append(e.batch, s)
}

// preempt frees a running sequence's blocks and puts it at the front of the
// waiting queue; it will recompute its prompt and output so far, with help
// from whatever of it is still in the prefix cache.
func (e *Engine) preempt(s *seq) {
	e.running = slices.DeleteFunc(e.running, func(x *seq) bool { return x == s })
	if s.sched > 0 {
		e.budget += s.sched
		s.sched = 0
		e.batch = slices.DeleteFunc(e.batch, func(x *seq) bool { return x == s })
	}
	e.pool.releaseAll(s.blocks)
	s.blocks = s.blocks[:0]
	s.computed = 0
	s.hashed = 0
	s.out.Preemptions++
	e.preemptions++
	e.waiting = slices.Insert(e.waiting, 0, s)
}

// admitWaiting moves waiting requests, in order, into the batch while the
// budget, the running cap and the free blocks allow. The first request that
// does not fit stops admission (head-of-line, as in vLLM); admission never
// preempts. With asynchronous scheduling a request that arrived during the
// step before is not yet eligible, unless nothing else would run.
func (e *Engine) admitWaiting() {
	for len(e.waiting) > 0 && e.budget > 0 && len(e.running) < e.cfg.MaxNumSeqs {
		s := e.waiting[0]
		if s.eligible > e.steps+1 && len(e.batch) > 0 {
			// Scheduled ahead of its arrival, this step cannot take it (an
			// idle engine would run it at once).
			return
		}
		// The last token is always computed, to sample from: a prompt that is
		// entirely cached still needs one step of work.
		hits := e.pool.match(s.req.BlockHashes, (s.numTokens()-1)/BlockSize, e.hitScratch)
		e.hitScratch = hits
		computed := len(hits) * BlockSize
		prefixHit := computed
		if !s.out.started {
			computed = max(computed, min(s.out.kvReady, s.numTokens()-1))
		}
		n := min(s.numTokens()-computed, e.budget)
		need := blocksFor(computed+n) - len(hits)
		if need > e.pool.numFree()-e.pool.evictable(hits) {
			return
		}
		e.waiting = e.waiting[1:]
		for _, b := range hits {
			e.pool.acquire(b)
			s.blocks = append(s.blocks, b)
		}
		for range need {
			s.blocks = append(s.blocks, e.pool.allocate())
		}
		s.computed, s.hashed = computed, len(hits)
		if !s.out.started {
			s.out.started = true
			s.out.PrefixHitTokens = prefixHit
		}
		e.running = append(e.running, s)
		s.sched = n
		e.budget -= n
		e.batch = append(e.batch, s)
	}
}

// finishStep applies the step that just ended: computed tokens advance,
// newly full blocks enter the prefix cache, sequences that computed their
// whole length sample a token, and finished sequences free their blocks.
func (e *Engine) finishStep() {
	e.busy = false
	finished := false
	for _, s := range e.batch {
		s.computed += s.sched
		s.sched = 0
		full := min(s.computed/BlockSize, len(s.req.BlockHashes))
		for ; s.hashed < full; s.hashed++ {
			e.pool.register(s.blocks[s.hashed], s.req.BlockHashes[s.hashed])
		}
		if s.computed < s.numTokens() {
			continue // a prefill chunk that is not the last
		}
		s.generated++
		if s.generated == 1 {
			s.out.FirstToken = e.now
			e.events = append(e.events, Event{FirstToken, s.out})
		}
		if s.generated == s.req.OutputTokens {
			s.out.Finish = e.now
			s.out.Done = true
			e.pool.releaseAll(s.blocks)
			s.blocks = nil
			finished = true
			e.events = append(e.events, Event{Finished, s.out})
		}
	}
	if finished {
		e.running = slices.DeleteFunc(e.running, func(s *seq) bool { return s.out.Done })
	}
	e.batch = e.batch[:0]
}

// ServerGauges is what an engine's metrics endpoint reports.
type ServerGauges struct {
	KVCachePercentage float64 // blocks in use (referenced) / pool, vLLM's kv_cache_usage
	Waiting           int
	Running           int
}

// Gauges returns the engine's current metrics.
func (e *Engine) Gauges() ServerGauges {
	return ServerGauges{
		KVCachePercentage: float64(e.pool.numUsed()) / float64(e.pool.size()),
		Waiting:           len(e.waiting),
		Running:           len(e.running),
	}
}

// PrefixCacheScore is the fraction of the request's full prompt blocks that
// are in this engine's prefix cache, as a precise prefix scorer sees it.
func (e *Engine) PrefixCacheScore(r *Request) float64 {
	n := r.promptBlocks()
	if n == 0 {
		return 0
	}
	return float64(e.pool.matchLen(r.BlockHashes, n)) / float64(n)
}

// EngineStats are totals over the engine's life.
type EngineStats struct {
	Steps       int
	BusyTime    time.Duration
	Preemptions int
	Evictions   int // cached blocks whose content was overwritten
}

// Stats returns the engine's totals so far.
func (e *Engine) Stats() EngineStats {
	return EngineStats{Steps: e.steps, BusyTime: e.busyTime, Preemptions: e.preemptions, Evictions: e.pool.evictions}
}

// Now is the engine's current time.
func (e *Engine) Now() time.Duration { return e.now }
