package pairs

import (
	"cmp"
	"errors"
	"fmt"
	"math"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/wire"
)

// The request and answer types are wire's, as rows are; these names let
// a caller of Rank use one package.
type (
	Request   = wire.PairsRequest
	Candidate = wire.PairCandidate
	Option    = wire.PairOption
	Estimate  = wire.Estimate
)

// NoSplit, as Option.Prefill, is the option of not splitting.
const NoSplit = wire.NoSplit

// Result is a ranking. Its slices are reused by the next Rank into the
// same Result.
type Result struct {
	wire.PairsRanking

	// keys sorts every option, EveryNoSplit and EveryPair together;
	// sortBuf is the sort's scratch.
	keys, sortBuf []rankKey

	// ttft holds the TTFT model's estimates of the prefill rows, then of
	// the decode rows: prefill and decodeTTFT are its two parts.
	ttft, prefill, decodeTTFT, decodeTPOT []Estimate
	// ttftX and tpotX are the rows' feature vectors, a row after another
	// (ttft's rows; the decode rows), and central the models' central
	// estimates: scratch of the batched estimates.
	ttftX, tpotX, central []float64
	// decodeBeyond says which decode rows the TTFT model would
	// extrapolate to (extrapolated); PrefillExtrapolated the prefill rows.
	decodeBeyond []bool
	tokens       []int64
	// links are the transfer model's distributions per class, kept here
	// so that handing one to the Statistic as an interface does not
	// allocate per pair.
	links [features.NumLinkClasses]linkDistribution
	// transfers memoises, per decode candidate and link class, the last
	// transfer estimate and the concurrency it was made for: a pair's
	// transfer depends on the decode pod (the tokens that move), the
	// class and the busier link, so pairs sharing those share it.
	transfers []transferMemo
	// sharedMs is the split-TTFT law's shared part (its prefill) on the
	// lightest prefill candidate's row, in every pair's law estimate; 0
	// for a transfer model or a law without shared terms.
	sharedMs float64
	// sharedRow and sharedBuf are the law's input, here so that handing
	// them to it as an interface does not allocate.
	sharedRow features.Row
	sharedBuf [8]float64
}

// transferMemo is one memoised transfer estimate; ok is false until set.
type transferMemo struct {
	ok         bool
	concurrent int64
	est        Estimate
}

// ErrNotReady is returned when the models cannot rank a request: both the
// TTFT and the TPOT model are needed.
var ErrNotReady = errors.New("pair prediction needs both a TTFT and a TPOT model")

