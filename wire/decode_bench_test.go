package wire

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

// routerRow is a prediction row as the router's client writes it: Go's
// encoding/json, the field order of docs/PROTOCOL.md §4.1, gauges with full float64
// precision, token counts of a chat workload.
type routerRow struct {
	KVCachePercentage     float64 `json:"kv_cache_percentage"`
	InputTokenLength      int64   `json:"input_token_length"`
	NumRequestWaiting     int64   `json:"num_request_waiting"`
	NumRequestRunning     int64   `json:"num_request_running"`
	NumTokensGenerated    int64   `json:"num_tokens_generated"`
	PrefixCacheScore      float64 `json:"prefix_cache_score"`
	PodType               string  `json:"pod_type,omitempty"`
	EncoderInputSize      int64   `json:"encoder_input_size"`
	EncoderMatchedSize    int64   `json:"encoder_matched_size"`
	PrefillTokensInFlight int64   `json:"prefill_tokens_in_flight"`
	DecodeTokensInFlight  int64   `json:"decode_tokens_in_flight"`
}

// routerEntry is a training entry as the router writes it (docs/PROTOCOL.md §5.1).
type routerEntry struct {
	KVCachePercentage     float64 `json:"kv_cache_percentage"`
	InputTokenLength      int64   `json:"input_token_length"`
	NumRequestWaiting     int64   `json:"num_request_waiting"`
	NumRequestRunning     int64   `json:"num_request_running"`
	NumTokensGenerated    int64   `json:"num_tokens_generated"`
	ActualTTFTMs          float64 `json:"actual_ttft_ms"`
	ActualTPOTMs          float64 `json:"actual_tpot_ms"`
	PrefixCacheScore      float64 `json:"prefix_cache_score"`
	PodType               string  `json:"pod_type,omitempty"`
	EncoderInputSize      int64   `json:"encoder_input_size"`
	EncoderMatchedSize    int64   `json:"encoder_matched_size"`
	PrefillTokensInFlight int64   `json:"prefill_tokens_in_flight"`
	DecodeTokensInFlight  int64   `json:"decode_tokens_in_flight"`
	Timestamp             string  `json:"timestamp"`
}

func benchRows(n int) []byte {
	r := rand.New(rand.NewPCG(1, uint64(n)))
	rows := make([]routerRow, n)
	for i := range rows {
		rows[i] = routerRow{
			KVCachePercentage: r.Float64() * 0.9, InputTokenLength: 1 + r.Int64N(4000),
			NumRequestWaiting: r.Int64N(8), NumRequestRunning: r.Int64N(64), NumTokensGenerated: 1,
			PrefixCacheScore: float64(r.IntN(64)) / 64, PrefillTokensInFlight: r.Int64N(20000),
		}
		if i%4 == 0 {
			rows[i].PodType = "decode"
		}
	}
	b, err := json.Marshal(struct {
		Requests []routerRow `json:"requests"`
	}{rows})
	if err != nil {
		panic(err)
	}
	return b
}

func benchEntries(n int) []byte {
	r := rand.New(rand.NewPCG(2, uint64(n)))
	entries := make([]routerEntry, n)
	t0 := time.Date(2026, 11, 29, 15, 42, 36, 709963272, time.UTC)
	for i := range entries {
		e := routerEntry{
			KVCachePercentage: r.Float64() * 0.9, InputTokenLength: 1 + r.Int64N(4000),
			NumRequestWaiting: r.Int64N(8), NumRequestRunning: r.Int64N(64),
			PrefixCacheScore: float64(r.IntN(64)) / 64, PrefillTokensInFlight: r.Int64N(20000),
			Timestamp: t0.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano),
		}
		if i%2 == 0 {
			e.ActualTTFTMs = float64(20 + r.IntN(2000))
		} else {
			e.ActualTPOTMs = float64(5 + r.IntN(60))
		}
		entries[i] = e
	}
	b, err := json.Marshal(struct {
		Entries []routerEntry `json:"entries"`
	}{entries})
	if err != nil {
		panic(err)
	}
	return b
}

func benchmarkBulk(b *testing.B, n int) {
	body := benchRows(n)
	b.Run("wire", func(b *testing.B) {
		rows := make([]features.Row, 0, n)
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var errs []FieldError
			rows, _, errs = DecodeBulkPredictRequest(body, MaxBulkRows, true, rows[:0])
			if len(errs) != 0 || len(rows) != n {
				b.Fatalf("decode: %d rows, %+v", len(rows), errs)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		// The plain-struct decode, which validates less (no bounds, no
		// 200.0, no finiteness): a lower bound on what encoding/json costs.
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var req struct {
				Requests []refRow `json:"requests"`
			}
			if err := json.Unmarshal(body, &req); err != nil || len(req.Requests) != n {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDecodeBulk10(b *testing.B)    { benchmarkBulk(b, 10) }
func BenchmarkDecodeBulk100(b *testing.B)   { benchmarkBulk(b, 100) }
func BenchmarkDecodeBulk10000(b *testing.B) { benchmarkBulk(b, 10000) }

func BenchmarkDecodeSamples1000(b *testing.B) {
	body := benchEntries(1000)
	b.Run("wire", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			samples, rejected, errs := DecodeTrainingBulk(body, 10_000)
			if len(errs) != 0 || len(rejected) != 0 || len(samples) != 1000 {
				b.Fatalf("decode: %d samples, %+v %+v", len(samples), rejected, errs)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var req struct {
				Entries []refEntry `json:"entries"`
			}
			if err := json.Unmarshal(body, &req); err != nil || len(req.Entries) != 1000 {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodePredict is the single-row POST /predict.
func BenchmarkDecodePredict(b *testing.B) {
	body := []byte(strings.TrimSuffix(strings.TrimPrefix(string(benchRows(1)), `{"requests":[`), `]}`))
	b.ReportAllocs()
	for b.Loop() {
		if _, errs := DecodePredictRequest(body); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
}
