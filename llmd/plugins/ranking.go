package plugins

import (
	"errors"
	"math"
	"slices"

	"github.com/headroomhq/headroom/pairs/guard"

	fwkplugin "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/plugin"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
)

// RankingType is the data type of the ranking the producer stores on each
// request for the scorers.
const RankingType = "HeadroomPairRanking"

// Reason says why the Headroom plugins score nothing for a request; the
// empty Reason means they score.
type Reason string

// The reasons to fail open, each counted in headroom_epp_fallbacks_total.
const (
	// ReasonUnavailable: the predictor could not be reached or failed.
	ReasonUnavailable Reason = "predictor_unavailable"
	// ReasonDeadline: no answer within the producer's deadline.
	ReasonDeadline Reason = "deadline"
	// ReasonNoModel: the predictor has no model a ranking needs yet (503).
	ReasonNoModel Reason = "no_model"
	// ReasonExtrapolated: an option the scorers would choose among rests on
	// a pod loaded beyond what the model was trained on, where it
	// under-predicts (docs/PROTOCOL.md §4.7, "Extrapolated"), and ranks at
	// or above every option that does not, so it could be the better
	// route.
	ReasonExtrapolated Reason = "extrapolated"
	// ReasonNoOption: no decode pod has an option to rank (every pair
	// through the pods the decider would split on lacks a transfer
	// estimate: the trainer has not learned that link class yet).
	ReasonNoOption Reason = "no_option"
	// ReasonNoCandidates: the request has no decode candidate, no prompt
	// length, or a candidate without topology.
	ReasonNoCandidates Reason = "no_candidates"
	// ReasonPeerUnranked: the prefill profile's peer (the decode pick) is
	// not a decode pod of the ranking.
	ReasonPeerUnranked Reason = "peer_unranked"
)

// Ranking is one request's answer from the predictor, indexed by the
// candidates' endpoint names, with the options the scorers choose among.
// It is written once by the producer and then only read.
type Ranking struct {
	// Fallback is why the plugins do not score this request; "" when they do.
	Fallback Reason

	prefill, decode map[string]int // endpoint name → index in the request
	// rank[j][i] is pair (prefill i, decode j)'s rank, -1 without an estimate;
	// alone[j] decode pod j's rank alone.
	rank  [][]int
	alone []int
	// ttft[j][i] and aloneTTFT[j] are the predicted TTFTs, for the
	// training entry's predicted_ttft_ms.
	ttft      [][]float64
	aloneTTFT []float64
	// splits[j] says whether the options through decode pod j are its pairs
	// (the decider splits there) or the pod alone; both compete with
	// decideSplit.
	splits      []bool
	decideSplit bool
}

// rankingKey is the request attribute of producer name's ranking.
func rankingKey(name string) fwkplugin.DataKey {
	return fwkplugin.NewDataKey(RankingType, ProducerType).WithNonEmptyProducerName(name)
}

// readRanking returns the ranking stored on request under key, or nil.
func readRanking(request *fwksched.InferenceRequest, key fwkplugin.DataKey) *Ranking {
	if request == nil {
		return nil
	}
	r, _ := fwksched.ReadRequestAttribute[*Ranking](request, key)
	return r
}

// usable reports whether the scorers may score on r.
func (r *Ranking) usable() bool { return r != nil && r.Fallback == "" }

// best is decode pod j's best competing option: its rank (math.MaxInt
// when it has none) and whether that option splits.
func (r *Ranking) best(j int) (rank int, split bool) {
	rank = math.MaxInt
	if !r.splits[j] || r.decideSplit {
		rank = r.alone[j]
	}
	if r.splits[j] {
		for _, pr := range r.rank[j] {
			// A pair tied with the pod alone ranks after it: a tie does
			// not split.
			if pr >= 0 && pr < rank {
				rank, split = pr, true
			}
		}
	}
	return rank, split
}

