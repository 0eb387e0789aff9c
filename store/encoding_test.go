package store

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

func sampleEqual(a, b *features.Sample) bool {
	ra, rb := a.Row, b.Row
	floatsEq := func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) }
	return floatsEq(ra.KVCachePercentage, rb.KVCachePercentage) && floatsEq(ra.PrefixCacheScore, rb.PrefixCacheScore) &&
		ra.InputTokenLength == rb.InputTokenLength && ra.NumRequestWaiting == rb.NumRequestWaiting &&
		ra.NumRequestRunning == rb.NumRequestRunning && ra.NumTokensGenerated == rb.NumTokensGenerated &&
		ra.PodType == rb.PodType && ra.PrefillTokensInFlight == rb.PrefillTokensInFlight &&
		ra.DecodeTokensInFlight == rb.DecodeTokensInFlight && ra.EncoderInputSize == rb.EncoderInputSize &&
		ra.EncoderMatchedSize == rb.EncoderMatchedSize &&
		floatsEq(a.ActualTTFTMs, b.ActualTTFTMs) && floatsEq(a.ActualTPOTMs, b.ActualTPOTMs) &&
		floatsEq(a.PredictedTTFTMs, b.PredictedTTFTMs) && floatsEq(a.PredictedTPOTMs, b.PredictedTPOTMs) &&
		a.Timestamp.Equal(b.Timestamp) && a.Stamped == b.Stamped && transferEqual(a.Transfer, b.Transfer)
}

func transferEqual(a, b *features.Transfer) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b && math.Float64bits(a.Ms) == math.Float64bits(b.Ms) &&
		math.Float64bits(a.BytesPerToken) == math.Float64bits(b.BytesPerToken)
}

// A sample with a transfer is a version 2 record that round-trips every
// field; one without is the version 1 record it always was.
func TestEncodingTransfer(t *testing.T) {
	base := features.Sample{Row: features.Row{InputTokenLength: 963, PodType: "decode"}, ActualTTFTMs: 253,
		Timestamp: time.Date(2026, 11, 29, 15, 42, 36, 0, time.UTC)}
	v1, err := appendSample(nil, &base)
	if err != nil {
		t.Fatal(err)
	}
	// The bytes a version 1 binary (commit ca4c47f) wrote for this sample.
	const wantV1 = "0144406fa00000000000860f0000000000000080e0c18bcb9bc7ec31066465636f6465"
	if got := fmt.Sprintf("%x", v1); got != wantV1 {
		t.Fatalf("a sample without a transfer encodes as %s, want the version 1 record %s", got, wantV1)
	}
	tests := map[string]*features.Transfer{
		"empty": {},
		"full": {Ms: 3.25, Tokens: 900, BytesPerToken: 163840, PrefillPod: "vllm-p-0", DecodePod: "vllm-d-λ",
			Prefill: features.Topology{Node: "n0", Rack: "r0", Zone: "z", Region: "eu"},
			Decode:  features.Topology{Node: "n1", Rack: "r1", Zone: "z", Region: "eu"}, Concurrent: 3},
		"extremes":      {Ms: math.SmallestNonzeroFloat64, Tokens: math.MaxInt64, Concurrent: math.MinInt64, BytesPerToken: math.MaxFloat64},
		"negative zero": {Ms: math.Copysign(0, -1), Prefill: features.Topology{Node: "n"}},
	}
	for name, tr := range tests {
		s := base
		s.Transfer = tr
		enc, err := appendSample(nil, &s)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if enc[0] != sampleFormatTransfer || !bytes.Equal(enc[1:len(v1)], v1[1:]) {
			t.Fatalf("%s: %x is not version 1's fields under version 2", name, enc)
		}
		var got features.Sample
		if err := decodeSample(enc, &got); err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		if !sampleEqual(&got, &s) {
			t.Fatalf("%s: round trip\n got %+v %+v\nwant %+v %+v", name, got, got.Transfer, s, s.Transfer)
		}
		for cut := len(v1); cut < len(enc); cut++ {
			if err := decodeSample(enc[:cut], &got); err == nil {
				t.Fatalf("%s: record cut at %d of %d decodes", name, cut, len(enc))
			}
		}
		if err := decodeSample(append(bytes.Clone(enc), 0), &got); err == nil || !strings.Contains(err.Error(), "trailing") {
			t.Fatalf("%s: trailing byte: %v", name, err)
		}
	}
	bad := base
	bad.Transfer = &features.Transfer{Ms: math.NaN()}
	if _, err := appendSample(nil, &bad); err == nil || !strings.Contains(err.Error(), "actual_kv_transfer_ms") {
		t.Fatalf("NaN transfer time: %v", err)
	}
}

