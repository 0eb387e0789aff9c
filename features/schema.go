package features

import (
	"fmt"
	"math"
)

// column identifies one derivable feature. The numbering is internal: bundles
// name columns by their string, never by this number.
type column uint8

const (
	colIsQueued column = iota
	colKVCache
	colInputTokens
	colWaiting
	colRunning
	colPrefillInFlight
	colDecodeInFlight
	colEncoderInput
	colEncoderMatched
	colPrefixScore
	colEffectiveInput
	colPrefixBucket
	colPodType
	colEffectiveInputSq
	colPrefillWork
	colBatchLoad
	colEffectiveInputOver128
	colEffectiveInputOver256
	colEffectiveInputOver512
	colEffectiveInputOver1024
	colEffectiveInputOver2048
	colPrefillPerRequest
	colPrefillUpTo2048
	colPrefillUpTo8192
	colPrefillUpTo32768
	numColumns
)

// columnNames is the public name of every column, as written in bundles and
// shown in XGBoost tree dumps. Names that exist in the reference keep its
// spelling and meaning.
var columnNames = [numColumns]string{
	colIsQueued:         "is_queued",
	colKVCache:          "kv_cache_percentage",
	colInputTokens:      "input_token_length",
	colWaiting:          "num_request_waiting",
	colRunning:          "num_request_running",
	colPrefillInFlight:  "prefill_tokens_in_flight",
	colDecodeInFlight:   "decode_tokens_in_flight",
	colEncoderInput:     "encoder_input_size",
	colEncoderMatched:   "encoder_matched_size",
	colPrefixScore:      "prefix_cache_score",
	colEffectiveInput:   "effective_input_tokens",
	colPrefixBucket:     "prefill_score_bucket",
	colPodType:          "pod_type",
	colEffectiveInputSq: "effective_input_tokens_sq_k",
	colPrefillWork:      "prefill_work_tokens",
	colBatchLoad:        "batch_load",

	colEffectiveInputOver128:  "effective_input_tokens_over_128",
	colEffectiveInputOver256:  "effective_input_tokens_over_256",
	colEffectiveInputOver512:  "effective_input_tokens_over_512",
	colEffectiveInputOver1024: "effective_input_tokens_over_1024",
	colEffectiveInputOver2048: "effective_input_tokens_over_2048",

	colPrefillPerRequest: "prefill_tokens_per_request",
	colPrefillUpTo2048:   "prefill_tokens_in_flight_upto_2048",
	colPrefillUpTo8192:   "prefill_tokens_in_flight_upto_8192",
	colPrefillUpTo32768:  "prefill_tokens_in_flight_upto_32768",
}

// columnDirection is each column's physical prior: +1 when latency cannot
// fall as the column grows with the others held (more work or more load),
// -1 when it cannot rise (more of the prompt cached), 0 when there is no
// such prior (a category). The hinge columns are +1: past a knot the cost
// per token can only grow (a roofline, then attention), so a line over
// them stays convex and never turns down beyond the data. The capped prefill
// columns are +1 for the same reason: more prompt in flight never shortens
// a step. prefill_tokens_per_request is 0: it is the ratio of two other
// columns, so no other column can be held while it alone moves, and a pod
// with long prompts in flight among few requests is not slower than one
// with short prompts among many by any law.
var columnDirection = [numColumns]int8{
	colIsQueued:               1,
	colKVCache:                1,
	colInputTokens:            1,
	colWaiting:                1,
	colRunning:                1,
	colPrefillInFlight:        1,
	colDecodeInFlight:         1,
	colEncoderInput:           1,
	colEncoderMatched:         -1,
	colPrefixScore:            -1,
	colEffectiveInput:         1,
	colPrefixBucket:           -1,
	colPodType:                0,
	colEffectiveInputSq:       1,
	colPrefillWork:            1,
	colBatchLoad:              1,
	colEffectiveInputOver128:  1,
	colEffectiveInputOver256:  1,
	colEffectiveInputOver512:  1,
	colEffectiveInputOver1024: 1,
	colEffectiveInputOver2048: 1,
	colPrefillPerRequest:      0,
	colPrefillUpTo2048:        1,
	colPrefillUpTo8192:        1,
	colPrefillUpTo32768:       1,
}

// Schema is a compiled, ordered list of columns. The zero Schema has no
// columns. A Schema is immutable and safe for concurrent use.
type Schema struct {
	names []string
	cols  []column
}

