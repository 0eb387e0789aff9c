package sim

import (
	"errors"
	"math"

	"github.com/headroomhq/headroom/pairs/guard"
)

// A joint router decides the pair, not two pods: for every (prefill,
// decode) pair and every decode pod alone it asks a PairScorer what the
// client's TTFT and TPOT would be, and takes the best route by one rule.
// The scorer is where the latencies come from (a learned model over HTTP,
// or foresight for an oracle); the rule is here, so that a router on
// predictions and one on foreseen latencies differ only by their scorer.

// PairEstimate is a scorer's answer for one route of a request.
type PairEstimate struct {
	Prefill int // index into the prefill pool, or NoSplit
	Decode  int // index into the decode pool
	// TTFTMs is the client's TTFT: prefill on P + KV transfer P→D + the
	// first decode step on D, or D's own prefill without a split.
	TTFTMs float64
	TPOTMs float64 // on the decode pod
	// The parts of a split route, when the scorer knows them (reports
	// only): how TTFTMs divides between the prefill pod, the transfer and
	// the decode pod. A learned scorer's prefill part holds the decode
	// pod's first step, as its labels do, and DecodeMs only that pod's
	// load beyond the lightest's (pairs.Rank).
	PrefillMs, TransferMs, DecodeMs float64
	// Extrapolated marks an estimate the scorer made beyond what its model
	// has seen (a load above its training range), which it is likely to
	// under-predict; PairRule.AvoidExtrapolation routes only past it.
	Extrapolated bool
}

// Choice is the route the estimate is for.
func (e PairEstimate) Choice() PDChoice { return PDChoice{Prefill: e.Prefill, Decode: e.Decode} }

// PairScorer estimates routes of req. It may return any subset of the
// routes (every pair, the best k, the no-split options); a route it leaves
// out is never taken. An error, or no usable estimate, makes the router
// fall back.
type PairScorer interface {
	ScorePairs(req *Request, prefill, decode []PodState) ([]PairEstimate, error)
}

// PairSLO is a request's objectives in milliseconds; 0 means none.
type PairSLO struct {
	TTFTMs float64 `json:"ttft_ms,omitempty"`
	TPOTMs float64 `json:"tpot_ms,omitempty"`
}

// Set reports whether any objective is given.
func (s PairSLO) Set() bool { return s.TTFTMs > 0 || s.TPOTMs > 0 }

// Headroom is the estimate's worst headroom relative to its objective:
// min over the objectives set of (SLO − estimate) / SLO. Positive means
// every objective is expected to be met, with that fraction to spare on
// the tightest; +Inf without objectives.
func (s PairSLO) Headroom(e PairEstimate) float64 {
	h := math.Inf(1)
	if s.TTFTMs > 0 {
		h = min(h, (s.TTFTMs-e.TTFTMs)/s.TTFTMs)
	}
	if s.TPOTMs > 0 {
		h = min(h, (s.TPOTMs-e.TPOTMs)/s.TPOTMs)
	}
	return h
}

// JointStats count what a JointRouter did.
type JointStats struct {
	Routed   int `json:"routed"`    // requests routed on estimates
	NotReady int `json:"not_ready"` // fallbacks because the scorer had no model yet
	Failed   int `json:"failed"`    // fallbacks because the scorer failed or gave nothing usable
	Split    int `json:"split"`     // of the routed, how many were split
	// Extrapolated counts fallbacks because an extrapolated estimate could
	// have been the better route (PairRule.AvoidExtrapolation).
	Extrapolated int   `json:"extrapolated"`
	LastError    error `json:"-"`
}

// ErrNoModel is what a PairScorer returns (wrapped) before it can estimate
// anything, so that a JointRouter counts the fallback as a cold start, not
// a failure.
var ErrNoModel = errors.New("pair scorer: no model yet")

// PairRule is how a joint router picks among estimated routes:
//   - without an SLO, the route of least TTFT; TPOT, then the decode pod's
//     in-flight count, break ties;
//   - with one, among the routes expected to meet every objective the one
//     of least TTFT (then TPOT and in-flight, as without); a route expected
//     to meet its TTFT objective by a wide margin but to miss TPOT loses to
//     one that meets both; when none can, the least violation wins (the
//     most PairSLO.Headroom: the tightest objective's spare fraction), then
//     least TTFT. Spare beyond the objective is not ranked: the TPOT
//     objective is the tighter one on a healthy fleet (a TPOT p50 of 22 ms
//     against 25 leaves 12%, a TTFT p50 of 160-250 ms against 1 s 75-84%), so ranking on spare routes on TPOT
//     alone and stacks prefills on the pods whose queues it cannot see;
//     docs/DEMO.md (P/D, "Against the targets") has the runs.
//
// Which routes compete depends on DecideSplit. With it, every route does,
// the pairs and each decode pod alone: the rule also decides whether to
// split. Without it, the split is llm-d's prefix-based decider's, applied
// to each decode pod as Greedy applies it to its pick: through a decode
// pod on which at least SplitThreshold of the prompt's tokens are uncached
// only the pairs compete, through the others only the pod alone. Least
// TTFT alone would rarely split, since a split adds a second hop and a
// transfer to the first token, and what it buys (a decode batch free of
// prefills, so a steadier TPOT) does not show in TTFT; an SLO on TPOT
// makes that trade explicit.
//
// With AvoidExtrapolation the rule routes on an Extrapolated estimate (a
// pod loaded beyond what the model was trained on) only by passing it
// over: an extrapolated route whose estimate is already worse than the
// best trusted route's is left behind and the trusted one taken, since
// the model's estimate for such a pod is the one most likely wrong, and
// low (docs/DEMO.md, P/D); when an extrapolated route could be the better
// one (it ranks at or above the best trusted route), or every route is
// extrapolated, the rule picks nothing and the router falls back, as
// without a model (pairs/guard, shared with the llm-d plugins). Trusting
// the low estimate sends the pod more of the load the model cannot see;
// leaving extrapolated routes out even where they would win piles the
// load on the pods still in range until they leave it too (both measured
// in docs/DEMO.md). Once the labels of the deeper queues arrive the
// training ranges grow and the estimates are used again.
type PairRule struct {
	SLO                PairSLO
	DecideSplit        bool
	SplitThreshold     int
	AvoidExtrapolation bool
}

