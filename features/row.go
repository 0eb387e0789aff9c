// Package features turns a request row into the numeric vector a model reads.
//
// One function, Schema.Build, serves training and every prediction path: the
// reference predictor built features in four places and they drifted apart
// (token-in-flight fields zero-filled on some paths, num_tokens_generated 0 at
// training and 1 at serving). A Schema is a list of column names; the list
// travels inside every model bundle, so a bundle is always applied to the
// columns it was trained on.
package features

import (
	"slices"
	"strings"
)

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
	// (Sample.Transfer). It is predicted per pair of pods by a bandwidth
	// law (model.TransferModel), not per pod from a Row.
	KVTransfer
	// SplitTTFT is the TTFT of a disaggregated request end to end, prefill
	// on P, transfer P→D and the first step on D, learned from the
	// request's TTFT and both placements (Sample.Label) whether or not the
	// transfer was timed: llm-d's sidecar does not time it. It is
	// predicted per pair of pods by the transfer model's law on the link
	// class and the tokens that move (model.TransferModel), not per pod.
	SplitTTFT
)

// Targets lists every target in a fixed order, and is the one list of
// them: each is one stream of the store, one model of a bundle, one
// lifecycle of the trainer, and every route, metric and dashboard panel
// that reports per target, and /flush, goes through this list. A new
// target is a new constant here, with its Label (sample.go).
var Targets = [...]Target{TTFT, TPOT, KVTransfer, SplitTTFT}

// NumTargets is len(Targets), for arrays indexed by Target.
const NumTargets = len(Targets)

// PodTargets are the Targets predicted per pod from a Row
// (Schema.Build, with DefaultColumns), in the order of Targets; the others
// are predicted per pair of pods.
var PodTargets = [...]Target{TTFT, TPOT}

// PerPod reports whether t is one of PodTargets.
func (t Target) PerPod() bool { return slices.Contains(PodTargets[:], t) }

func (t Target) String() string {
	switch t {
	case TTFT:
		return "ttft"
	case TPOT:
		return "tpot"
	case KVTransfer:
		return "kv_transfer"
	case SplitTTFT:
		return "split_ttft"
	}
	return "unknown"
}

// Title is the target's name in prose and on pages: "TTFT", "TPOT",
// "KV-transfer", "split TTFT".
func (t Target) Title() string {
	switch t {
	case KVTransfer:
		return "KV-transfer"
	case SplitTTFT:
		return "split TTFT"
	}
	return strings.ToUpper(t.String())
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
	case "split_ttft":
		return SplitTTFT, true
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