func TestEncodingRoundTrip(t *testing.T) {
	berlin := time.FixedZone("CET", 3600)
	full := features.Sample{
		Row: features.Row{
			KVCachePercentage: 0.3252, InputTokenLength: 963, NumRequestWaiting: 5, NumRequestRunning: 2,
			NumTokensGenerated: 1, PrefixCacheScore: 0.6573, PodType: "prefill", PrefillTokensInFlight: 4809,
			DecodeTokensInFlight: 77, EncoderInputSize: 3, EncoderMatchedSize: 2,
		},
		ActualTTFTMs: 253, ActualTPOTMs: 11.5, PredictedTTFTMs: 240.25, PredictedTPOTMs: 12,
		Timestamp: time.Date(2026, 11, 29, 15, 42, 36, 709963272, time.UTC),
	}
	tests := map[string]features.Sample{
		"zero":            {},
		"full":            full,
		"decode pod":      {Row: features.Row{PodType: "decode"}, ActualTPOTMs: 3},
		"custom pod type": {Row: features.Row{PodType: "gpu-λ-pool"}, ActualTTFTMs: 1},
		"negative ints":   {Row: features.Row{InputTokenLength: -1, NumRequestWaiting: math.MinInt64, EncoderMatchedSize: math.MaxInt64}},
		"negative zero":   {Row: features.Row{KVCachePercentage: math.Copysign(0, -1)}, ActualTTFTMs: 5},
		"tiny and huge":   {ActualTTFTMs: math.SmallestNonzeroFloat64, ActualTPOTMs: math.MaxFloat64},
		"local time":      {Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 6, berlin)},
		"epoch":           {Timestamp: time.Unix(0, 0)},
		"before epoch":    {Timestamp: time.Date(1900, 1, 1, 0, 0, 0, 1, time.UTC)},
		"stamped":         {ActualTTFTMs: 5, Timestamp: time.Unix(1700000000, 9), Stamped: true},
	}
	for name, s := range tests {
		enc, err := appendSample(nil, &s)
		if err != nil {
			t.Errorf("%s: encode: %v", name, err)
			continue
		}
		if enc[0] != sampleFormat {
			t.Errorf("%s: first byte %d, want format version %d", name, enc[0], sampleFormat)
		}
		var got features.Sample
		if err := decodeSample(enc, &got); err != nil {
			t.Errorf("%s: decode: %v", name, err)
			continue
		}
		if !sampleEqual(&got, &s) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", name, got, s)
		}
		if !got.Timestamp.IsZero() && got.Timestamp.Location() != time.UTC {
			t.Errorf("%s: decoded timestamp in %v, want UTC", name, got.Timestamp.Location())
		}
		// One encoding per sample: the holdout hash depends on it.
		again, _ := appendSample(nil, &got)
		if !bytes.Equal(again, enc) {
			t.Errorf("%s: re-encoding differs:\n%x\n%x", name, again, enc)
		}
	}
	enc, _ := appendSample(nil, &full)
	t.Logf("a fully populated sample encodes in %d bytes; an unlabelled zero one in %d", len(enc), len(mustEncode(t, &features.Sample{})))
}

func mustEncode(t testing.TB, s *features.Sample) []byte {
	t.Helper()
	b, err := appendSample(nil, s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEncodingRejects(t *testing.T) {
	good := mustEncode(t, &features.Sample{
		Row:          features.Row{KVCachePercentage: 0.5, InputTokenLength: 1000, PodType: "decode"},
		ActualTTFTMs: 100, Timestamp: time.Unix(1700000000, 5),
	})
	unstamped := mustEncode(t, &features.Sample{ActualTTFTMs: 100})
	tests := map[string]struct {
		rec  []byte
		want string
	}{
		"empty":                 {nil, "truncated"},
		"future version":        {append([]byte{3}, good[1:]...), "format version 3"},
		"transfer part missing": {append([]byte{2}, good[1:]...), "truncated"},
		"version zero":          {append([]byte{0}, good[1:]...), "format version 0"},
		"stamped, no timestamp": {append([]byte{unstamped[0], unstamped[1] | bitStamped}, unstamped[2:]...), "stamped without a timestamp"},
		"trailing byte":         {append(bytes.Clone(good), 0), "trailing"},
		"zero float":            {append([]byte{1, 1}, make([]byte, 8+8+1)...), "stored as zero"},
	}
	for cut := 1; cut < len(good); cut++ {
		tests[fmt.Sprintf("cut at %d", cut)] = struct {
			rec  []byte
			want string
		}{good[:cut], "truncated"}
	}
	for name, tc := range tests {
		var s features.Sample
		err := decodeSample(tc.rec, &s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: decode(%x) = %v, want error containing %q", name, tc.rec, err, tc.want)
		}
	}
}

func TestEncodingRefusesUnstorableValues(t *testing.T) {
	tests := map[string]features.Sample{
		"NaN kv":             {Row: features.Row{KVCachePercentage: math.NaN()}},
		"NaN prefix":         {Row: features.Row{PrefixCacheScore: math.NaN()}},
		"inf ttft":           {ActualTTFTMs: math.Inf(1)},
		"-inf tpot":          {ActualTPOTMs: math.Inf(-1)},
		"NaN predicted ttft": {PredictedTTFTMs: math.NaN()},
		"inf predicted tpot": {PredictedTPOTMs: math.Inf(1)},
		"year 3000":          {Timestamp: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"year 1600":          {Timestamp: time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)},
		"stamped, no time":   {ActualTTFTMs: 1, Stamped: true},
	}
	for name, s := range tests {
		if b, err := appendSample(nil, &s); err == nil {
			t.Errorf("%s: encoded as %x, want an error", name, b)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	rec := mustEncode(b, &features.Sample{
		Row:          features.Row{KVCachePercentage: 0.3, InputTokenLength: 963, NumRequestWaiting: 5, PodType: "prefill"},
		ActualTTFTMs: 253, Timestamp: time.Now(),
	})
	var s features.Sample
	b.ReportAllocs()
	for b.Loop() {
		if err := decodeSample(rec, &s); err != nil {
			b.Fatal(err)
		}
	}
}
