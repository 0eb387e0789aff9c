package wire

import (
	"math"
	"unicode/utf8"

	"github.com/headroomhq/headroom/internal/jsonscan"
)

// DecodeLimits are the bounds the decoders enforce beyond the reference's
// schema. A zero field takes its default, so the zero DecodeLimits is
// DefaultDecodeLimits().
type DecodeLimits struct {
	// MaxPredictCount is the ceiling on every integer field of a prediction
	// row (token counts, queue lengths, encoder sizes). Default 10^9.
	MaxPredictCount int64
	// MaxSampleCount is the same ceiling for training entries, lower
	// because a stored absurd value poisons every later model. Default 10^8.
	MaxSampleCount int64
	// MaxLatencyMs is the ceiling on actual_ttft_ms and actual_tpot_ms.
	// Default one hour.
	MaxLatencyMs float64
	// MaxDepth bounds JSON nesting, so that unknown fields cannot make the
	// decoder recurse without limit. Default 64.
	MaxDepth int
	// MaxErrors bounds the errors reported for one request (and, for
	// training bodies, the rejections that carry their full error list).
	// Default 100.
	MaxErrors int
}

// DefaultDecodeLimits returns the limits used where none are configured.
func DefaultDecodeLimits() DecodeLimits {
	return DecodeLimits{
		MaxPredictCount: 1_000_000_000,
		MaxSampleCount:  100_000_000,
		MaxLatencyMs:    3_600_000,
		MaxDepth:        64,
		MaxErrors:       100,
	}
}

func (l DecodeLimits) withDefaults() DecodeLimits {
	d := DefaultDecodeLimits()
	if l.MaxPredictCount <= 0 {
		l.MaxPredictCount = d.MaxPredictCount
	}
	if l.MaxSampleCount <= 0 {
		l.MaxSampleCount = d.MaxSampleCount
	}
	if !(l.MaxLatencyMs > 0) || math.IsInf(l.MaxLatencyMs, 0) {
		l.MaxLatencyMs = d.MaxLatencyMs
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = d.MaxDepth
	}
	if l.MaxErrors <= 0 {
		l.MaxErrors = d.MaxErrors
	}
	return l
}

// fieldID names a field of a prediction row or training entry.
type fieldID uint8

const (
	fKVCache fieldID = iota
	fInputTokens
	fWaiting
	fRunning
	fGenerated
	fPrefixScore
	fPodType
	fPrefillInFlight
	fDecodeInFlight
	fEncoderInput
	fEncoderMatched
	// Fields after this point exist only in training entries; in a
	// prediction row they are unknown fields and ignored.
	fActualTTFT
	fActualTPOT
	fTimestamp
	fPredictedTTFT
	fPredictedTPOT
	// The measured KV transfer of a disaggregated request
	// (features.Transfer; docs/PROTOCOL.md §5.1).
	fKVTransferMs
	fKVTransferTokens
	fKVBytesPerToken
	fPrefillPod
	fDecodePod
	fPrefillTopology
	fDecodeTopology
	fConcurrentTransfers
	numFields
)

const firstTrainingField = fActualTTFT

var fieldNames = [numFields]string{
	fKVCache:         "kv_cache_percentage",
	fInputTokens:     "input_token_length",
	fWaiting:         "num_request_waiting",
	fRunning:         "num_request_running",
	fGenerated:       "num_tokens_generated",
	fPrefixScore:     "prefix_cache_score",
	fPodType:         "pod_type",
	fPrefillInFlight: "prefill_tokens_in_flight",
	fDecodeInFlight:  "decode_tokens_in_flight",
	fEncoderInput:    "encoder_input_size",
	fEncoderMatched:  "encoder_matched_size",
	fActualTTFT:      "actual_ttft_ms",
	fActualTPOT:      "actual_tpot_ms",
	fTimestamp:       "timestamp",
	fPredictedTTFT:   "predicted_ttft_ms",
	fPredictedTPOT:   "predicted_tpot_ms",

	fKVTransferMs:        "actual_kv_transfer_ms",
	fKVTransferTokens:    "kv_transfer_tokens",
	fKVBytesPerToken:     "kv_bytes_per_token",
	fPrefillPod:          "prefill_pod",
	fDecodePod:           "decode_pod",
	fPrefillTopology:     "prefill_topology",
	fDecodeTopology:      "decode_topology",
	fConcurrentTransfers: "concurrent_transfers",
}

// fieldKind is how a field's value is read and bounded.
type fieldKind uint8

const (
	kindCount     fieldKind = iota // integer in [0, ceiling]
	kindFraction                   // number in [0, 1]
	kindLatency                    // milliseconds in [0, MaxLatencyMs]
	kindPredicted                  // milliseconds, >= 0
	kindBytes                      // bytes, in [0, MaxKVBytesPerToken]
	kindPodType                    // string or null
	kindTimestamp                  // RFC 3339 string
	kindPodName                    // string of at most MaxPodNameLen characters, or null
	kindTopology                   // {"node", "rack", "zone", "region"} or null
)

