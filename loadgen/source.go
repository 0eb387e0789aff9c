package loadgen

import (
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/trace"
)

// Entry is one row of load: what the router knows about an endpoint when it
// asks for a prediction and, for ingestion, the latencies it then measured.
// The JSON names are llm-d's (spec §2.4, §2.10); ReadTrace fills entries
// from a trace the router recorded.
type Entry struct {
	KVCachePercentage     float64 `json:"kv_cache_percentage"`
	InputTokenLength      int64   `json:"input_token_length"`
	NumRequestWaiting     int64   `json:"num_request_waiting"`
	NumRequestRunning     int64   `json:"num_request_running"`
	NumTokensGenerated    int64   `json:"num_tokens_generated"`
	PrefixCacheScore      float64 `json:"prefix_cache_score"`
	PodType               string  `json:"pod_type"`
	EncoderInputSize      int64   `json:"encoder_input_size"`
	EncoderMatchedSize    int64   `json:"encoder_matched_size"`
	PrefillTokensInFlight int64   `json:"prefill_tokens_in_flight"`
	DecodeTokensInFlight  int64   `json:"decode_tokens_in_flight"`
	ActualTTFTMs          float64 `json:"actual_ttft_ms"`
	ActualTPOTMs          float64 `json:"actual_tpot_ms"`
}

// Source yields the entry with a given index. Implementations are
// deterministic and safe for concurrent use, so a run is repeatable and
// workers can build bodies without coordination.
type Source interface {
	Entry(i int64) Entry
}

// Trace replays recorded entries in order, wrapping around at the end.
type Trace []Entry

// Entry returns t[i mod len(t)].
func (t Trace) Entry(i int64) Entry { return t[i%int64(len(t))] }

// ReadTrace reads an llm-d JSONL trace with package trace, which holds
// every line to its rules (a line without input_token_length, a negative
// or fractional count, a fraction outside [0, 1] or a negative latency
// fails the read with its line number), and keeps each sample's Entry
// fields. Predictions and timestamps are dropped.
func ReadTrace(r io.Reader) (Trace, error) {
	samples, err := trace.Read(r)
	if err != nil {
		return nil, err
	}
	return traceOf(samples), nil
}

// ReadTraceFile is ReadTrace on a file.
func ReadTraceFile(path string) (Trace, error) {
	samples, err := trace.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return traceOf(samples), nil
}

func traceOf(samples []features.Sample) Trace {
	t := make(Trace, len(samples))
	for i, s := range samples {
		t[i] = entryOf(s)
	}
	return t
}

// entryOf is the entry of a sample read from a trace.
func entryOf(s features.Sample) Entry {
	return Entry{
		KVCachePercentage:     s.Row.KVCachePercentage,
		InputTokenLength:      s.Row.InputTokenLength,
		NumRequestWaiting:     s.Row.NumRequestWaiting,
		NumRequestRunning:     s.Row.NumRequestRunning,
		NumTokensGenerated:    s.Row.NumTokensGenerated,
		PrefixCacheScore:      s.Row.PrefixCacheScore,
		PodType:               s.Row.PodType,
		EncoderInputSize:      s.Row.EncoderInputSize,
		EncoderMatchedSize:    s.Row.EncoderMatchedSize,
		PrefillTokensInFlight: s.Row.PrefillTokensInFlight,
		DecodeTokensInFlight:  s.Row.DecodeTokensInFlight,
		ActualTTFTMs:          s.ActualTTFTMs,
		ActualTPOTMs:          s.ActualTPOTMs,
	}
}

// Generator makes synthetic entries: a chat-like mix of prompt lengths on
// servers at every KV-cache and prefix-cache level, so ingestion spreads
// over all of the store's KV × prefix buckets. Labels follow a plausible
// latency shape with noise, with enough structure that trained models grow
// real trees. Entry i is a pure function of (Seed, i).
type Generator struct {
	Seed uint64
}

