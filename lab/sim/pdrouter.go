package sim

import "github.com/headroomhq/headroom/features"

// The P/D routers llm-d has today, as baselines for a router that predicts
// the pair: each picks the decode pod first, then the prefill pod, and
// neither choice knows the cost of the KV transfer between them.

// Greedy is llm-d's P/D scheduling without a latency predictor: the decode
// pod by load (fewest waiting + running, the batch that sets its TPOT), then,
// independently, the prefill pod by llm-d's load and prefix-affinity score
// (LoadPrefix), which stands in for "lowest predicted TTFT". As llm-d's
// pd-profile-handler does, a request whose prompt, less what the chosen
// decode pod already caches, is shorter than SplitThreshold tokens is not
// split (0, the default, splits every request).
type Greedy struct {
	SplitThreshold int
	Prefill        LoadPrefix // the prefill scorer; the zero value means DefaultLoadPrefix

	scratch []ServerState
}

// RoutePD implements PDRouter.
func (g *Greedy) RoutePD(req *Request, prefill, decode []PodState) PDChoice {
	return g.route(req, prefill, decode, nil)
}

// route picks the decode pod, then the prefill pod maximising the load and
// prefix score plus bonus(candidate, decode pod), when bonus is set.
func (g *Greedy) route(req *Request, prefill, decode []PodState, bonus func(p, d PodState) float64) PDChoice {
	g.scratch = serverStates(g.scratch, decode)
	d := LeastQueue{}.Route(req, g.scratch)
	c := PDChoice{Prefill: NoSplit, Decode: d}
	uncached := float64(req.PromptTokens) * (1 - decode[d].PrefixCacheScore)
	if len(prefill) == 0 || uncached < float64(g.SplitThreshold) {
		return c
	}
	scorer := g.Prefill
	if scorer == (LoadPrefix{}) {
		scorer = DefaultLoadPrefix()
	}
	maxQ := 0
	for _, p := range prefill {
		maxQ = max(maxQ, p.NumRequestWaiting+p.NumRequestRunning)
	}
	best, bestScore := 0, 0.0
	for i, p := range prefill {
		s := scorer.Score(p.ServerState, maxQ)
		if bonus != nil {
			s += bonus(p, decode[d])
		}
		if i == 0 || s > bestScore || (s == bestScore && p.InFlight < prefill[best].InFlight) {
			best, bestScore = i, s
		}
	}
	c.Prefill = best
	return c
}

// TopologyConstant is Greedy plus llm-d's topology-affinity scorer: the
// prefill pod's score gains a constant for sharing a host (1.0), rack (0.2),
// zone (0.05) or region (0.02) with the chosen decode pod, times Weight
// (default 1). The constants are llm-d's; they are not scaled by prompt
// length or KV size, which is the defect a learned transfer model removes.
// llm-d then picks at random weighted by score; this picks the best score,
// so that runs compare policies, not luck.
type TopologyConstant struct {
	Greedy
	Weight float64
}

// TopologyScore is llm-d's constant affinity between two placements.
func TopologyScore(a, b features.Topology) float64 {
	switch features.ClassOf(a, b) {
	case features.SameNode:
		return 1.0
	case features.SameRack:
		return 0.2
	case features.SameZone:
		return 0.05
	case features.CrossZone:
		return 0.02 // same region
	}
	return 0
}

// RoutePD implements PDRouter.
func (t *TopologyConstant) RoutePD(req *Request, prefill, decode []PodState) PDChoice {
	w := t.Weight
	if w == 0 {
		w = 1
	}
	return t.route(req, prefill, decode, func(p, d PodState) float64 {
		return w * TopologyScore(p.Topology, d.Topology)
	})
}

// DecodeOnly never splits: it routes every request to a decode pod with a
// single-pool Router, as a fleet without disaggregation would (a Fleet is a
// PDFleet behind DecodeOnly). A Router that looks ahead gets its lookahead.
type DecodeOnly struct {
	Router  Router
	scratch []ServerState
}

// RoutePD implements PDRouter.
func (o *DecodeOnly) RoutePD(req *Request, _, decode []PodState) PDChoice {
	o.scratch = serverStates(o.scratch, decode)
	return PDChoice{Prefill: NoSplit, Decode: o.Router.Route(req, o.scratch)}
}

// RoutePDLookahead implements PDLookaheadRouter, for a Router that looks
// ahead; others route as RoutePD.
func (o *DecodeOnly) RoutePDLookahead(req *Request, prefill, decode []PodState, la *Lookahead) PDChoice {
	lr, ok := o.Router.(LookaheadRouter)
	if !ok {
		return o.RoutePD(req, prefill, decode)
	}
	o.scratch = serverStates(o.scratch, decode)
	return PDChoice{Prefill: NoSplit, Decode: lr.RouteLookahead(req, o.scratch, la)}
}

// PDRouterNames lists the names NewPDRouter accepts.
var PDRouterNames = []string{"greedy", "topology-constant", "decode-only"}

// NewPDRouter returns a fresh built-in P/D router by name, or false.
// decode-only routes with llm-d's load and prefix scorer.
func NewPDRouter(name string) (PDRouter, bool) {
	switch name {
	case "greedy":
		return &Greedy{}, true
	case "topology-constant":
		return &TopologyConstant{}, true
	case "decode-only":
		return &DecodeOnly{Router: DefaultLoadPrefix()}, true
	}
	return nil, false
}
