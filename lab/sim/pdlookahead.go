package sim

import (
	"fmt"
	"time"

	"github.com/headroomhq/headroom/features"
)

// Looking ahead in a disaggregated fleet answers "what would this request's
// TTFT and TPOT be on this route, if nothing else arrived?" by simulating
// the route's three legs in turn: a fork of the prefill pod runs the prompt
// with max_tokens=1; the KV transfer shares its link with the transfers on
// it now (those the router can know of; a transfer that starts later,
// after a prefill already running, is not foreseen); a fork of the decode
// pod then receives the request with its KV cache. A route without a split
// forks the decode pod alone, as the single-pool lookahead does.

type prefillForesight struct {
	done bool
	end  time.Duration // when the prefill pod's answer reaches the sidecar
	ok   bool
}

// PDLookaheadRouter is a PDRouter that looks ahead. A PDFleet calls its
// RoutePDLookahead instead of RoutePD.
type PDLookaheadRouter interface {
	PDRouter
	RoutePDLookahead(req *Request, prefill, decode []PodState, la *Lookahead) PDChoice
}

// prefillEnd foresees when prefill pod p's one-token run of the request
// ends, false when the prompt can never fit there.
func (l *Lookahead) prefillEnd(p int) (time.Duration, bool) {
	pf := &l.prefill[p]
	if !pf.done {
		f := l.f
		pr := prefillCopy(l.req)
		l.fork()
		fs, steps, ok := f.prefill.engines[p].lookahead(pr, l.dispatch, l.dispatch+f.cfg.Prefill.Steps().Frontend(), -1, true, &f.journal)
		f.lookStats.Steps += steps
		*pf = prefillForesight{done: true, end: l.dispatch + fs.E2E, ok: ok}
	}
	return pf.end, pf.ok
}

// Split foresees the request split onto prefill pod p and decode pod d:
// the client's TTFT (and, when the lookahead runs to the finish, TPOT and
// E2E), and the KV transfer's time. false when the request fits on one of
// the pods never.
func (l *Lookahead) Split(p, d int) (fs Foresight, transfer time.Duration, ok bool) {
	f := l.f
	if p < 0 || p >= len(f.prefill.engines) || d < 0 || d >= len(f.decode.engines) {
		panic(fmt.Sprintf("sim: p/d lookahead on pair (%d, %d) of %d × %d pods", p, d, len(f.prefill.engines), len(f.decode.engines)))
	}
	end, ok := l.prefillEnd(p)
	if !ok {
		return Foresight{}, 0, false
	}
	r := l.req
	e := f.decode.engines[d]
	start := end + f.cfg.Decode.Steps().Frontend()
	cached := e.pool.matchLen(r.BlockHashes, r.promptBlocks()) * BlockSize
	bytes := float64(r.PromptTokens-cached) * f.cfg.KVBytesPerToken
	arrive := f.net.foresee(start, f.prefill.topo[p], f.decode.topo[d], bytes)
	l.fork()
	fs, steps, ok := e.lookaheadKV(r, l.dispatch, arrive, r.PromptTokens, -1, l.toFinish, &f.journal)
	f.lookStats.Steps += steps
	return fs, arrive - start, ok
}

// Alone foresees the request on decode pod d without a split, to its first
// token or, when the router asked for it, its last.
func (l *Lookahead) Alone(d int) (Foresight, bool) { return l.run(d, -1, l.toFinish) }

// prefillCopy is the request the sidecar sends a prefill pod: one output
// token, with the hashes that fit the shorter sequence.
func prefillCopy(r *Request) *Request {
	pr := *r
	pr.OutputTokens, pr.After, pr.Think = 1, 0, 0
	pr.BlockHashes = r.BlockHashes[:min(len(r.BlockHashes), (pr.PromptTokens+1)/BlockSize)]
	return &pr
}