// NewSchema compiles a column list. It fails on a name this binary does not
// know or on a repeated name, so a bundle from a newer trainer that uses a
// feature this predictor cannot build is refused instead of misapplied.
func NewSchema(names []string) (Schema, error) {
	s := Schema{names: make([]string, len(names)), cols: make([]column, len(names))}
	seen := make(map[string]bool, len(names))
	for i, name := range names {
		c, ok := lookupColumn(name)
		if !ok {
			return Schema{}, fmt.Errorf("feature schema: unknown column %q at position %d", name, i)
		}
		if seen[name] {
			return Schema{}, fmt.Errorf("feature schema: column %q appears twice", name)
		}
		seen[name] = true
		s.names[i] = name
		s.cols[i] = c
	}
	return s, nil
}

func lookupColumn(name string) (column, bool) {
	for c, n := range columnNames {
		if n == name {
			return column(c), true
		}
	}
	return 0, false
}

// MustSchema is NewSchema for lists fixed at compile time.
func MustSchema(names ...string) Schema {
	s, err := NewSchema(names)
	if err != nil {
		panic(err)
	}
	return s
}

// Names returns the column names in order. The caller must not modify them.
func (s Schema) Names() []string { return s.names }

// Len is the number of columns.
func (s Schema) Len() int { return len(s.cols) }

// Directions returns each column's physical prior, in order: +1 latency
// does not fall as the column grows, -1 it does not rise, 0 no prior.
// Models may use them as sign constraints.
func (s Schema) Directions() []int {
	d := make([]int, len(s.cols))
	for i, c := range s.cols {
		d[i] = int(columnDirection[c])
	}
	return d
}

// Direction is column i's physical prior, as in Directions, without
// allocating.
func (s Schema) Direction(i int) int { return int(columnDirection[s.cols[i]]) }

// Index returns the position of a column, or -1.
func (s Schema) Index(name string) int {
	for i, n := range s.names {
		if n == name {
			return i
		}
	}
	return -1
}

// Build writes the feature vector of row into dst, which it grows if needed,
// and returns it. It is the only place features are computed; training and
// every prediction path call it. It does not allocate when cap(dst) suffices.
func (s Schema) Build(row *Row, dst []float64) []float64 {
	if cap(dst) < len(s.cols) {
		dst = make([]float64, len(s.cols))
	}
	dst = dst[:len(s.cols)]
	for i, c := range s.cols {
		dst[i] = c.value(row)
	}
	return dst
}

func (c column) value(r *Row) float64 {
	switch c {
	case colIsQueued:
		if r.NumRequestWaiting > 0 {
			return 1
		}
		return 0
	case colKVCache:
		return r.KVCachePercentage
	case colInputTokens:
		return float64(r.InputTokenLength)
	case colWaiting:
		return float64(r.NumRequestWaiting)
	case colRunning:
		return float64(r.NumRequestRunning)
	case colPrefillInFlight:
		return float64(r.PrefillTokensInFlight)
	case colDecodeInFlight:
		return float64(r.DecodeTokensInFlight)
	case colEncoderInput:
		return float64(r.EncoderInputSize)
	case colEncoderMatched:
		return float64(r.EncoderMatchedSize)
	case colPrefixScore:
		return r.PrefixCacheScore
	case colEffectiveInput:
		return effectiveInput(r)
	case colPrefixBucket:
		return math.Min(math.Floor(clamp01(r.PrefixCacheScore)*4), 3)
	case colPodType:
		return float64(PodTypeCode(r.PodType))
	case colEffectiveInputSq:
		// Attention cost grows with the square of the uncached prompt; in
		// thousands of tokens squared so its coefficient is of ordinary size.
		e := effectiveInput(r) / 1000
		return e * e
	case colPrefillWork:
		// Prompt tokens the server must prefill before this request's first
		// token: what is already in flight plus this request's uncached part.
		return float64(r.PrefillTokensInFlight) + effectiveInput(r)
	case colBatchLoad:
		// Sequences competing for each engine step once this one joins.
		return float64(r.NumRequestRunning + r.NumRequestWaiting + 1)
	case colEffectiveInputOver128:
		return hinge(r, 128)
	case colEffectiveInputOver256:
		return hinge(r, 256)
	case colEffectiveInputOver512:
		return hinge(r, 512)
	case colEffectiveInputOver1024:
		return hinge(r, 1024)
	case colEffectiveInputOver2048:
		return hinge(r, 2048)
	case colPrefillPerRequest:
		// Prompt tokens still to prefill per request on the pod: whether
		// its batch is busy with prompts or with decodes. A loaded pod
		// with the same count running can be either.
		return float64(r.PrefillTokensInFlight) / float64(max(r.NumRequestRunning, 1))
	case colPrefillUpTo2048:
		return prefillUpTo(r, 2048)
	case colPrefillUpTo8192:
		return prefillUpTo(r, 8192)
	case colPrefillUpTo32768:
		return prefillUpTo(r, 32768)
	}
	panic(fmt.Sprintf("features: column %d has no definition", c))
}

