package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/headroomhq/headroom/features"
)

// features.Sample record format, version 1:
//
//	byte 0   format version (1)
//	byte 1   presence bits, 1 = present: 0 KVCachePercentage, 1 PrefixCacheScore,
//	         2 ActualTTFTMs, 3 ActualTPOTMs, 4 PredictedTTFTMs, 5 PredictedTPOTMs,
//	         6 Timestamp, 7 Stamped (the timestamp is the arrival time the
//	         service gave an entry sent without one; only with bit 6)
//	         each present float, in bit order: 8 bytes, IEEE-754 bits, big-endian
//	         zig-zag varints: InputTokenLength, NumRequestWaiting, NumRequestRunning,
//	         NumTokensGenerated, PrefillTokensInFlight, DecodeTokensInFlight,
//	         EncoderInputSize, EncoderMatchedSize
//	         if bit 6: zig-zag varint Timestamp.UnixNano()
//	         uvarint length of Row.PodType, then its bytes
//
// A float is present iff its bit pattern is non-zero, so +0 costs nothing and
// every value, -0 included, round-trips exactly. Every sample has exactly one
// encoding; the holdout hash relies on that. A stamped timestamp is left
// out of the record's identity (identityOf): the same entry sent twice
// without a timestamp is one sample, whatever the times it arrived at.
// Bit 7 is set only by store format 4 on (db.go), which a binary of an
// older format refuses before reading a record.
//
// Version 2 is the record of a sample with a Transfer: version 1's fields
// with byte 0 set to 2, then
//
//	byte     presence bits: 0 Transfer.Ms, 1 Transfer.BytesPerToken; others 0
//	         each present float as above
//	         zig-zag varints: Tokens, Concurrent
//	         ten strings, each a uvarint length and its bytes: PrefillPod,
//	         DecodePod, Prefill.Node, .Rack, .Zone, .Region, Decode.Node,
//	         .Rack, .Zone, .Region
//
// A sample without a Transfer is written as version 1, byte for byte as
// before version 2 existed, so its holdout side does not move.
const (
	sampleFormat         = 1
	sampleFormatTransfer = 2
)

const (
	numTransferFloats    = 2
	knownTransferBits    = 1<<numTransferFloats - 1
	numTransferStrings   = 10
	maxTransferStringLen = 1 << 10 // the wire allows 253; a longer one is damage
)

var transferFloatNames = [numTransferFloats]string{"actual_kv_transfer_ms", "kv_bytes_per_token"}

func transferStrings(t *features.Transfer) [numTransferStrings]*string {
	return [numTransferStrings]*string{&t.PrefillPod, &t.DecodePod,
		&t.Prefill.Node, &t.Prefill.Rack, &t.Prefill.Zone, &t.Prefill.Region,
		&t.Decode.Node, &t.Decode.Rack, &t.Decode.Zone, &t.Decode.Region}
}

const (
	numFloats    = 6
	bitTimestamp = 1 << 6
	bitStamped   = 1 << 7
	knownBits    = 1<<numFloats - 1 | bitTimestamp | bitStamped
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
		if s.Stamped {
			bits |= bitStamped
		}
	} else if s.Stamped {
		return dst, errors.New("stamped without a timestamp")
	}
	version := byte(sampleFormat)
	if s.Transfer != nil {
		version = sampleFormatTransfer
	}
	dst = append(dst, version, bits)
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
	dst = append(dst, s.Row.PodType...)
	if s.Transfer != nil {
		return appendTransfer(dst, s.Transfer)
	}
	return dst, nil
}

func appendTransfer(dst []byte, t *features.Transfer) ([]byte, error) {
	fs := [numTransferFloats]float64{t.Ms, t.BytesPerToken}
	var bits byte
	for i, f := range fs {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return dst, fmt.Errorf("%s is %v", transferFloatNames[i], f)
		}
		if math.Float64bits(f) != 0 {
			bits |= 1 << i
		}
	}
	dst = append(dst, bits)
	for i, f := range fs {
		if bits&(1<<i) != 0 {
			dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(f))
		}
	}
	dst = binary.AppendVarint(dst, t.Tokens)
	dst = binary.AppendVarint(dst, t.Concurrent)
	for _, p := range transferStrings(t) {
		if len(*p) > maxTransferStringLen {
			return dst, fmt.Errorf("transfer label of %d bytes, over %d", len(*p), maxTransferStringLen)
		}
		dst = binary.AppendUvarint(dst, uint64(len(*p)))
		dst = append(dst, *p...)
	}
	return dst, nil
}