// Rank predicts every pair of req and every no-split option into out.
//
// The TTFT of a pair is the TTFT model on P's row, plus the KV transfer
// from P to D, plus D's decode load; its TPOT is D's. The TTFT model
// learns P's rows from the client's TTFT less the measured transfer
// (features.Sample.Label), which is P's frontend and prefill, D's frontend
// and D's first decode step: adding a first step on D again would count it
// twice and lean every answer towards not splitting by one TPOT. What P's
// row cannot know is D's load at that step, so D enters as the excess of
// its first step over the lightest decode candidate's (the TPOT model on
// the rows; DecodeLoadMs), since the step held in the labels is that of
// the decode pods routers chose, the lightest they saw: with one decode
// candidate, or D the lightest, a pair is P's TTFT and the transfer. The
// transfer moves the prompt less what D has cached, prompt × (1 − D's
// prefix_cache_score) rounded to a token, over the link class of the two
// pods' topologies. The no-split option of D is the TTFT model on D's own
// row.
//
// Without a transfer model, a bundle learned from entries that do not
// time the transfer (llm-d's) has the split-TTFT law instead: the whole
// TTFT of a split request, learned end to end, as a prefill shared by
// every link class (on P's row) and each class's transfer of the tokens
// that move. A pair is then that law's estimate, its prefill taken on the
// lightest prefill candidate's row (by the TTFT model), plus the excess
// of P's load over that candidate's (the TTFT model on the prefill rows;
// PrefillLoadMs) and D's decode load as above: the TTFT model, whose
// trees follow a queue where the law's lines do not, ranks the prefill
// pods, and the law's classes, fitted on one prefill, rank the links. With a transfer
// model the pair is composed from its parts as above, split-TTFT law or
// not: the parts are what the demo's figures were measured with, and each
// is learned apart on labels the other does not blur.
//
// Every option gets its Rank in one order over the pairs and the no-split
// options together (0 the best; equal options share a rank), so a caller
// can compare any two without the sorted lists.
//
// Without SLOs options are ranked by predicted TTFT, ties by TPOT. With a
// TTFT or a TPOT SLO, or both, the options expected to meet every SLO come
// first, among them by TTFT as without SLOs; then those missing one, by
// the smaller relative headroom, (SLO − prediction) / SLO, nearest miss
// first. Spare beyond an SLO is not ranked: on a healthy fleet the TPOT
// SLO is the tighter one, and ranking on spare would pick decode pods on
// TPOT alone and stack prefills where the queues are (sim.PairRule, the
// demo's joint-slo, is the same rule; docs/DEMO.md has the runs).
// Predictions are the Models' Statistic: a predictor serving a quantile
// ranks on quantiles.
func Rank(m *Models, req *Request, out *Result) error {
	if m.TTFT == nil || m.TPOT == nil {
		return ErrNotReady
	}
	if len(req.Decode) == 0 {
		return fmt.Errorf("rank pairs: no decode candidates")
	}
	nP, nD := len(req.Prefill), len(req.Decode)
	out.RankedBy = wire.RankByTTFT
	if req.TTFTSLOMs > 0 || req.TPOTSLOMs > 0 {
		out.RankedBy = wire.RankBySLOHeadroom
	}
	law, fromSplit := m.law()
	out.TransferModel = m.Transfer != nil
	out.SplitTTFTModel = fromSplit
	out.TotalPairs, out.UnknownPairs = nP*nD, 0
	out.UnknownLinks = out.UnknownLinks[:0]
	out.ttft = resize(out.ttft, nP+nD)
	out.prefill, out.decodeTTFT = out.ttft[:nP], out.ttft[nP:]
	out.decodeTPOT = resize(out.decodeTPOT, nD)
	out.tokens = resize(out.tokens, nD)

	out.PrefillExtrapolated = resize(out.PrefillExtrapolated, nP)
	out.decodeBeyond = resize(out.decodeBeyond, nD)
	out.transfers = resize(out.transfers, nD*int(features.NumLinkClasses))
	clear(out.transfers)
	out.PairAt = resize(out.PairAt, nP*nD)

	// Every row's vectors are built once, into one matrix per model (the
	// prefill rows' TTFT vectors, then the decode rows'; the decode rows'
	// TPOT vectors), and each model walks its rows together.
	stat := m.Statistic
	ttftWidth, tpotWidth := m.TTFT.Schema().Len(), m.TPOT.Schema().Len()
	out.ttftX = resize(out.ttftX, (nP+nD)*ttftWidth)
	out.tpotX = resize(out.tpotX, nD*tpotWidth)
	out.central = resize(out.central, nP+nD)
	ttftX := func(r int) []float64 { return out.ttftX[r*ttftWidth : (r+1)*ttftWidth] }
	for i := range req.Prefill {
		row := row(req, &req.Prefill[i], "prefill")
		m.TTFT.Schema().Build(&row, ttftX(i))
	}
	for j := range req.Decode {
		row := row(req, &req.Decode[j], "decode")
		m.TTFT.Schema().Build(&row, ttftX(nP+j))
		m.TPOT.Schema().Build(&row, out.tpotX[j*tpotWidth:(j+1)*tpotWidth])
		cached := math.Round(float64(req.InputTokenLength) * clamp01(row.PrefixCacheScore))
		out.tokens[j] = req.InputTokenLength - int64(cached)
	}
	stat.PredictVectors(m.TTFT, out.ttftX, ttftWidth, out.central, out.ttft)
	stat.PredictVectors(m.TPOT, out.tpotX, tpotWidth, out.central, out.decodeTPOT)
	for i := range req.Prefill {
		out.PrefillExtrapolated[i] = extrapolated(m.TTFT, ttftX(i))
	}
	for j := range req.Decode {
		out.decodeBeyond[j] = extrapolated(m.TTFT, ttftX(nP+j))
	}

	lightest, lightestPrefill := math.Inf(1), math.Inf(1)
	for j := range req.Decode {
		lightest = min(lightest, out.decodeTPOT[j].Ms)
	}
	lightestAt := 0
	for i := range req.Prefill {
		if out.prefill[i].Ms < lightestPrefill {
			lightestPrefill, lightestAt = out.prefill[i].Ms, i
		}
	}
	out.sharedMs = 0
	if fromSplit && nP > 0 {
		out.sharedRow = row(req, &req.Prefill[lightestAt], "prefill")
		out.sharedMs = law.SharedMs(&out.sharedRow, out.sharedBuf[:0])
	}

	out.EveryNoSplit = resize(out.EveryNoSplit, nD)
	for j := range req.Decode {
		o := Option{Prefill: NoSplit, Decode: j, TTFT: out.decodeTTFT[j], TPOT: out.decodeTPOT[j],
			Extrapolated: out.decodeBeyond[j]}
		score(req, &o)
		out.EveryNoSplit[j] = o
	}

	out.EveryPair = out.EveryPair[:0]
	for c := range out.links {
		out.links[c] = linkDistribution{law, features.LinkClass(c)}
	}
	var unknown [features.NumLinkClasses]bool
	for i := range req.Prefill {
		p := &req.Prefill[i]
		for j := range req.Decode {
			d := &req.Decode[j]
			out.PairAt[j*nP+i] = -1
			if p.Pod != "" && p.Pod == d.Pod {
				// A pod listed for both roles paired with itself moves no
				// KV cache: that is its no-split option.
				out.TotalPairs--
				continue
			}
			link := features.ClassOf(p.Topology, d.Topology)
			est, ok := out.transfer(law, m.Statistic, req, j, link, max(p.Concurrent, d.Concurrent))
			if !ok {
				out.UnknownPairs++
				unknown[link] = true
				continue
			}
			o := Option{Prefill: i, Decode: j, Link: link, TransferTokens: out.tokens[j],
				PrefillPart: out.prefill[i], Transfer: est,
				DecodeLoadMs: out.decodeTPOT[j].Ms - lightest, TPOT: out.decodeTPOT[j], Extrapolated: out.PrefillExtrapolated[i]}
			if fromSplit {
				o.Transfer, o.SplitPart = Estimate{}, est
				o.PrefillLoadMs = out.prefill[i].Ms - lightestPrefill
				o.TTFT = splitTTFT(o.SplitPart, Estimate{}, o.PrefillLoadMs+o.DecodeLoadMs)
			} else {
				o.TTFT = splitTTFT(o.PrefillPart, o.Transfer, o.DecodeLoadMs)
			}
			score(req, &o)
			out.PairAt[j*nP+i] = int32(len(out.EveryPair))
			out.EveryPair = append(out.EveryPair, o)
		}
	}
	for c, u := range unknown {
		if u {
			out.UnknownLinks = append(out.UnknownLinks, features.LinkClass(c))
		}
	}

	lists := req.K
	if req.Matrix {
		lists = -1 // a matrix answer has no lists
	}
	out.rank(lists)
	return nil
}

