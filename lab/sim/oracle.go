package sim

import (
	"slices"
	"time"
)

// TTFTOracle is the greedy router with a perfect TTFT predictor: it sends each
// request to the server where its first token would come soonest if
// nothing else arrived, found by simulating the request on every candidate
// (Lookahead.FirstToken). Ties go to the fewest in flight, then the lowest
// index, as the other routers break them.
//
// It knows everything a router could know at dispatch (every server's exact
// state and cost model) and nothing of the future: requests that arrive
// later can still slow the one it routed. So it bounds what a better
// TTFT predictor can buy a router that sends each request where it is
// served soonest, not what any router could do: that rule ignores what a
// request costs the others on its server, and docs/DEMO.md shows routers
// with worse predictions beat it.
//
// Cost: candidates are tried likeliest winner first (most of the prompt
// cached, then least prefill queued), and each later lookahead stops as
// soon as it cannot beat the best so far, so a decision simulates about
// one TTFT's worth of steps on the winner and less on the others.
type TTFTOracle struct {
	order []int
	last  time.Duration
}

// Route implements Router for callers without a fleet: without a lookahead
// the oracle cannot see ahead and routes as DefaultLoadPrefix. A Fleet
// always calls RouteLookahead.
func (o *TTFTOracle) Route(req *Request, servers []ServerState) int {
	o.last = 0
	return DefaultLoadPrefix().Route(req, servers)
}

// RouteLookahead implements LookaheadRouter.
func (o *TTFTOracle) RouteLookahead(req *Request, servers []ServerState, la *Lookahead) int {
	o.order = o.order[:0]
	for i := range servers {
		o.order = append(o.order, i)
	}
	slices.SortStableFunc(o.order, func(a, b int) int {
		sa, sb := servers[a], servers[b]
		switch {
		case sa.PrefixCacheScore != sb.PrefixCacheScore:
			if sa.PrefixCacheScore > sb.PrefixCacheScore {
				return -1
			}
			return 1
		case sa.PrefillTokensInFlight != sb.PrefillTokensInFlight:
			if sa.PrefillTokensInFlight < sb.PrefillTokensInFlight {
				return -1
			}
			return 1
		}
		return sa.InFlight - sb.InFlight
	})
	best, bestTTFT := -1, time.Duration(0)
	for _, i := range o.order {
		ttft, ok := la.FirstToken(i, bestTTFT) // 0 before the first: no limit
		if !ok {
			continue
		}
		if best < 0 || ttft < bestTTFT || (ttft == bestTTFT && better(servers[i], servers[best])) {
			best, bestTTFT = i, ttft
		}
	}
	o.last = bestTTFT
	if best < 0 {
		// The request fits on no server (they are identical): it will be
		// rejected wherever it goes.
		return DefaultLoadPrefix().Route(req, servers)
	}
	return best
}

// Foresight returns the TTFT the oracle foresaw for the last request it
// routed, on the server it chose; 0 if it could not look ahead. The actual
// TTFT differs only when later arrivals changed that server's steps before
// the first token.
func (o *TTFTOracle) Foresight() time.Duration { return o.last }

// better breaks a tie between two servers with equal TTFT: the fewest in
// flight, then the lowest index.
func better(a, b ServerState) bool {
	return a.InFlight < b.InFlight || (a.InFlight == b.InFlight && a.Index < b.Index)
}
