package wire

import (
	"math"
	"strconv"
	"strings"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/jsonscan"
)

// POST /predict/pairs (docs/PROTOCOL.md, "Pair prediction") ranks the
// prefill/decode pairs of one request. The types below are its request and
// its answer before encoding; package pairs computes the answer.

// DefaultMaxPairCandidates is the most prefill, and the most decode,
// candidates one request may name unless configured otherwise: 64 × 64
// pairs are about 16 times the work of the 16 × 16 a router typically
// sends.
const DefaultMaxPairCandidates = 64

// PairCandidate is one pod a request could be sent to.
type PairCandidate struct {
	Pod      string
	Topology features.Topology
	// Row holds the pod's fields, as a row of /predict/bulk/strict. Its
	// request fields (InputTokenLength, NumTokensGenerated,
	// EncoderInputSize) are the request's: pair prediction takes them
	// from PairsRequest. An empty PodType means the candidate's role,
	// "prefill" or "decode".
	Row features.Row
	// Concurrent is the number of KV transfers on this pod's link when
	// this one would start, itself included (kv_transfers_in_flight + 1);
	// 0 when unknown. A pair's transfer shares the busier of its two
	// pods' links.
	Concurrent int64
}

// PairsRequest is one request and the pods it could be served by.
type PairsRequest struct {
	InputTokenLength   int64
	NumTokensGenerated int64
	EncoderInputSize   int64
	// KVBytesPerToken is the size of one token's KV cache; 0: the pool
	// setting the transfer model was trained with.
	KVBytesPerToken float64
	// TTFTSLOMs and TPOTSLOMs are the request's objectives; 0: none. With
	// either, options are ranked by headroom against them.
	TTFTSLOMs, TPOTSLOMs float64
	// K is how many pairs and no-split options to return; 0: all.
	K int
	// Matrix asks for the answer as a matrix by candidate (every option's
	// rank and TTFT) instead of the ranked lists of options: what a router
	// scoring each pod needs, in a few kilobytes rather than a hundred.
	Matrix bool

	Prefill, Decode []PairCandidate
}

// Estimate is one prediction: the value the predictor reports (the
// central estimate or its configured quantile) and the calibrated 5% and
// 95% quantiles.
type Estimate struct {
	Ms     float64
	Bounds [2]float64
}

// Uncertainty is half the 90% interval's width in log space, 0 when the
// low bound is not positive. It is a method, not a field, because only
// the routes that report it pay for its logarithms: a pair ranking makes
// hundreds of estimates, and its answer carries none.
func (e *Estimate) Uncertainty() float64 {
	if !(e.Bounds[0] > 0) {
		return 0
	}
	return (math.Log(e.Bounds[1]) - math.Log(e.Bounds[0])) / 2
}

// NoSplit, as PairOption.Prefill, is the option of not splitting: the
// decode pod runs the prompt itself.
const NoSplit = -1