// transfer is law's estimate for decode candidate j's tokens over a link
// of class c shared by concurrent transfers (the transfer model's of
// moving them, or the split-TTFT law's of the whole split), memoised per
// (j, c) for the last concurrency asked; ok is false without an estimate
// for c.
func (out *Result) transfer(law TransferModel, stat predictor.Statistic, req *Request, j int, c features.LinkClass, concurrent int64) (Estimate, bool) {
	if law == nil {
		return Estimate{}, false
	}
	memo := &out.transfers[j*int(features.NumLinkClasses)+int(c)]
	if memo.ok && memo.concurrent == concurrent {
		return memo.est, true
	}
	central, ok := law.Predict(c, out.tokens[j], req.KVBytesPerToken, concurrent)
	if !ok {
		return Estimate{}, false
	}
	central += out.sharedMs
	*memo = transferMemo{ok: true, concurrent: concurrent, est: stat.Of(central, &out.links[c])}
	return memo.est, true
}

// row is candidate c's row with the request's fields, and c's role as its
// pod type when it names none.
func row(req *Request, c *Candidate, role string) features.Row {
	row := c.Row
	row.InputTokenLength = req.InputTokenLength
	row.NumTokensGenerated = req.NumTokensGenerated
	row.EncoderInputSize = req.EncoderInputSize
	if row.PodType == "" {
		row.PodType = role
	}
	return row
}

