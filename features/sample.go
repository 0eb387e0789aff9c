package features

import (
	"math"
	"time"
)

// MinTimestamp and MaxTimestamp bound a Sample's Timestamp: the times
// Unix nanoseconds can hold (1677-09-21 to 2262-04-11), which is how the
// store records them. The decoder refuses an entry outside them, so that
// one bad timestamp costs that entry alone rather than its whole batch.
var (
	MinTimestamp = time.Unix(0, math.MinInt64).UTC()
	MaxTimestamp = time.Unix(0, math.MaxInt64).UTC()
)

// Sample is one observed request: the row the router saw at scheduling time
// and the latencies it measured. A zero label means "not measured": a sample
// is a TTFT sample iff its TTFT label (Label) is positive, a TPOT sample iff
// ActualTPOTMs > 0, a KV-transfer sample iff Transfer.Ms > 0, and a
// split-TTFT sample iff it was served disaggregated (both placements
// given) and ActualTTFTMs > 0.
type Sample struct {
	Row          Row
	ActualTTFTMs float64
	ActualTPOTMs float64
	Timestamp    time.Time // observation time, UTC
	// Stamped says Timestamp is when the sample arrived, given by the
	// service because its client sent none: not part of what the client
	// reported, so the same entry sent again is the same sample, not a
	// second observation (the store counts it once).
	Stamped bool

	// The predictions the router acted on, when it says; 0 when absent.
	PredictedTTFTMs float64
	PredictedTPOTMs float64

	// Transfer is the request's measured KV transfer when it was served
	// disaggregated; nil otherwise.
	Transfer *Transfer
}

// Label returns the sample's label for a target, and whether it has one:
// for KVTransfer, the measured transfer time; for SplitTTFT, the whole
// TTFT of a request served disaggregated, transfer included, measured or
// not.
//
// The TTFT label of a sample with a measured transfer is its TTFT minus the
// transfer: the TTFT of a disaggregated request is prefill on P, transfer
// P→D and the first decode step on D, and the transfer is the transfer
// model's to learn. Left in, it would be averaged into the per-pod TTFT
// model, which cannot tell a same-rack pair from a cross-zone one. The wire
// refuses a transfer as long as the TTFT it is part of; a stored sample
// where it is not shorter has no TTFT label.
func (s *Sample) Label(t Target) (float64, bool) {
	var v float64
	switch t {
	case TTFT:
		v = s.ActualTTFTMs
		if s.Transfer != nil && s.Transfer.Ms > 0 && v > 0 {
			v -= s.Transfer.Ms
		}
	case TPOT:
		v = s.ActualTPOTMs
	case KVTransfer:
		if s.Transfer != nil {
			v = s.Transfer.Ms
		}
	case SplitTTFT:
		if s.Transfer.Split() {
			v = s.ActualTTFTMs
		}
	}
	return v, v > 0
}

// Predicted returns the served prediction for a target, and whether the
// router reported one. Samples carry no served transfer prediction.
func (s *Sample) Predicted(t Target) (float64, bool) {
	var v float64
	switch t {
	case TTFT:
		v = s.PredictedTTFTMs
	case TPOT:
		v = s.PredictedTPOTMs
	}
	return v, v > 0
}

// Transfer is the measured KV-cache transfer of a disaggregated (P/D)
// request: the prefill pod ran the prompt, then its KV cache moved to the
// decode pod. Wire names are in docs/PROTOCOL.md.
type Transfer struct {
	Ms float64 // actual_kv_transfer_ms; > 0 when measured
	// Tokens is kv_transfer_tokens: the prompt tokens whose KV moved, the
	// prompt minus what the decode pod already held in its prefix cache.
	Tokens int64
	// BytesPerToken is kv_bytes_per_token (model-dependent); 0 when the
	// sample does not say, and the pool's setting applies.
	BytesPerToken float64
	PrefillPod    string // prefill_pod
	DecodePod     string // decode_pod
	Prefill       Topology
	Decode        Topology
	// Concurrent is the number of transfers on the same path when this one
	// started, itself included (concurrent_transfers); 0 when unknown.
	Concurrent int64
}

// Split reports whether t is a disaggregated request's: both placements
// given (a node each; the wire requires one for any topology given). A nil
// t is not.
func (t *Transfer) Split() bool { return t != nil && t.Prefill.Node != "" && t.Decode.Node != "" }

// Class is the link class the transfer took.
func (t *Transfer) Class() LinkClass { return ClassOf(t.Prefill, t.Decode) }
