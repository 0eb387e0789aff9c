package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/headroomhq/headroom/features"
)

// features.Sample record format, version 1:
//
//	byte 0   format version (1)
//	byte 1   presence bits, 1 = present: 0 KVCachePercentage, 1 PrefixCacheScore,
//	         2 ActualTTFTMs, 3 ActualTPOTMs, 4 PredictedTTFTMs, 5 PredictedTPOTMs,
//	         6 Timestamp; bit 7 is 0
//	         each present float, in bit order: 8 bytes, IEEE-754 bits, big-endian
//	         zig-zag varints: InputTokenLength, NumRequestWaiting, NumRequestRunning,
//	         NumTokensGenerated, PrefillTokensInFlight, DecodeTokensInFlight,
//	         EncoderInputSize, EncoderMatchedSize
//	         if bit 6: zig-zag varint Timestamp.UnixNano()
//	         uvarint length of Row.PodType, then its bytes
//
// A float is present iff its bit pattern is non-zero, so +0 costs nothing and
// every value, -0 included, round-trips exactly. Every sample has exactly one
// encoding; the holdout hash relies on that.
const sampleFormat = 1

const (
	numFloats    = 6
	bitTimestamp = 1 << 6
	knownBits    = 1<<numFloats - 1 | bitTimestamp
)

// Unix nanoseconds cover 1678-2262; outside that UnixNano is undefined.
var minTime, maxTime = features.MinTimestamp, features.MaxTimestamp

var (
	errTruncated = errors.New("truncated record")
	errMalformed = errors.New("malformed record")
)

// sampleFloats lists the float fields of s in record order.
func sampleFloats(s *features.Sample) [numFloats]float64 {
	return [numFloats]float64{
		s.Row.KVCachePercentage, s.Row.PrefixCacheScore,
		s.ActualTTFTMs, s.ActualTPOTMs, s.PredictedTTFTMs, s.PredictedTPOTMs,
	}
}

var floatNames = [numFloats]string{
	"kv_cache_percentage", "prefix_cache_score",
	"actual_ttft_ms", "actual_tpot_ms", "predicted_ttft_ms", "predicted_tpot_ms",
}

// sampleInts lists the integer fields of s in record order.
func sampleInts(s *features.Sample) [8]int64 {
	r := &s.Row
	return [8]int64{
		r.InputTokenLength, r.NumRequestWaiting, r.NumRequestRunning, r.NumTokensGenerated,
		r.PrefillTokensInFlight, r.DecodeTokensInFlight, r.EncoderInputSize, r.EncoderMatchedSize,
	}
}

// appendSample appends the encoding of s to dst. It refuses non-finite
// numbers and timestamps outside 1678-2262, so nothing the store holds can
// poison a training run.
func appendSample(dst []byte, s *features.Sample) ([]byte, error) {
	fs := sampleFloats(s)
	var bits byte
	for i, f := range fs {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return dst, fmt.Errorf("%s is %v", floatNames[i], f)
		}
		if math.Float64bits(f) != 0 {
			bits |= 1 << i
		}
	}
	if !s.Timestamp.IsZero() {
		if s.Timestamp.Before(minTime) || s.Timestamp.After(maxTime) {
			return dst, fmt.Errorf("timestamp %s is outside 1678-2262", s.Timestamp.Format(time.RFC3339))
		}
		bits |= bitTimestamp
	}
	dst = append(dst, sampleFormat, bits)
	for i, f := range fs {
		if bits&(1<<i) != 0 {
			dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(f))
		}
	}
	for _, v := range sampleInts(s) {
		dst = binary.AppendVarint(dst, v)
	}
	if bits&bitTimestamp != 0 {
		dst = binary.AppendVarint(dst, s.Timestamp.UnixNano())
	}
	dst = binary.AppendUvarint(dst, uint64(len(s.Row.PodType)))
	return append(dst, s.Row.PodType...), nil
}

// decodeSample decodes one record into s, overwriting every field. It
// rejects unknown versions, truncation and trailing bytes.
func decodeSample(b []byte, s *features.Sample) error {
	if len(b) < 2 {
		return errTruncated
	}
	if b[0] != sampleFormat {
		return fmt.Errorf("record format version %d, this binary reads %d", b[0], sampleFormat)
	}
	bits := b[1]
	if bits&^knownBits != 0 {
		return fmt.Errorf("%w: unknown presence bits %#x", errMalformed, bits&^knownBits)
	}
	b = b[2:]
	var fs [numFloats]float64
	for i := range fs {
		if bits&(1<<i) == 0 {
			continue
		}
		if len(b) < 8 {
			return errTruncated
		}
		u := binary.BigEndian.Uint64(b)
		if u == 0 {
			return fmt.Errorf("%w: %s stored as zero", errMalformed, floatNames[i])
		}
		fs[i] = math.Float64frombits(u)
		b = b[8:]
	}
	var is [8]int64
	for i := range is {
		v, n := binary.Varint(b)
		if n <= 0 {
			return varintErr(n)
		}
		is[i] = v
		b = b[n:]
	}
	var ts time.Time
	if bits&bitTimestamp != 0 {
		v, n := binary.Varint(b)
		if n <= 0 {
			return varintErr(n)
		}
		ts = time.Unix(0, v).UTC()
		b = b[n:]
	}
	l, n := binary.Uvarint(b)
	if n <= 0 {
		return varintErr(n)
	}
	b = b[n:]
	if uint64(len(b)) < l {
		return errTruncated
	}
	if uint64(len(b)) > l {
		return fmt.Errorf("%w: %d trailing bytes", errMalformed, uint64(len(b))-l)
	}
	*s = features.Sample{
		ActualTTFTMs:    fs[2],
		ActualTPOTMs:    fs[3],
		PredictedTTFTMs: fs[4],
		PredictedTPOTMs: fs[5],
		Timestamp:       ts,
	}
	s.Row = rowFrom(fs[0], fs[1], is, internPodType(b))
	return nil
}

func rowFrom(kv, prefix float64, is [8]int64, podType string) (r features.Row) {
	r.KVCachePercentage = kv
	r.PrefixCacheScore = prefix
	r.InputTokenLength, r.NumRequestWaiting, r.NumRequestRunning, r.NumTokensGenerated = is[0], is[1], is[2], is[3]
	r.PrefillTokensInFlight, r.DecodeTokensInFlight, r.EncoderInputSize, r.EncoderMatchedSize = is[4], is[5], is[6], is[7]
	r.PodType = podType
	return r
}

func varintErr(n int) error {
	if n == 0 {
		return errTruncated
	}
	return fmt.Errorf("%w: varint overflows 64 bits", errMalformed)
}

// internPodType returns the common labels without allocating: a snapshot
// decodes hundreds of thousands of records.
func internPodType(b []byte) string {
	switch string(b) {
	case "":
		return ""
	case "prefill":
		return "prefill"
	case "decode":
		return "decode"
	}
	return string(b)
}