// hinge is the uncached prompt beyond knot tokens. A prefill costs about
// the same for every prompt shorter than the GPU's roofline knee (reading
// the weights dominates) and grows linearly past it; a line over hinges at
// several knots can follow that bend wherever a GPU has it, and still
// extrapolates as a line past the last knot.
func hinge(r *Row, knot float64) float64 {
	return math.Max(0, effectiveInput(r)-knot)
}

// prefillUpTo is the prompt in flight, capped at budget tokens. An engine
// step prefills at most its token budget (vLLM's max_num_batched_tokens;
// 2,048, 8,192 and 32,768 are common settings), so the prefill that slows
// the decodes sharing a step grows with the prompt in flight up to the
// budget and no further. A line over the caps at several budgets can bend
// where the pod's budget is without being told it, as the prompt hinges
// bend at the roofline.
func prefillUpTo(r *Row, budget float64) float64 {
	return math.Min(float64(r.PrefillTokensInFlight), budget)
}

func effectiveInput(r *Row) float64 {
	return (1 - clamp01(r.PrefixCacheScore)) * float64(r.InputTokenLength)
}

func clamp01(x float64) float64 {
	return math.Max(0, math.Min(1, x))
}

// Default column lists per target. They start from the reference's columns
// (docs/PROTOCOL.md §8.1) with two deliberate changes: pod_type is an ordinary numeric
// code with an explicit mapping, and num_tokens_generated is left out,
// because the router predicts with 1 and trains with 0, so any split on it
// would be learned on one value and applied to another. TTFT adds the
// prefill work ahead of the request, the batch it joins and the prompt in
// flight per running request; TPOT adds the prompt in flight capped at
// common step budgets. The last two are what a heavily loaded pod's rows
// say that the reference's columns do not (docs/ACCURACY.md, Loaded pods).
//
// Two shapes were measured and left out (docs/ACCURACY.md): the squared
// prompt and the prompt hinges. In range the trees already follow the
// curve, so neither improved the model; out of range both made the line
// over-predict. On the shared trace, trained on prompts up to 512 tokens,
// prompts beyond 1,024 were predicted 1% high without them, 21% high with
// the hinges (which take the slope of the step near 256 tokens for the
// slope everywhere after) and 34% high with the squared prompt as well.
var (
	DefaultTTFTColumns = []string{
		"is_queued", "kv_cache_percentage", "input_token_length", "num_request_waiting", "num_request_running",
		"prefill_tokens_in_flight", "decode_tokens_in_flight", "encoder_matched_size", "encoder_input_size",
		"prefix_cache_score", "effective_input_tokens", "prefill_score_bucket", "pod_type",
		"prefill_work_tokens", "batch_load", "prefill_tokens_per_request",
	}
	DefaultTPOTColumns = []string{
		"is_queued", "kv_cache_percentage", "input_token_length", "num_request_waiting", "num_request_running",
		"prefill_tokens_in_flight", "decode_tokens_in_flight", "pod_type", "batch_load",
		"prefill_tokens_in_flight_upto_2048", "prefill_tokens_in_flight_upto_8192", "prefill_tokens_in_flight_upto_32768",
	}
)

// SplitTTFTSharedColumns are the split-TTFT law's shared terms
// (model.SharedTerms): the columns of the prefill pod's row its prefill
// grows with, the uncached prompt and the load ahead of it, fitted once
// over every link class so that each class's own terms hold only its
// transfer. Lines, because a term shared by classes of a few samples each
// must not bend where one class's samples happen to lie; the TTFT model
// ranks the prefill pods' loads (pairs.Rank).
var SplitTTFTSharedColumns = []string{
	"effective_input_tokens", "num_request_waiting", "num_request_running", "prefill_tokens_in_flight",
}

// DefaultColumns is a per-pod target's default feature columns
// (DefaultTTFTColumns, DefaultTPOTColumns); nil for a target not predicted
// per pod.
func DefaultColumns(t Target) []string {
	switch t {
	case TTFT:
		return DefaultTTFTColumns
	case TPOT:
		return DefaultTPOTColumns
	}
	return nil
}
