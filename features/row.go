// Package features turns a request row into the numeric vector a model reads.
//
// One function, Schema.Build, serves training and every prediction path: the
// reference predictor built features in four places and they drifted apart
// (token-in-flight fields zero-filled on some paths, num_tokens_generated 0 at
// training and 1 at serving). A Schema is a list of column names; the list
// travels inside every model bundle, so a bundle is always applied to the
// columns it was trained on.
package features

import "strings"

// Row is one prediction request for one candidate endpoint: the fields of
// llm-d's PredictionRequest after validation and defaulting.
type Row struct {
	KVCachePercentage     float64 // fraction of KV cache in use, [0, 1]
	InputTokenLength      int64   // prompt tokens
	NumRequestWaiting     int64   // requests queued on the server
	NumRequestRunning     int64   // requests running on the server
	NumTokensGenerated    int64   // output tokens so far; deliberately not a feature (see Columns)
	PrefixCacheScore      float64 // fraction of prompt blocks cached, [0, 1]
	PodType               string  // "", "prefill", "decode", or any other label
	PrefillTokensInFlight int64   // uncached prompt tokens in flight on the endpoint
	DecodeTokensInFlight  int64   // tokens in decode on the endpoint
	EncoderInputSize      int64   // multimodal items in the request
	EncoderMatchedSize    int64   // of those, already in the encoder cache
}

// Target is a latency the service predicts.
type Target int

const (
	TTFT Target = iota // time to first token
	TPOT               // time per output token
	// KVTransfer is the KV-cache transfer of a disaggregated request
	// (Sample.Transfer). It is not in Targets: it is predicted per pair of
	// pods by a bandwidth law (model.TransferModel), not per pod from a row,
	// and the loops over Targets are the per-pod models'.
	KVTransfer
)

// Targets lists every per-pod target in a fixed order, for loops.
var Targets = [...]Target{TTFT, TPOT}

func (t Target) String() string {
	switch t {
	case TTFT:
		return "ttft"
	case TPOT:
		return "tpot"
	case KVTransfer:
		return "kv_transfer"
	}
	return "unknown"
}

// ParseTarget is the inverse of Target.String.
func ParseTarget(s string) (Target, bool) {
	switch strings.ToLower(s) {
	case "ttft":
		return TTFT, true
	case "tpot":
		return TPOT, true
	case "kv_transfer":
		return KVTransfer, true
	}
	return 0, false
}

// Pod type codes. The reference mapped unknown role labels to a missing
// category at serve time and dropped null at train time; here every label
// has one explicit code, identical on both sides: an endpoint that is neither
// a prefill nor a decode pod is monolithic.
const (
	PodMonolithic = 0
	PodPrefill    = 1
	PodDecode     = 2
)

// PodTypeCode maps a role label to its code. Matching ignores case and
// surrounding space; "", "both", "monolithic" and unknown labels are monolithic.
func PodTypeCode(podType string) int {
	switch strings.ToLower(strings.TrimSpace(podType)) {
	case "prefill":
		return PodPrefill
	case "decode":
		return PodDecode
	}
	return PodMonolithic
}