// PairOption is one way to serve the request: a split pair, or a decode
// pod alone (Prefill == NoSplit).
type PairOption struct {
	Prefill int // index into PairsRequest.Prefill, or NoSplit
	Decode  int // index into PairsRequest.Decode

	// For a split pair: the link between the two pods, the tokens whose
	// KV moves (the prompt less what the decode pod has cached, from its
	// prefix_cache_score), and the three parts of its TTFT. Zero for
	// NoSplit.
	Link           features.LinkClass
	TransferTokens int64
	// PrefillPart is the TTFT model on the prefill pod's row. Its label is
	// the client's TTFT less the measured transfer, so it holds the
	// decode pod's frontend and first decode step as well as the prefill.
	PrefillPart Estimate
	Transfer    Estimate // the transfer model for Link and TransferTokens
	// SplitPart is, for a pair predicted without a transfer model, the
	// split-TTFT law (features.SplitTTFT) for Link and TransferTokens:
	// the whole TTFT of a split request, learned end to end from entries
	// that do not time the transfer; zero when the pair is composed from
	// PrefillPart and Transfer. PrefillLoadMs is then how much longer the
	// prefill pod's part is predicted to take than the lightest prefill
	// candidate's (the TTFT model on the rows, less the least; ≥ 0), as
	// DecodeLoadMs is the decode pod's: the law saw the pods routers
	// chose, not this one's load.
	SplitPart     Estimate
	PrefillLoadMs float64
	// DecodeLoadMs is how much longer the decode pod's first step is
	// predicted to take than the lightest decode candidate's (the TPOT
	// model on its row less the least over the candidates; ≥ 0): the part
	// of the decode pod's load the prefill pod's row cannot know. The
	// first step the prefill part already holds is the one of the decode
	// pods routers chose, which is the lightest they saw.
	DecodeLoadMs float64

	// TTFT is the option's time to first token: for a pair the sum of its
	// parts, PrefillPart + Transfer + DecodeLoadMs, or without a transfer
	// model SplitPart + PrefillLoadMs + DecodeLoadMs, bounds included (the
	// bounds of the first two add, which is exact when their errors move
	// together and wider than needed when they are independent; the
	// decode load shifts both); for NoSplit the TTFT model on the decode
	// pod's row. TPOT is the TPOT model on the decode pod's row either way.
	TTFT, TPOT Estimate

	// Headroom against the request's SLOs, SLO − prediction, in ms; 0
	// when that SLO was not given. Negative: the SLO is predicted missed.
	TTFTHeadroomMs, TPOTHeadroomMs float64

	// Extrapolated is set when the row the option's TTFT rests on (the
	// prefill pod's for a pair, the decode pod's alone) lies above the
	// TTFT model's training maximum on a column latency grows with: a
	// load or a prompt the model has not seen, where it under-predicts.
	Extrapolated bool

	// Score is what options are ranked by, smaller first, TTFT then
	// breaking ties: TTFT.Ms without SLOs; with them, the shortfall of the
	// smallest relative headroom (0 for an option meeting every SLO).
	Score float64
	// Rank is the option's place in one order over every pair and every
	// no-split option of the request, 0 the best; options equal in Score,
	// TTFT and TPOT share a rank.
	Rank int
}

// Split reports whether the option splits the request.
func (o *PairOption) Split() bool { return o.Prefill != NoSplit }

// PairRanking says what options were ranked by.
type PairRanking string

const (
	RankByTTFT        PairRanking = "ttft"         // predicted TTFT, smaller first
	RankBySLOHeadroom PairRanking = "slo_headroom" // relative headroom against the SLOs, larger first
)

// PairsRanking is the answer of POST /predict/pairs before encoding.
type PairsRanking struct {
	RankedBy PairRanking
	// Pairs are the split pairs the models could predict, best first, at
	// most PairsRequest.K of them.
	Pairs []PairOption
	// NoSplit are the decode pods alone, best first, at most K.
	NoSplit []PairOption
	// Best is the better of Pairs[0] and NoSplit[0]; a tie goes to not
	// splitting, which moves no KV cache.
	Best PairOption
	// TotalPairs is the number of pairs considered, all but a pod named in
	// both lists paired with itself (its no-split option); UnknownPairs of them
	// were left out because the transfer model has no estimate for their
	// link class, or there is no transfer model (TransferModel false).
	TotalPairs, UnknownPairs int
	// UnknownLinks lists the link classes of those pairs, nearest first.
	UnknownLinks  []features.LinkClass
	TransferModel bool
	// SplitTTFTModel is set when the pairs were predicted by the split-TTFT
	// law (PairOption.SplitPart): the bundle has one and no transfer model.
	SplitTTFTModel bool

	// Every option, in candidate order, each with its Rank, for the matrix
	// answer: EveryNoSplit[j] is decode candidate j alone; EveryPair the
	// pairs predicted, and PairAt[j*len(Prefill)+i] the index in EveryPair
	// of pair (prefill i, decode j), or -1 when it has no estimate.
	EveryPair, EveryNoSplit []PairOption
	PairAt                  []int32
	// PrefillExtrapolated says, per prefill candidate, whether its pairs
	// are extrapolated (PairOption.Extrapolated).
	PrefillExtrapolated []bool
}