// decodeTransfer decodes a version 2 record's transfer part, which must
// end the record.
func decodeTransfer(b []byte) (*features.Transfer, error) {
	if len(b) < 1 {
		return nil, errTruncated
	}
	bits := b[0]
	if bits&^knownTransferBits != 0 {
		return nil, fmt.Errorf("%w: unknown transfer presence bits %#x", errMalformed, bits&^knownTransferBits)
	}
	b = b[1:]
	var fs [numTransferFloats]float64
	for i := range fs {
		if bits&(1<<i) == 0 {
			continue
		}
		if len(b) < 8 {
			return nil, errTruncated
		}
		u := binary.BigEndian.Uint64(b)
		if u == 0 {
			return nil, fmt.Errorf("%w: %s stored as zero", errMalformed, transferFloatNames[i])
		}
		if fs[i] = math.Float64frombits(u); math.IsNaN(fs[i]) || math.IsInf(fs[i], 0) {
			return nil, fmt.Errorf("%w: %s is %v", errMalformed, transferFloatNames[i], fs[i])
		}
		b = b[8:]
	}
	t := &features.Transfer{Ms: fs[0], BytesPerToken: fs[1]}
	for _, dst := range [...]*int64{&t.Tokens, &t.Concurrent} {
		v, n := binary.Varint(b)
		if n <= 0 {
			return nil, varintErr(n)
		}
		*dst = v
		b = b[n:]
	}
	for _, p := range transferStrings(t) {
		l, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, varintErr(n)
		}
		b = b[n:]
		if l > maxTransferStringLen {
			return nil, fmt.Errorf("%w: transfer label of %d bytes", errMalformed, l)
		}
		if uint64(len(b)) < l {
			return nil, errTruncated
		}
		*p = string(b[:l])
		b = b[l:]
	}
	if len(b) > 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errMalformed, len(b))
	}
	return t, nil
}

// decodeSample decodes one record into s, overwriting every field. It
// rejects unknown versions, truncation and trailing bytes.
func decodeSample(b []byte, s *features.Sample) error {
	if len(b) < 2 {
		return errTruncated
	}
	version := b[0]
	if version != sampleFormat && version != sampleFormatTransfer {
		return fmt.Errorf("record format version %d, this binary reads %d and %d", version, sampleFormat, sampleFormatTransfer)
	}
	bits := b[1]
	if bits&^knownBits != 0 {
		return fmt.Errorf("%w: unknown presence bits %#x", errMalformed, bits&^knownBits)
	}
	if bits&bitStamped != 0 && bits&bitTimestamp == 0 {
		return fmt.Errorf("%w: stamped without a timestamp", errMalformed)
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
	var transfer *features.Transfer
	if version == sampleFormatTransfer {
		var err error
		if transfer, err = decodeTransfer(b[l:]); err != nil {
			return err
		}
		b = b[:l]
	}
	if uint64(len(b)) > l {
		return fmt.Errorf("%w: %d trailing bytes", errMalformed, uint64(len(b))-l)
	}
	*s = features.Sample{
		Transfer:        transfer,
		ActualTTFTMs:    fs[2],
		ActualTPOTMs:    fs[3],
		PredictedTTFTMs: fs[4],
		PredictedTPOTMs: fs[5],
		Timestamp:       ts,
		Stamped:         bits&bitStamped != 0,
	}
	s.Row = rowFrom(fs[0], fs[1], is, internPodType(b))
	return nil
}

// stampedTime returns where the varint of a stamped timestamp lies in
// rec, a record decodeSample accepts: rec[from:to]. ok is false when rec
// has no stamped timestamp.
func stampedTime(rec []byte) (from, to int, ok bool) {
	if len(rec) < 2 || rec[1]&bitStamped == 0 {
		return 0, 0, false
	}
	from = 2 + 8*bits.OnesCount8(rec[1]&(1<<numFloats-1))
	for range 8 { // the integer fields
		if from > len(rec) {
			return 0, 0, false
		}
		_, n := binary.Varint(rec[from:])
		if n <= 0 {
			return 0, 0, false
		}
		from += n
	}
	if from > len(rec) {
		return 0, 0, false
	}
	_, n := binary.Varint(rec[from:])
	if n <= 0 {
		return 0, 0, false
	}
	return from, from + n, true
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