// score sets o's headroom and ranking score.
func score(req *Request, o *Option) {
	o.Score = o.TTFT.Ms
	if req.TTFTSLOMs <= 0 && req.TPOTSLOMs <= 0 {
		return
	}
	slack := math.Inf(1)
	if req.TTFTSLOMs > 0 {
		o.TTFTHeadroomMs = req.TTFTSLOMs - o.TTFT.Ms
		slack = min(slack, o.TTFTHeadroomMs/req.TTFTSLOMs)
	}
	if req.TPOTSLOMs > 0 {
		o.TPOTHeadroomMs = req.TPOTSLOMs - o.TPOT.Ms
		slack = min(slack, o.TPOTHeadroomMs/req.TPOTSLOMs)
	}
	// Only a shortfall ranks: every option meeting the SLOs ties at 0,
	// and TTFT orders them.
	o.Score = -min(slack, 0)
}

// rankKey is what an option is sorted by, and where it is (at: an index
// into EveryNoSplit, then past them into EveryPair): sorting keys rather
// than options moves 32 bytes a swap instead of 240. score, ttft and tpot
// are the option's, as orderedBits, so that comparing two keys is
// comparing integers.
type rankKey struct {
	score, ttft, tpot uint64
	at                int
}

func keyOf(o *Option, at int) rankKey {
	return rankKey{orderedBits(o.Score), orderedBits(o.TTFT.Ms), orderedBits(o.TPOT.Ms), at}
}

// orderedBits maps x to an integer in the order cmp.Compare gives floats:
// every NaN first and equal, −0 equal to +0, then by value. A float's bits
// order non-negative floats as integers do and negative floats backwards;
// flipping every bit of a negative float and the sign bit of the others
// puts them all in one increasing order.
func orderedBits(x float64) uint64 {
	if x != x {
		return 0 // below −∞'s, which is 1<<52 − 1
	}
	if x == 0 {
		x = 0 // −0 as +0
	}
	b := math.Float64bits(x)
	if b>>63 == 1 {
		return ^b
	}
	return b | 1<<63
}