// Fields of a candidate that belong to the request; the rest of a row's
// fields belong to the pod.
var (
	pairRequestFields   = setOf(fInputTokens, fGenerated, fEncoderInput)
	candidateFields     = setOf(fKVCache, fWaiting, fRunning, fPrefixScore, fPodType, fPrefillInFlight, fDecodeInFlight, fEncoderMatched)
	requiredInCandidate = requiredInRow &^ pairRequestFields
)

// DecodePairsRequest decodes POST /predict/pairs with the default limits;
// see Decoder.DecodePairsRequest.
func DecodePairsRequest(body []byte, maxCandidates int) (PairsRequest, []FieldError) {
	return Decoder{}.DecodePairsRequest(body, maxCandidates)
}

// DecodePairsRequest decodes POST /predict/pairs: the request's fields at
// the top level, and the lists prefill and decode of 1 to maxCandidates
// candidates each (maxCandidates <= 0: DefaultMaxPairCandidates). A
// candidate has the pod fields of a /predict/bulk/strict row, its pod name
// and its topology; it may repeat the request's fields (a router can send
// the rows it builds for /predict/bulk/strict) but they must agree with
// the top level. Any error makes the whole request invalid; errs then
// lists at most Limits.MaxErrors of them, with paths such as
// prefill[3].topology.zone.
func (dec Decoder) DecodePairsRequest(body []byte, maxCandidates int) (PairsRequest, []FieldError) {
	if maxCandidates <= 0 {
		maxCandidates = DefaultMaxPairCandidates
	}
	d := dec.newEntryDecoder(body, false)
	// A ranking's labels live as long as its request. Labels are at most
	// a fifth of a body as routers write them (pods, nodes, racks, zones,
	// regions); one allocation holds them.
	var labels strings.Builder
	labels.Grow(len(body) / 5)
	d.labels = &labels
	s := &d.s
	s.SkipSpace()
	if s.Peek() != '{' {
		return PairsRequest{}, d.notAnObject(topLevel.loc(""))
	}
	pd := pairsDecoder{d: &d, maxCandidates: maxCandidates}
	pd.body()
	if !s.Failed() {
		s.Finish()
	}
	if s.Failed() {
		return PairsRequest{}, []FieldError{jsonInvalid(s.Err())}
	}
	if d.errCount > 0 {
		return PairsRequest{}, d.errs
	}
	return pd.req, nil
}

// pairsDecoder decodes one /predict/pairs body.
type pairsDecoder struct {
	d             *entryDecoder
	maxCandidates int
	req           PairsRequest
	top           features.Sample // the request's row fields
	seen          fieldSet        // row fields seen at the top level
	// repeated holds, per candidate that repeats a request field, its
	// values, checked against the top level once the whole body is read.
	repeated []repeatedFields
}

// repeatedFields are the request fields one candidate repeated.
type repeatedFields struct {
	list  string
	index int
	seen  fieldSet
	row   features.Row
}

// pairsKey is a top-level key of the body other than a row field.
type pairsKey uint8

const (
	keyPrefill pairsKey = iota
	keyDecode
	keyKVBytes
	keyTTFTSLO
	keyTPOTSLO
	keyK
	keyMatrix
	numPairsKeys
)

var pairsKeyNames = [numPairsKeys]string{"prefill", "decode", "kv_bytes_per_token", "ttft_slo_ms", "tpot_slo_ms", "k", "matrix"}

func lookupPairsKey(key []byte) (pairsKey, bool) {
	for k, name := range pairsKeyNames {
		if string(key) == name {
			return pairsKey(k), true
		}
	}
	return 0, false
}