// isNumeric reports whether values of the kind are numbers.
func (k fieldKind) isNumeric() bool { return k <= kindBytes }

var fieldKinds = [numFields]fieldKind{
	fKVCache:         kindFraction,
	fInputTokens:     kindCount,
	fWaiting:         kindCount,
	fRunning:         kindCount,
	fGenerated:       kindCount,
	fPrefixScore:     kindFraction,
	fPodType:         kindPodType,
	fPrefillInFlight: kindCount,
	fDecodeInFlight:  kindCount,
	fEncoderInput:    kindCount,
	fEncoderMatched:  kindCount,
	fActualTTFT:      kindLatency,
	fActualTPOT:      kindLatency,
	fTimestamp:       kindTimestamp,
	fPredictedTTFT:   kindPredicted,
	fPredictedTPOT:   kindPredicted,

	fKVTransferMs:        kindLatency,
	fKVTransferTokens:    kindCount,
	fKVBytesPerToken:     kindBytes,
	fPrefillPod:          kindPodName,
	fDecodePod:           kindPodName,
	fPrefillTopology:     kindTopology,
	fDecodeTopology:      kindTopology,
	fConcurrentTransfers: kindCount,
}

// lookupField matches a key exactly (pydantic field names are case
// sensitive). It picks the one candidate by length and a distinguishing
// byte, then compares once: on the hot path a key costs one comparison.
func lookupField(key []byte) (fieldID, bool) {
	var f fieldID
	switch len(key) {
	case 8:
		f = fPodType
	case 9:
		f = fTimestamp
	case 10:
		f = fDecodePod
	case 11:
		f = fPrefillPod
	case 15:
		f = fDecodeTopology
	case 16:
		f = fPrefillTopology
	case 21:
		f = fKVTransferMs
	case 14: // actual_ttft_ms, actual_tpot_ms
		f = fActualTTFT
		if key[8] == 'p' {
			f = fActualTPOT
		}
	case 17: // predicted_ttft_ms, predicted_tpot_ms
		f = fPredictedTTFT
		if key[11] == 'p' {
			f = fPredictedTPOT
		}
	case 18: // input_token_length, prefix_cache_score, encoder_input_size, kv_transfer_tokens, kv_bytes_per_token
		switch key[0] {
		case 'i':
			f = fInputTokens
		case 'p':
			f = fPrefixScore
		case 'k':
			f = fKVTransferTokens
			if key[3] == 'b' {
				f = fKVBytesPerToken
			}
		default:
			f = fEncoderInput
		}
	case 19: // kv_cache_percentage, num_request_waiting, num_request_running
		switch {
		case key[0] == 'k':
			f = fKVCache
		case key[12] == 'w':
			f = fWaiting
		default:
			f = fRunning
		}
	case 20: // num_tokens_generated, encoder_matched_size, concurrent_transfers
		switch key[0] {
		case 'e':
			f = fEncoderMatched
		case 'c':
			f = fConcurrentTransfers
		default:
			f = fGenerated
		}
	case 23:
		f = fDecodeInFlight
	case 24:
		f = fPrefillInFlight
	default:
		return 0, false
	}
	return f, string(key) == fieldNames[f]
}

// fieldSet is a set of fieldIDs.
type fieldSet uint32

func (s fieldSet) has(f fieldID) bool { return s&(1<<f) != 0 }

func setOf(fs ...fieldID) fieldSet {
	var s fieldSet
	for _, f := range fs {
		s |= 1 << f
	}
	return s
}

// Required fields (docs/PROTOCOL.md §3 and §5.1). Every other field is optional, and
// an optional field given as null counts as absent: pydantic would reject
// null for an optional number, but an explicit "no value" meaning the
// default is what a client writing null intends.
var (
	requiredInRow   = setOf(fKVCache, fInputTokens, fWaiting, fRunning, fGenerated, fPrefixScore)
	requiredInEntry = requiredInRow | setOf(fActualTTFT, fActualTPOT)
)

// The conversions below return a problemCode, not a problem, to keep the
// valid path cheap; the bound or reason an error message shows is worked out
// from the field only when an error is reported (entryDecoder.problemFor).