// foresee returns when a transfer of bytes from a to b, started at start
// (not before the network's time), would end if no other transfer started
// from now on: the link's transfers now, and those in their setup latency,
// share it with this one as they would.
func (n *network) foresee(start time.Duration, a, b features.Topology, bytes float64) time.Duration {
	class := features.ClassOf(a, b)
	link := n.links[class]
	join := start + link.Latency
	type flow struct {
		joinAt    time.Duration
		remaining float64
		self      bool
	}
	var flows []flow
	var now time.Duration
	if ls := n.byKey[linkKey(a, b)]; ls != nil {
		now = ls.last
		for _, t := range ls.active {
			flows = append(flows, flow{joinAt: now, remaining: t.remaining})
		}
		for _, t := range n.pending {
			if t.link == ls {
				flows = append(flows, flow{joinAt: t.joinAt, remaining: t.remaining})
			}
		}
	}
	if bytes <= 0 {
		return join
	}
	flows = append(flows, flow{joinAt: join, remaining: bytes, self: true})
	now = min(now, join)
	for {
		// The flows on the link now, and the next event: one joins or the
		// first finishes at the shared rate.
		active, nextJoin := 0, time.Duration(-1)
		least := -1.0
		for _, x := range flows {
			if x.joinAt <= now {
				active++
				if least < 0 || x.remaining < least {
					least = x.remaining
				}
			} else if nextJoin < 0 || x.joinAt < nextJoin {
				nextJoin = x.joinAt
			}
		}
		if active == 0 {
			now = nextJoin
			continue
		}
		rate := link.BytesPerSec / float64(active)
		dt := time.Duration(least / rate * 1e9)
		if nextJoin >= 0 && nextJoin-now < dt {
			dt = nextJoin - now
		}
		if dt <= 0 {
			dt = 1
		}
		kept := flows[:0]
		for _, x := range flows {
			if x.joinAt <= now {
				x.remaining -= rate * dt.Seconds()
				if x.remaining <= 1 {
					if x.self {
						return now + dt
					}
					continue
				}
			}
			kept = append(kept, x)
		}
		flows = kept
		now += dt
	}
}

// PairOracle is JointRouter's rule on foreseen latencies: for every
// competing route it simulates what would happen (PDLookahead), and picks
// by the same PairRule. It is the joint router with a perfect predictor of
// everything present at dispatch, so joint − oracle is what prediction
// error costs. With a TPOT objective it looks ahead to each route's last
// token; otherwise to the first (TPOT then only breaks exact ties).
type PairOracle struct {
	Rule PairRule

	est  []PairEstimate
	last PairEstimate
}

// RoutePD implements PDRouter for callers without a fleet: with nothing to
// foresee it routes as Greedy.
func (o *PairOracle) RoutePD(req *Request, prefill, decode []PodState) PDChoice {
	return (&Greedy{}).RoutePD(req, prefill, decode)
}

// RoutePDLookahead implements PDLookaheadRouter.
func (o *PairOracle) RoutePDLookahead(req *Request, prefill, decode []PodState, la *Lookahead) PDChoice {
	la.toFinish = o.Rule.SLO.TPOTMs > 0
	o.est = o.est[:0]
	add := func(e PairEstimate, fs Foresight, xfer time.Duration) {
		e.TTFTMs, e.TPOTMs, e.TransferMs = durationMs(fs.TTFT), durationMs(fs.TPOT), durationMs(xfer)
		o.est = append(o.est, e)
	}
	for d := range decode {
		if e := (PairEstimate{Prefill: NoSplit, Decode: d}); o.Rule.competes(req, e, len(prefill), decode) {
			if fs, ok := la.Alone(d); ok {
				add(e, fs, 0)
			}
		}
		for p := range prefill {
			if e := (PairEstimate{Prefill: p, Decode: d}); o.Rule.competes(req, e, len(prefill), decode) {
				if fs, xfer, ok := la.Split(p, d); ok {
					add(e, fs, xfer)
				}
			}
		}
	}
	i := o.Rule.Pick(req, o.est, len(prefill), decode)
	if i < 0 {
		o.last = PairEstimate{}
		return o.RoutePD(req, prefill, decode)
	}
	o.last = o.est[i]
	return o.est[i].Choice()
}

// Foresight is what the oracle foresaw on the route it chose last.
func (o *PairOracle) Foresight() PairEstimate { return o.last }