func (pd *pairsDecoder) body() {
	d := pd.d
	s := &d.s
	start := s.Pos()
	var seenKeys [numPairsKeys]bool
	for more := s.Open(1); more && !s.Failed(); more = s.Next('}') {
		key, ok := s.ReadKey()
		if !ok {
			return
		}
		k, known := lookupPairsKey(key)
		if !known {
			if f, row := lookupField(key); row && pairRequestFields.has(f) {
				pd.rowField(f, topLevel, &pd.seen, &pd.top, 2)
			} else {
				s.SkipValue(2) // unknown, or a pod's field, which has no meaning for the request
			}
			continue
		}
		if seenKeys[k] {
			d.reportToken(problem{code: probDuplicateKey, reason: pairsKeyNames[k]}, []any{"body", pairsKeyNames[k]}, 2)
			continue
		}
		seenKeys[k] = true
		switch k {
		case keyPrefill:
			pd.req.Prefill = pd.list("prefill")
		case keyDecode:
			pd.req.Decode = pd.list("decode")
		case keyKVBytes:
			pd.req.KVBytesPerToken = pd.number(pairsKeyNames[k], MaxKVBytesPerToken)
		case keyTTFTSLO:
			pd.req.TTFTSLOMs = pd.number(pairsKeyNames[k], d.lim.MaxLatencyMs)
		case keyTPOTSLO:
			pd.req.TPOTSLOMs = pd.number(pairsKeyNames[k], d.lim.MaxLatencyMs)
		case keyK:
			pd.req.K = int(pd.count(pairsKeyNames[k], int64(pd.maxCandidates)*int64(pd.maxCandidates)))
		case keyMatrix:
			pd.req.Matrix = pd.flag(pairsKeyNames[k])
		}
	}
	if s.Failed() {
		return
	}
	pd.adoptRepeated()
	s.SkipSpace()
	whole := func() any { return s.Echo(start, s.Pos()) }
	if !pd.seen.has(fInputTokens) {
		d.add(problem{code: probMissing}.fieldError([]any{"body", fieldNames[fInputTokens]}, whole()))
	}
	for _, k := range []pairsKey{keyPrefill, keyDecode} {
		if !seenKeys[k] {
			d.add(problem{code: probMissing}.fieldError([]any{"body", pairsKeyNames[k]}, whole()))
		}
	}
	pd.req.InputTokenLength = pd.top.Row.InputTokenLength
	pd.req.NumTokensGenerated = pd.top.Row.NumTokensGenerated
	pd.req.EncoderInputSize = pd.top.Row.EncoderInputSize
}

// adoptRepeated checks the request fields candidates repeated: each must
// agree with the top level, or, where the top level leaves a field out,
// with the first candidate that gives it, which then is the request's.
func (pd *pairsDecoder) adoptRepeated() {
	for _, f := range [...]fieldID{fInputTokens, fGenerated, fEncoderInput} {
		from := "the request's " + fieldNames[f]
		for _, r := range pd.repeated {
			if !r.seen.has(f) {
				continue
			}
			got := *intField(f, &r.row)
			if !pd.seen.has(f) {
				pd.seen |= 1 << f
				*intField(f, &pd.top.Row) = got
				from = r.list + "[" + strconv.Itoa(r.index) + "]." + fieldNames[f]
				continue
			}
			if want := *intField(f, &pd.top.Row); got != want {
				pd.d.add(FieldError{Type: "value_error", Loc: []any{"body", r.list, r.index, fieldNames[f]},
					Msg:   "Value error, differs from " + from + " (" + strconv.FormatInt(want, 10) + ")",
					Input: got})
			}
		}
	}
}

// rowField decodes row field f at the read position into out, at loc base.
func (pd *pairsDecoder) rowField(f fieldID, base locBase, seen *fieldSet, out *features.Sample, depth int) {
	d := pd.d
	t, ok := d.s.ReadToken(depth)
	if !ok {
		return
	}
	if seen.has(f) {
		d.report(problem{code: probDuplicateKey, reason: fieldNames[f]}, base, fieldNames[f], t.Start, t.End)
		return
	}
	*seen |= 1 << f
	if code := d.set(f, &t, out); code != noProblem {
		d.report(d.problemFor(f, code, &t), base, fieldNames[f], t.Start, t.End)
	}
}

// number reads an optional number in [0, max]; null is 0.
func (pd *pairsDecoder) number(name string, max float64) float64 {
	d := pd.d
	t, ok := d.s.ReadToken(2)
	if !ok || t.Kind == jsonscan.Null {
		return 0
	}
	v, code := boundedFloat(&t, max)
	if code != noProblem {
		p := problem{code: code}
		switch code {
		case probGreaterEqual:
			p = ge(0, false)
		case probLessEqual:
			p = le(max, false)
		}
		d.add(p.fieldError([]any{"body", name}, d.s.Echo(t.Start, t.End)))
	}
	return v
}

