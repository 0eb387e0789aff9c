package sim

import (
	"fmt"
	"time"
)

// Looking ahead answers, at the moment a request is dispatched, "what would
// happen to it on server i if nothing else arrived?" by simulating it.
//
// With no further arrivals the engines of a fleet do not interact, so a
// lookahead forks one engine, not the fleet. The fork copies what the
// engine holds (its queues and sequences: O(requests there + their KV
// blocks)) but not its KV cache: the copy runs on its parent's block pool
// while the pool journals every change, and the journal is rolled back when
// the lookahead ends. A lookahead never outlives the call that makes it, so
// a parent and its copy never run at once.

// Foresight is what a lookahead saw happen to the request.
type Foresight struct {
	// TTFT is from dispatch to the first token, as the router measures it.
	TTFT time.Duration
	// TPOT and E2E are known only when the lookahead ran to the finish.
	TPOT     time.Duration
	E2E      time.Duration
	Finished bool
}

// LookaheadStats count the work of a fleet's lookaheads.
type LookaheadStats struct {
	Decisions int `json:"decisions"` // dispatches that forked an engine
	Forks     int `json:"forks"`     // engines forked
	Steps     int `json:"steps"`     // engine steps simulated in forks
	Cutoffs   int `json:"cutoffs"`   // forks stopped at their limit
}

// Lookahead is a router's view of the future of the request it is routing,
// valid only during the RouteLookahead or RoutePDLookahead call it is
// passed to. In a Fleet, server i is the fleet's server i; in a PDFleet,
// FirstToken and Finish fork decode pod i alone (the request not split),
// and Split and Alone foresee a P/D route (pdlookahead.go).
type Lookahead struct {
	f        *PDFleet
	req      *Request
	dispatch time.Duration
	toFinish bool               // Split and Alone look ahead to the last token
	prefill  []prefillForesight // by prefill pod, filled on first use
	forked   bool               // the decision is counted in LookaheadStats
}

// fork counts one engine forked, and the decision when it is its first.
func (l *Lookahead) fork() {
	if !l.forked {
		l.forked = true
		l.f.lookStats.Decisions++
	}
	l.f.lookStats.Forks++
}

// FirstToken simulates sending the request to server i now, with no further
// arrivals, until its first token, and returns its TTFT. It gives up and
// returns false once the first token cannot come within limit of the
// dispatch (limit <= 0: no limit), or when the request can never fit there.
func (l *Lookahead) FirstToken(i int, limit time.Duration) (time.Duration, bool) {
	deadline := time.Duration(-1)
	if limit > 0 {
		deadline = l.dispatch + limit
	}
	fs, ok := l.run(i, deadline, false)
	return fs.TTFT, ok
}

// Finish simulates sending the request to server i now, with no further
// arrivals, until its last token. It returns false when the request can
// never fit there.
func (l *Lookahead) Finish(i int) (Foresight, bool) { return l.run(i, -1, true) }

func (l *Lookahead) run(i int, deadline time.Duration, toFinish bool) (Foresight, bool) {
	f := l.f
	engines := f.decode.engines
	if i < 0 || i >= len(engines) {
		panic(fmt.Sprintf("sim: lookahead on %s %d of %d", f.decode.name, i, len(engines)))
	}
	l.fork()
	fs, steps, ok := engines[i].lookahead(l.req, l.dispatch, l.dispatch+f.cfg.Decode.Steps().Frontend(), deadline, toFinish, &f.journal)
	f.lookStats.Steps += steps
	if !ok && deadline >= 0 && engines[i].Fits(l.req) {
		f.lookStats.Cutoffs++
	}
	return fs, ok
}

// LookaheadRouter is a Router that looks ahead. A Fleet calls its
// RouteLookahead instead of Route.
type LookaheadRouter interface {
	Router
	RouteLookahead(req *Request, servers []ServerState, la *Lookahead) int
}