// Entry returns the i-th synthetic entry. Like the router's own load-test
// client, labels cycle: a TTFT-only entry, a TPOT-only entry, then one with
// both.
func (g Generator) Entry(i int64) Entry {
	var p rand.PCG
	p.Seed(g.Seed, uint64(i))
	u := func() float64 { return float64(p.Uint64()>>11) / (1 << 53) }
	kv := u()
	prefix := u()
	input := int64(math.Exp(math.Log(16) + u()*math.Log(8192.0/16)))
	running := 1 + int64(kv*48*u())
	var waiting int64
	if u() < kv {
		waiting = int64(u() * 12 * kv)
	}
	prefillTIF := int64(float64(running) * u() * 600)
	decodeTIF := running * int64(64+u()*900)
	effective := (1 - prefix) * float64(input)
	noise := func(sd float64) float64 {
		// Sum of three uniforms: roughly normal, cheap, bounded.
		return math.Exp(sd * (u() + u() + u() - 1.5) * 2)
	}
	// Interactions and thresholds no line over the features can follow
	// (queueing multiplies the prefill; a nearly full KV cache preempts;
	// a batch past 32 sequences takes a slower kernel), so trained models
	// need their trees, as on real servers.
	ttft := (18 + 0.045*effective + 0.004*float64(prefillTIF)) * (1 + 0.2*float64(waiting))
	tpot := (6 + 0.22*float64(running)) * (1 + 0.4*kv*kv)
	if kv > 0.85 {
		ttft *= 1.6
		tpot *= 1.3
	}
	if running > 32 {
		tpot *= 1.25
	}
	e := Entry{
		KVCachePercentage:     kv,
		InputTokenLength:      input,
		NumRequestWaiting:     waiting,
		NumRequestRunning:     running,
		PrefixCacheScore:      prefix,
		PrefillTokensInFlight: prefillTIF,
		DecodeTokensInFlight:  decodeTIF,
		ActualTTFTMs:          ttft * noise(0.15),
		ActualTPOTMs:          tpot * noise(0.08),
	}
	switch i % 3 {
	case 0:
		e.ActualTPOTMs = 0
	case 1:
		e.ActualTTFTMs = 0
	}
	return e
}

// AppendPredictBody appends {"requests":[...]} with entries first ..
// first+n-1 of src, written as the router's client writes rows (spec §2.5:
// its field order, no labels).
func AppendPredictBody(dst []byte, src Source, first int64, n int) []byte {
	dst = append(dst, `{"requests":[`...)
	for k := range n {
		if k > 0 {
			dst = append(dst, ',')
		}
		e := src.Entry(first + int64(k))
		dst = appendRow(dst, &e)
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

// AppendIngestBody appends {"entries":[...]} with entries first ..
// first+n-1 of src and their labels, for /add_training_data_bulk.
func AppendIngestBody(dst []byte, src Source, first int64, n int) []byte {
	dst = append(dst, `{"entries":[`...)
	for k := range n {
		if k > 0 {
			dst = append(dst, ',')
		}
		e := src.Entry(first + int64(k))
		dst = appendRow(dst, &e)
		dst = append(dst, `,"actual_ttft_ms":`...)
		dst = appendFloat(dst, e.ActualTTFTMs)
		dst = append(dst, `,"actual_tpot_ms":`...)
		dst = appendFloat(dst, e.ActualTPOTMs)
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

// appendRow writes an entry's row fields as an unterminated object.
func appendRow(dst []byte, e *Entry) []byte {
	dst = append(dst, `{"kv_cache_percentage":`...)
	dst = appendFloat(dst, e.KVCachePercentage)
	dst = append(dst, `,"input_token_length":`...)
	dst = strconv.AppendInt(dst, e.InputTokenLength, 10)
	dst = append(dst, `,"num_request_waiting":`...)
	dst = strconv.AppendInt(dst, e.NumRequestWaiting, 10)
	dst = append(dst, `,"num_request_running":`...)
	dst = strconv.AppendInt(dst, e.NumRequestRunning, 10)
	dst = append(dst, `,"num_tokens_generated":`...)
	dst = strconv.AppendInt(dst, e.NumTokensGenerated, 10)
	dst = append(dst, `,"prefix_cache_score":`...)
	dst = appendFloat(dst, e.PrefixCacheScore)
	if e.PodType != "" {
		dst = append(dst, `,"pod_type":`...)
		q, _ := json.Marshal(e.PodType) // a string always marshals
		dst = append(dst, q...)
	}
	dst = append(dst, `,"encoder_input_size":`...)
	dst = strconv.AppendInt(dst, e.EncoderInputSize, 10)
	dst = append(dst, `,"encoder_matched_size":`...)
	dst = strconv.AppendInt(dst, e.EncoderMatchedSize, 10)
	dst = append(dst, `,"prefill_tokens_in_flight":`...)
	dst = strconv.AppendInt(dst, e.PrefillTokensInFlight, 10)
	dst = append(dst, `,"decode_tokens_in_flight":`...)
	return strconv.AppendInt(dst, e.DecodeTokensInFlight, 10)
}

func appendFloat(dst []byte, v float64) []byte {
	return strconv.AppendFloat(dst, v, 'g', -1, 64)
}