// flag reads an optional boolean; null is false.
func (pd *pairsDecoder) flag(name string) bool {
	d := pd.d
	t, ok := d.s.ReadToken(2)
	if !ok || t.Kind == jsonscan.Null {
		return false
	}
	v, code := boolValue(&t)
	if code != noProblem {
		d.add(problem{code: code}.fieldError([]any{"body", name}, d.s.Echo(t.Start, t.End)))
	}
	return v
}

// count reads an optional integer in [0, max]; null is 0.
func (pd *pairsDecoder) count(name string, max int64) int64 {
	d := pd.d
	t, ok := d.s.ReadToken(2)
	if !ok || t.Kind == jsonscan.Null {
		return 0
	}
	v, code := countValue(&t, max)
	if code != noProblem {
		p := problem{code: code}
		switch code {
		case probGreaterEqual:
			p = ge(0, true)
		case probLessEqual:
			p = le(float64(max), true)
		}
		d.add(p.fieldError([]any{"body", name}, d.s.Echo(t.Start, t.End)))
		return 0
	}
	return v
}

// list decodes a candidate list at the read position.
func (pd *pairsDecoder) list(name string) []PairCandidate {
	d := pd.d
	s := &d.s
	s.SkipSpace()
	if s.Peek() != '[' {
		d.reportToken(problem{code: probListType}, []any{"body", name}, 2)
		return nil
	}
	// Room for a short list, the pods of one role in most pools; a longer
	// list grows.
	out := make([]PairCandidate, 0, min(pd.maxCandidates, shortList))
	count := 0
	var pods podIndex
	for more := s.Open(2); more; more = s.Next(']') {
		if count >= pd.maxCandidates || d.errCount >= d.errLimit {
			// Past the cap the request is invalid anyway: only check
			// syntax and count.
			if !s.SkipValue(3) {
				return nil
			}
			count++
			continue
		}
		c, ok := pd.candidate(name, count)
		if !ok {
			return nil
		}
		out = append(out, c)
		if first, dup := pods.add(out); dup {
			d.add(FieldError{Type: "value_error", Loc: []any{"body", name, count, "pod"},
				Msg:   "Value error, pod " + strconv.Quote(c.Pod) + " is also " + name + "[" + strconv.Itoa(first) + "]",
				Input: c.Pod})
		}
		count++
	}
	if s.Failed() {
		return nil
	}
	if count == 0 || count > pd.maxCandidates {
		d.add(listLengthError([]any{"body", name}, count, pd.maxCandidates))
	}
	return out
}

// podIndex finds the first candidate of a list named as another: a scan
// of the list while it is short, a map once it is long (a scan is
// quadratic in the list's length; a map costs allocations a short list
// need not pay).
type podIndex struct {
	first map[string]int // nil while the list is short
}

// shortList is the longest list podIndex scans, and the room a list's
// decoding starts with.
const shortList = 16

// add looks for the last of cs, a list's candidates so far, among the
// others: it returns the index of the first of them with its pod name,
// or false if there is none or the name is empty.
func (x *podIndex) add(cs []PairCandidate) (int, bool) {
	n := len(cs) - 1
	pod := cs[n].Pod
	if pod == "" {
		return 0, false
	}
	if x.first == nil && n < shortList {
		for i := range cs[:n] {
			if cs[i].Pod == pod {
				return i, true
			}
		}
		return 0, false
	}
	if x.first == nil {
		x.first = make(map[string]int, 2*n)
		for i := n - 1; i >= 0; i-- { // backwards, so that the first of a name stays
			if cs[i].Pod != "" {
				x.first[cs[i].Pod] = i
			}
		}
	}
	if i, ok := x.first[pod]; ok {
		return i, true
	}
	x.first[pod] = n
	return 0, false
}