// lookahead runs a copy of e, with r delivered at arrive, until r's first
// token (or its finish, with toFinish) and undoes every change to the
// shared block pool before returning. deadline < 0 means none; past it the
// lookahead stops and reports false. steps is the number of engine steps
// the copy completed.
func (e *Engine) lookahead(r *Request, dispatch, arrive, deadline time.Duration, toFinish bool, j *poolJournal) (fs Foresight, steps int, ok bool) {
	return e.lookaheadKV(r, dispatch, arrive, 0, deadline, toFinish, j)
}

// lookaheadKV is lookahead for a request whose first kvReady prompt tokens
// arrive computed, their KV cache pulled from a prefill pod (P/D).
func (e *Engine) lookaheadKV(r *Request, dispatch, arrive time.Duration, kvReady int, deadline time.Duration, toFinish bool, j *poolJournal) (fs Foresight, steps int, ok bool) {
	if !e.Fits(r) {
		return Foresight{}, 0, false
	}
	e.pool.begin(j)
	defer e.pool.rollback()
	c := e.fork()
	o := &Outcome{Request: r, Server: -1, Dispatch: dispatch, kvReady: kvReady}
	if err := c.Submit(o, arrive); err != nil {
		// Unreachable: arrive is not before the engine's time and r fits.
		panic(err)
	}
	start := c.steps
	for {
		t, more := c.Next()
		if !more || (deadline >= 0 && t > deadline) {
			return Foresight{}, c.steps - start, false
		}
		c.Advance()
		if o.FirstToken > 0 && !toFinish {
			return Foresight{TTFT: o.TTFT()}, c.steps - start, true
		}
		if o.Done {
			return Foresight{TTFT: o.TTFT(), TPOT: o.TPOT(), E2E: o.E2E(), Finished: true}, c.steps - start, true
		}
	}
}

// fork returns a copy of e that shares its block pool (which the caller
// journals and rolls back) and its requests (which are never modified),
// but has its own sequences, queues and outcomes.
func (e *Engine) fork() *Engine {
	c := &Engine{
		cfg: e.cfg, step: e.step, pool: e.pool, now: e.now, busy: e.busy, stepEnd: e.stepEnd, budget: e.budget,
		steps: e.steps, busyTime: e.busyTime, preemptions: e.preemptions, nextDeadline: e.nextDeadline,
	}
	n, nblocks := len(e.inbox)+len(e.waiting)+len(e.running), 0
	for _, s := range e.running {
		nblocks += len(s.blocks)
	}
	for _, s := range e.waiting {
		nblocks += len(s.blocks)
	}
	seqs := make([]seq, 0, n)
	outs := make([]Outcome, 0, n)
	blocks := make([]int32, 0, nblocks)
	copyOf := func(s *seq) *seq {
		outs = append(outs, *s.out)
		seqs = append(seqs, *s)
		cp := &seqs[len(seqs)-1]
		cp.out = &outs[len(outs)-1]
		// Each copy owns a region of one array, capped so that growing it
		// reallocates instead of running into the next copy's region.
		at := len(blocks)
		blocks = append(blocks, s.blocks...)
		cp.blocks = blocks[at:len(blocks):len(blocks)]
		s.copy = cp
		return cp
	}
	c.inbox = make([]inboxEntry, len(e.inbox))
	for i, x := range e.inbox {
		c.inbox[i] = inboxEntry{x.at, copyOf(x.seq)}
	}
	c.waiting = make([]*seq, len(e.waiting))
	for i, s := range e.waiting {
		c.waiting[i] = copyOf(s)
	}
	c.running = make([]*seq, len(e.running))
	for i, s := range e.running {
		c.running[i] = copyOf(s)
	}
	// Every sequence in the current step is running; the batch keeps its
	// own order, which decides the order of events and cache registrations.
	c.batch = make([]*seq, len(e.batch))
	for i, s := range e.batch {
		c.batch[i] = s.copy
	}
	for _, q := range [][]*seq{e.waiting, e.running} {
		for _, s := range q {
			s.copy = nil
		}
	}
	for _, x := range e.inbox {
		x.seq.copy = nil
	}
	return c
}