// rank sorts every option into one order, sets each option's Rank, and
// writes the best k (0: all; negative: none) pairs and no-split options,
// best first, and Best. Equal options keep the candidates' order, the no-split options
// before the pairs: a tie does not split.
func (out *Result) rank(k int) {
	nD := len(out.EveryNoSplit)
	out.keys = out.keys[:0]
	for i := range out.EveryNoSplit {
		out.keys = append(out.keys, keyOf(&out.EveryNoSplit[i], i))
	}
	for i := range out.EveryPair {
		out.keys = append(out.keys, keyOf(&out.EveryPair[i], nD+i))
	}
	out.sortBuf = resize(out.sortBuf, len(out.keys))
	sortKeys(out.keys, out.sortBuf)
	option := func(at int) *Option {
		if at < nD {
			return &out.EveryNoSplit[at]
		}
		return &out.EveryPair[at-nD]
	}
	nPairs, nAlone := len(out.EveryPair), nD
	if k != 0 {
		nPairs, nAlone = min(nPairs, max(k, 0)), min(nAlone, max(k, 0))
	}
	out.Pairs, out.NoSplit = resize(out.Pairs, nPairs)[:0], resize(out.NoSplit, nAlone)[:0]
	rank := 0
	for n := range out.keys {
		key := &out.keys[n]
		if n > 0 && compareKeys(&out.keys[n-1], key) != 0 {
			rank++
		}
		o := option(key.at)
		o.Rank = rank
		switch {
		case key.at < nD && len(out.NoSplit) < nAlone:
			out.NoSplit = append(out.NoSplit, *o)
		case key.at >= nD && len(out.Pairs) < nPairs:
			out.Pairs = append(out.Pairs, *o)
		}
	}
	out.Best = *option(out.keys[0].at)
}

// sortKeys sorts keys by compareKeys, then by at, using buf (as long as
// keys) for scratch. Every key has an at of its own, so the order is the
// one order of the keys, whatever the algorithm: it is a merge sort of
// insertion-sorted runs, whose comparisons the compiler inlines, where
// slices.SortFunc calls one through a func value per comparison.
func sortKeys(keys, buf []rankKey) {
	const run = 8
	n := len(keys)
	for lo := 0; lo < n; lo += run {
		r := keys[lo:min(lo+run, n)]
		for i := 1; i < len(r); i++ {
			for j := i; j > 0 && keyLess(&r[j], &r[j-1]); j-- {
				r[j], r[j-1] = r[j-1], r[j]
			}
		}
	}
	src, dst := keys, buf[:n]
	for width := run; width < n; width *= 2 {
		for lo := 0; lo < n; lo += 2 * width {
			mid, hi := min(lo+width, n), min(lo+2*width, n)
			a, b, to := src[lo:mid], src[mid:hi], dst[lo:hi]
			k := 0
			for len(a) > 0 && len(b) > 0 {
				if keyLess(&b[0], &a[0]) {
					to[k], b = b[0], b[1:]
				} else {
					to[k], a = a[0], a[1:]
				}
				k++
			}
			k += copy(to[k:], a)
			copy(to[k:], b)
		}
		src, dst = dst, src
	}
	if n > 0 && &src[0] != &keys[0] {
		copy(keys, src)
	}
}

// keyLess orders as compareKeys, then by at.
func keyLess(a, b *rankKey) bool {
	if a.score != b.score {
		return a.score < b.score
	}
	if a.ttft != b.ttft {
		return a.ttft < b.ttft
	}
	if a.tpot != b.tpot {
		return a.tpot < b.tpot
	}
	return a.at < b.at
}

// compareKeys orders by score, then TTFT, then TPOT.
func compareKeys(a, b *rankKey) int {
	if c := cmp.Compare(a.score, b.score); c != 0 {
		return c
	}
	if c := cmp.Compare(a.ttft, b.ttft); c != 0 {
		return c
	}
	return cmp.Compare(a.tpot, b.tpot)
}

// splitTTFT is the estimate of a pair's TTFT from its parts: the prefill's
// and the transfer's values and bounds add; the decode load, a difference
// between two estimates of one model on rows of one moment, shifts them
// (its error is mostly the model's error on both rows, which cancels).
func splitTTFT(prefill, transfer Estimate, decodeLoadMs float64) Estimate {
	s := Estimate{Ms: prefill.Ms + transfer.Ms + decodeLoadMs}
	for k := range s.Bounds {
		s.Bounds[k] = prefill.Bounds[k] + transfer.Bounds[k] + decodeLoadMs
	}
	return s
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func clamp01(x float64) float64 { return math.Max(0, math.Min(1, x)) }