// candidate decodes element index of list name; false on a syntax error.
func (pd *pairsDecoder) candidate(list string, index int) (PairCandidate, bool) {
	d := pd.d
	s := &d.s
	base := locBase{list: list, index: index}
	s.SkipSpace()
	if s.Peek() != '{' {
		t, ok := s.ReadToken(3)
		if ok {
			d.report(problem{code: probModelType}, base, "", t.Start, t.End)
		}
		return PairCandidate{}, ok
	}
	start := s.Pos()
	var c PairCandidate
	var sample features.Sample
	var seen fieldSet
	var seenPod, seenTopology, seenInFlight bool
	for more := s.Open(3); more; more = s.Next('}') {
		key, ok := s.ReadKey()
		if !ok {
			return c, false
		}
		if f, known := lookupField(key); known {
			if candidateFields.has(f) || pairRequestFields.has(f) {
				pd.rowField(f, base, &seen, &sample, 4)
			} else if !s.SkipValue(4) {
				return c, false
			}
			continue
		}
		switch string(key) {
		case "pod":
			if seenPod {
				d.reportToken(problem{code: probDuplicateKey, reason: "pod"}, base.loc("pod"), 4)
				continue
			}
			seenPod = true
			c.Pod = pd.podName(base)
		case "topology":
			if seenTopology {
				d.reportToken(problem{code: probDuplicateKey, reason: "topology"}, base.loc("topology"), 4)
				continue
			}
			seenTopology = true
			c.Topology = pd.topology(base)
		case "kv_transfers_in_flight":
			if seenInFlight {
				d.reportToken(problem{code: probDuplicateKey, reason: "kv_transfers_in_flight"}, base.loc("kv_transfers_in_flight"), 4)
				continue
			}
			seenInFlight = true
			t, ok := s.ReadToken(4)
			if !ok {
				return c, false
			}
			if t.Kind == jsonscan.Null {
				continue
			}
			v, code := countValue(&t, d.maxCount)
			if code != noProblem {
				d.report(d.problemFor(fWaiting, code, &t), base, "kv_transfers_in_flight", t.Start, t.End)
				continue
			}
			c.Concurrent = v + 1
		default:
			if !s.SkipValue(4) {
				return c, false
			}
		}
		if s.Failed() {
			return c, false
		}
	}
	if s.Failed() {
		return c, false
	}
	var whole any
	echo := func() any {
		if whole == nil {
			whole = s.Echo(start, s.Pos())
		}
		return whole
	}
	for f := range numFields {
		if requiredInCandidate.has(f) && !seen.has(f) {
			d.add(problem{code: probMissing}.fieldError(base.loc(fieldNames[f]), echo()))
		}
	}
	if !seenPod {
		d.add(problem{code: probMissing}.fieldError(base.loc("pod"), echo()))
	}
	if !seenTopology {
		d.add(problem{code: probMissing}.fieldError(base.loc("topology"), echo()))
	}
	if repeated := seen & pairRequestFields; repeated != 0 {
		pd.repeated = append(pd.repeated, repeatedFields{list: list, index: index, seen: repeated, row: sample.Row})
	}
	c.Row = sample.Row
	c.Row.InputTokenLength, c.Row.NumTokensGenerated, c.Row.EncoderInputSize = 0, 0, 0
	return c, true
}

// topology decodes a candidate's topology object by the rules of every
// topology (entryDecoder.topology): those of a sample's prefill_topology
// and decode_topology (§5.1).
func (pd *pairsDecoder) topology(base locBase) features.Topology {
	d := pd.d
	s := &d.s
	loc := func(label string) []any {
		l := base.loc("topology")
		if label != "" {
			l = append(l, label)
		}
		return l
	}
	var t features.Topology
	s.SkipSpace()
	if s.Peek() != '{' {
		d.reportToken(problem{code: probModelType}, loc(""), 4)
		return t
	}
	d.topology(4, loc, &t)
	return t
}

// podName reads a candidate's pod name: a string of 1 to MaxPodNameLen
// characters. Its loc is built only for an error.
func (pd *pairsDecoder) podName(base locBase) string {
	d := pd.d
	t, ok := d.s.ReadToken(4)
	if !ok {
		return ""
	}
	v, code := d.labelValue(&t, MaxPodNameLen)
	if code != noProblem {
		d.report(problem{code: code, bound: MaxPodNameLen}, base, "pod", t.Start, t.End)
	}
	return v
}