// JointRouter routes each request on its PairScorer's estimates, by Rule.
// On an error or no usable estimate it falls back to Fallback (nil:
// Greedy), as llm-d fails open.
type JointRouter struct {
	Scorer   PairScorer
	Rule     PairRule
	Fallback PDRouter

	Stats JointStats
	last  []PairEstimate
	pick  int
}

// RoutePD implements PDRouter.
func (j *JointRouter) RoutePD(req *Request, prefill, decode []PodState) PDChoice {
	j.last, j.pick = nil, -1
	est, err := j.Scorer.ScorePairs(req, prefill, decode)
	if err == nil {
		var i int
		if i, err = j.Rule.pick(req, est, len(prefill), decode); err == nil {
			j.Stats.Routed++
			if est[i].Prefill != NoSplit {
				j.Stats.Split++
			}
			j.last, j.pick = est, i
			return est[i].Choice()
		}
		if errors.Is(err, guard.ErrNoOption) {
			err = errors.New("pair scorer: no usable estimate")
		}
	}
	switch {
	case errors.Is(err, ErrNoModel):
		j.Stats.NotReady++
	case errors.Is(err, guard.ErrExtrapolated):
		j.Stats.Extrapolated++
	default:
		j.Stats.Failed++
		j.Stats.LastError = err
	}
	fb := j.Fallback
	if fb == nil {
		fb = &Greedy{}
		j.Fallback = fb
	}
	return fb.RoutePD(req, prefill, decode)
}

// Last returns the estimate the last routed request was sent on, and
// false when it fell back. Valid until the next RoutePD.
func (j *JointRouter) Last() (PairEstimate, bool) {
	if j.pick < 0 {
		return PairEstimate{}, false
	}
	return j.last[j.pick], true
}

// Pick returns the index of the best estimate for req by the rule, or -1
// when none names a competing route with finite, non-negative latencies,
// or, with AvoidExtrapolation, when an extrapolated one could be the
// better route. prefillPods is the prefill pool's size; decode is the
// decode pool as the router sees it.
func (r PairRule) Pick(req *Request, est []PairEstimate, prefillPods int, decode []PodState) int {
	i, err := r.pick(req, est, prefillPods, decode)
	if err != nil {
		return -1
	}
	return i
}

// pick is Pick with the reason it picks nothing: guard.ErrNoOption or
// guard.ErrExtrapolated.
func (r PairRule) pick(req *Request, est []PairEstimate, prefillPods int, decode []PodState) (int, error) {
	type route struct {
		at int
		h  float64 // the SLO headroom, only a shortfall: every route meeting the objectives ties
	}
	bySLO := r.SLO.Set()
	c := guard.Choice[route]{Trust: !r.AvoidExtrapolation, Better: func(a, b route) bool {
		return betterPair(est[a.at], a.h, est[b.at], b.h, bySLO, decode)
	}}
	for i, e := range est {
		if usable(e, prefillPods, len(decode)) && r.competes(req, e, prefillPods, decode) {
			c.Offer(route{i, min(r.SLO.Headroom(e), 0)}, e.Extrapolated)
		}
	}
	best, err := c.Best()
	return best.at, err
}

// competes reports whether route e is one the rule chooses among.
func (r PairRule) competes(req *Request, e PairEstimate, prefillPods int, decode []PodState) bool {
	if r.DecideSplit {
		return true
	}
	uncached := float64(req.PromptTokens) * (1 - decode[e.Decode].PrefixCacheScore)
	split := prefillPods > 0 && uncached >= float64(r.SplitThreshold)
	return split == (e.Prefill != NoSplit)
}

func usable(e PairEstimate, prefillPods, decodePods int) bool {
	ok := func(v float64) bool { return v >= 0 && !math.IsInf(v, 0) }
	return e.Decode >= 0 && e.Decode < decodePods &&
		(e.Prefill == NoSplit || (e.Prefill >= 0 && e.Prefill < prefillPods)) &&
		ok(e.TTFTMs) && ok(e.TPOTMs)
}

// betterPair reports whether a (with headroom ha) beats b (with hb).
func betterPair(a PairEstimate, ha float64, b PairEstimate, hb float64, bySLO bool, decode []PodState) bool {
	if bySLO && ha != hb {
		return ha > hb
	}
	if a.TTFTMs != b.TTFTMs {
		return a.TTFTMs < b.TTFTMs
	}
	if a.TPOTMs != b.TPOTMs {
		return a.TPOTMs < b.TPOTMs
	}
	return decode[a.Decode].InFlight < decode[b.Decode].InFlight
}