// countValue converts a token for an integer field: JSON integers,
// integral floats (200.0, 2e2) and numeric strings, in [0, max].
// A negative integer comes back with probGreaterEqual so that the caller
// may clamp it instead.
func countValue(t *jsonscan.Token, max int64) (int64, problemCode) {
	var v int64
	var st jsonscan.IntStatus
	switch t.Kind {
	case jsonscan.Num:
		v, st = t.Num.Int()
		if st == jsonscan.IntFractional {
			return 0, probIntFromFloat
		}
	case jsonscan.String:
		n, _, kind := jsonscan.ParseNumericString(t.Text)
		switch kind {
		case jsonscan.NotNumeric:
			return 0, probIntParsing
		case jsonscan.NumericNonFinite:
			return 0, probFiniteNumber
		}
		v, st = n.Int()
		if st == jsonscan.IntFractional {
			// pydantic: a string must spell an integer.
			return 0, probIntParsing
		}
	case jsonscan.NonFinite:
		return 0, probFiniteNumber
	default:
		return 0, probIntType
	}
	switch {
	case st == jsonscan.IntBelowRange:
		return math.MinInt64, probGreaterEqual
	case st == jsonscan.IntAboveRange || v > max:
		return 0, probLessEqual
	case v < 0:
		return v, probGreaterEqual
	}
	return v, noProblem
}

// floatValue converts a token for a number field: JSON numbers, integer
// literals and numeric strings, finite only. Bounds are the caller's.
func floatValue(t *jsonscan.Token) (float64, problemCode) {
	switch t.Kind {
	case jsonscan.Num:
		if f, ok := t.Num.Float(t.Text); ok {
			return f, noProblem
		}
		return 0, probFiniteNumber
	case jsonscan.String:
		n, lit, kind := jsonscan.ParseNumericString(t.Text)
		switch kind {
		case jsonscan.NotNumeric:
			return 0, probFloatParsing
		case jsonscan.NumericNonFinite:
			return 0, probFiniteNumber
		}
		if f, ok := n.Float(lit); ok {
			return f, noProblem
		}
		return 0, probFiniteNumber
	case jsonscan.NonFinite:
		return 0, probFiniteNumber
	}
	return 0, probFloatType
}

// boundedFloat converts a number that must lie in [0, max].
func boundedFloat(t *jsonscan.Token, max float64) (float64, problemCode) {
	f, code := floatValue(t)
	switch {
	case code != noProblem:
		return 0, code
	case f < 0:
		return 0, probGreaterEqual
	case f > max:
		return 0, probLessEqual
	}
	return f, noProblem
}

// podLabels are the role labels routers send; returning these constants
// keeps the common rows free of string allocations.
var podLabels = [...]string{"", "prefill", "decode", "both", "monolithic"}

// MaxPodNameLen is the most characters prefill_pod and decode_pod may
// have: a Kubernetes object name (a DNS subdomain) is at most 253.
const MaxPodNameLen = 253

// MaxTopologyLabelLen is the most characters a topology label value may
// have, Kubernetes' limit on label values.
const MaxTopologyLabelLen = 63

// MaxKVBytesPerToken bounds kv_bytes_per_token: a few MB per token is
// already beyond the largest models' KV caches; a larger value is a unit
// error that would poison the transfer model.
const MaxKVBytesPerToken = 64 << 20

// MaxPodTypeLen is the most characters a pod_type may have. Routers send a
// role label (prefill, decode, both, monolithic); Kubernetes label values
// stop at 63 characters. Without a limit, 18 samples with a 10 MB pod_type
// made a 236 MB store and a 479 MB trainer (issue 11 row 7).
const MaxPodTypeLen = 64

// podTypeValue converts pod_type: a string of at most MaxPodTypeLen
// characters, or null for "". last is the
// previous label decoded in this request, reused when equal (a router sends
// the same few labels in every row).
func podTypeValue(t *jsonscan.Token, last string) (string, problemCode) {
	switch t.Kind {
	case jsonscan.Null:
		return "", noProblem
	case jsonscan.String:
		if tooLong(t.Text, MaxPodTypeLen) {
			return "", probStringTooLong
		}
		for _, l := range podLabels {
			if string(t.Text) == l {
				return l, noProblem
			}
		}
		if string(t.Text) == last {
			return last, noProblem
		}
		return string(t.Text), noProblem
	}
	return "", probStringType
}

// tooLong reports whether s has more than max characters.
func tooLong(s []byte, max int) bool {
	return len(s) > max && utf8.RuneCount(s) > max
}

// labelValue converts a pod name or topology label: a string of 1 to max
// characters, in d's label arena if it has one. null is handled by the
// caller.
func (d *entryDecoder) labelValue(t *jsonscan.Token, max int) (string, problemCode) {
	switch {
	case t.Kind != jsonscan.String:
		return "", probStringType
	case len(t.Text) == 0:
		return "", probStringTooShort
	case tooLong(t.Text, max):
		return "", probStringTooLong
	}
	if d.labels == nil {
		return string(t.Text), noProblem
	}
	start := d.labels.Len()
	d.labels.Write(t.Text)
	return d.labels.String()[start:], noProblem
}
