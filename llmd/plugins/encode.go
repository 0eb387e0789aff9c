package plugins

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// A pairs request is encoded on the scheduling path of every request: 32
// candidates are 9 KB, which encoding/json's reflection took 35 µs of CPU
// to write. appendPairsRequest writes the same bytes as json.Marshal of the
// pairsRequest (its field tags are the reference, and the tests compare
// the two) by appending.

// appendPairsRequest appends r as JSON to dst. It fails, as json.Marshal
// does, on a number that is not finite.
func appendPairsRequest(dst []byte, r *pairsRequest) ([]byte, error) {
	e := encoder{b: dst}
	e.b = append(e.b, `{"input_token_length":`...)
	e.b = strconv.AppendInt(e.b, r.InputTokenLength, 10)
	e.optionalFloat(`,"kv_bytes_per_token":`, r.KVBytesPerToken)
	e.optionalFloat(`,"ttft_slo_ms":`, r.TTFTSLOMs)
	e.optionalFloat(`,"tpot_slo_ms":`, r.TPOTSLOMs)
	e.b = append(e.b, `,"matrix":`...)
	e.b = strconv.AppendBool(e.b, r.Matrix)
	e.candidates(`,"prefill":`, r.Prefill)
	e.candidates(`,"decode":`, r.Decode)
	e.b = append(e.b, '}')
	if e.err != nil {
		return dst, fmt.Errorf("encode pairs request: %w", e.err)
	}
	return e.b, nil
}

// encoder appends JSON to b; err is the first value it could not encode.
type encoder struct {
	b   []byte
	err error
}

func (e *encoder) candidates(key string, cs []pairCandidate) {
	e.b = append(e.b, key...)
	if cs == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '[')
	for n := range cs {
		if n > 0 {
			e.b = append(e.b, ',')
		}
		e.candidate(&cs[n])
	}
	e.b = append(e.b, ']')
}

func (e *encoder) candidate(c *pairCandidate) {
	e.b = append(e.b, `{"pod":`...)
	e.str(c.Pod)
	e.b = append(e.b, `,"topology":{"node":`...)
	e.str(c.Topology.Node)
	e.optionalStr(`,"rack":`, c.Topology.Rack)
	e.optionalStr(`,"zone":`, c.Topology.Zone)
	e.optionalStr(`,"region":`, c.Topology.Region)
	e.b = append(e.b, `},"kv_cache_percentage":`...)
	e.float(c.KVCachePercentage)
	e.b = append(e.b, `,"num_request_waiting":`...)
	e.b = strconv.AppendInt(e.b, c.NumRequestWaiting, 10)
	e.b = append(e.b, `,"num_request_running":`...)
	e.b = strconv.AppendInt(e.b, c.NumRequestRunning, 10)
	e.b = append(e.b, `,"prefix_cache_score":`...)
	e.float(c.PrefixCacheScore)
	e.optionalStr(`,"pod_type":`, c.PodType)
	e.b = append(e.b, `,"prefill_tokens_in_flight":`...)
	e.b = strconv.AppendInt(e.b, c.PrefillTokensInFlight, 10)
	e.b = append(e.b, `,"kv_transfers_in_flight":`...)
	e.b = strconv.AppendInt(e.b, c.KVTransfersInFlight, 10)
	e.b = append(e.b, '}')
}

func (e *encoder) optionalStr(key, v string) {
	if v != "" {
		e.b = append(e.b, key...)
		e.str(v)
	}
}

func (e *encoder) optionalFloat(key string, v float64) {
	if v != 0 {
		e.b = append(e.b, key...)
		e.float(v)
	}
}

// str appends v quoted. Names and labels are plain ASCII, written as they
// are; any other string is encoding/json's, escapes and all.
func (e *encoder) str(v string) {
	for n := 0; n < len(v); n++ {
		if c := v[n]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			quoted, err := json.Marshal(v)
			if err != nil && e.err == nil {
				e.err = err
			}
			e.b = append(e.b, quoted...)
			return
		}
	}
	e.b = append(e.b, '"')
	e.b = append(e.b, v...)
	e.b = append(e.b, '"')
}

// float appends v as encoding/json writes a float64: the shortest decimal
// that reads back as v, in exponent form below 1e-6 and from 1e21.
func (e *encoder) float(v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		if e.err == nil {
			e.err = fmt.Errorf("unsupported value: %v", v)
		}
		e.b = append(e.b, '0')
		return
	}
	format := byte('f')
	if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	e.b = strconv.AppendFloat(e.b, v, format, -1, 64)
	if format == 'e' {
		// 1e-07 → 1e-7, as encoding/json cleans it.
		if n := len(e.b); n >= 4 && e.b[n-4] == 'e' && e.b[n-3] == '-' && e.b[n-2] == '0' {
			e.b[n-2] = e.b[n-1]
			e.b = e.b[:n-1]
		}
	}
}