// decideFallback sets Fallback when no decode pod has an option, or, unless
// trusted, when an extrapolated option could be the better route: it ranks
// at or above the best option that is not extrapolated, or every option
// is (guard.Choice, the rule Headroom's own joint router follows). An
// extrapolated option ranked below a trusted one is passed over: its
// estimate is likely low, so it cannot be the better route, and the
// scorers' best is the trusted option. prefillBeyond and decodeBeyond are
// the answer's per-pod flags.
func (r *Ranking) decideFallback(prefillBeyond, decodeBeyond []bool, trustExtrapolation bool) {
	c := guard.Choice[int]{Trust: trustExtrapolation, Better: func(a, b int) bool { return a < b }}
	for j := range r.alone {
		if !r.splits[j] || r.decideSplit {
			c.Offer(r.alone[j], decodeBeyond[j])
		}
		if r.splits[j] {
			for i, pr := range r.rank[j] {
				if pr >= 0 {
					c.Offer(pr, prefillBeyond[i])
				}
			}
		}
	}
	switch _, err := c.Best(); {
	case errors.Is(err, guard.ErrNoOption):
		r.Fallback = ReasonNoOption
	case errors.Is(err, guard.ErrExtrapolated):
		r.Fallback = ReasonExtrapolated
	}
}

// decodeScores scores each decode endpoint by its best option: the best
// gets 1, the next 1/2, then 1/4 and so on by distinct rank (equal options
// score alike), a pod without an option 0. Weighted above the sum of the
// profile's other weights (the shipped config: 10 against 3), the best
// option's pod is always the profile's pick, and llm-d's scorers break
// ties only.
func (r *Ranking) decodeScores(endpoints []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	ranks := make([]int, len(endpoints))
	for n, e := range endpoints {
		ranks[n] = math.MaxInt
		if j, ok := r.decode[e.GetMetadata().ID.String()]; ok {
			ranks[n], _ = r.best(j)
		}
	}
	return halvingScores(endpoints, ranks)
}

// prefillScores scores each prefill endpoint by the rank of its pair with
// decode pod peer, as decodeScores does; false when peer is not a decode
// pod of the ranking.
func (r *Ranking) prefillScores(peer string, endpoints []fwksched.Endpoint) (map[fwksched.Endpoint]float64, bool) {
	j, ok := r.decode[peer]
	if !ok {
		return nil, false
	}
	ranks := make([]int, len(endpoints))
	for n, e := range endpoints {
		ranks[n] = math.MaxInt
		if i, ok := r.prefill[e.GetMetadata().ID.String()]; ok && r.rank[j][i] >= 0 {
			ranks[n] = r.rank[j][i]
		}
	}
	return halvingScores(endpoints, ranks), true
}

// aloneIsBetter reports whether decode pod peer is better alone than with
// any prefill pod (ties go to not splitting); false when peer is unranked.
func (r *Ranking) aloneIsBetter(peer string) (alone, ok bool) {
	j, ok := r.decode[peer]
	if !ok {
		return false, false
	}
	for _, pr := range r.rank[j] {
		if pr >= 0 && pr < r.alone[j] {
			return false, true
		}
	}
	return true, true
}

// predictedTTFT is the ranking's TTFT for the route taken: decode pod
// decode with prefill pod prefill ("" for none); 0 when unknown.
func (r *Ranking) predictedTTFT(prefill, decode string) float64 {
	if r == nil || len(r.aloneTTFT) == 0 {
		return 0
	}
	j, ok := r.decode[decode]
	if !ok {
		return 0
	}
	if prefill == "" {
		return r.aloneTTFT[j]
	}
	if i, ok := r.prefill[prefill]; ok {
		return r.ttft[j][i]
	}
	return 0
}

// halvingScores maps ranks (smaller is better; math.MaxInt: none) to
// scores: the n-th distinct rank scores 2^-n, none 0.
func halvingScores(endpoints []fwksched.Endpoint, ranks []int) map[fwksched.Endpoint]float64 {
	distinct := slices.Clone(ranks)
	slices.Sort(distinct)
	distinct = slices.Compact(distinct)
	scores := make(map[fwksched.Endpoint]float64, len(endpoints))
	for n, e := range endpoints {
		if ranks[n] == math.MaxInt {
			scores[e] = 0
			continue
		}
		place, _ := slices.BinarySearch(distinct, ranks[n])
		scores[e] = math.Ldexp(1, -place)
	}
	return scores
}
