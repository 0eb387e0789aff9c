package loadgen

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/trace"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/wire"
)

const twoLineTrace = `{"kv_cache_percentage": 0.25, "input_token_length": 48, "num_request_waiting": 1, "num_request_running": 3, "num_tokens_generated": 0, "actual_ttft_ms": 455, "actual_tpot_ms": 0, "prefix_cache_score": 0.5, "prefill_tokens_in_flight": 64, "decode_tokens_in_flight": 7, "extra_field": "ignored"}

{"kv_cache_percentage": 0, "input_token_length": 88, "num_request_waiting": 0, "num_request_running": 1, "num_tokens_generated": 0, "actual_ttft_ms": 0, "actual_tpot_ms": 21.5, "prefix_cache_score": 0, "prefill_tokens_in_flight": 0, "decode_tokens_in_flight": 0, "pod_type": "decode"}
`

func readTwoLines(t *testing.T) Trace {
	t.Helper()
	samples, err := trace.Read(strings.NewReader(twoLineTrace))
	if err != nil {
		t.Fatal(err)
	}
	return Trace(samples)
}

func TestTraceWrapsAround(t *testing.T) {
	tr := readTwoLines(t)
	if tr.Sample(5) != tr[1] || tr.Sample(4) != tr[0] {
		t.Error("Trace.Sample does not wrap around")
	}
}

// The bodies must be what the real server decodes into the same rows: any
// drift would make every load run measure 422s.
func TestPredictBodyDecodesToTheSameRows(t *testing.T) {
	for _, src := range []Source{readTwoLines(t), Generator{Seed: 7}} {
		const n = 25
		body := AppendPredictBody(nil, src, 3, n)
		rows, _, errs := wire.DecodeBulkPredictRequest(body, 0, false, nil)
		if len(errs) > 0 {
			t.Fatalf("%T: server refuses the body: %+v\n%s", src, errs, body)
		}
		if len(rows) != n {
			t.Fatalf("%T: %d rows, want %d", src, len(rows), n)
		}
		for k, r := range rows {
			if want := src.Sample(3 + int64(k)).Row; r != want {
				t.Fatalf("%T row %d: decoded %+v, want %+v", src, k, r, want)
			}
		}
	}
}

// Ingest bodies carry each sample's row and labels, decoded by the server
// into the same values; a trace's timestamps and served predictions stay
// behind, since the trainer stamps what it receives.
func TestIngestBodyDecodesToTheSameSamples(t *testing.T) {
	tr := readTwoLines(t)
	tr[0].PredictedTTFTMs, tr[0].Timestamp = 400, time.Unix(12, 0).UTC()
	for _, src := range []Source{tr, Generator{Seed: 3}} {
		const n = 30
		body := AppendIngestBody(nil, src, 100, n)
		samples, rejected, errs := wire.DecodeTrainingBulk(body, 0)
		if len(errs) > 0 || len(rejected) > 0 {
			t.Fatalf("%T: server refuses entries: %+v %+v", src, errs, rejected)
		}
		if len(samples) != n {
			t.Fatalf("%T: %d samples, want %d", src, len(samples), n)
		}
		for k, got := range samples {
			e := src.Sample(100 + int64(k))
			want := features.Sample{Row: e.Row, ActualTTFTMs: e.ActualTTFTMs, ActualTPOTMs: e.ActualTPOTMs}
			if got != want {
				t.Fatalf("%T sample %d: %+v, want %+v", src, k, got, want)
			}
		}
		// And the JSON is plain JSON, readable by anything.
		var v struct{ Entries []map[string]any }
		if err := json.Unmarshal(body, &v); err != nil || len(v.Entries) != n {
			t.Fatalf("encoding/json: %v, %d entries", err, len(v.Entries))
		}
	}
}

func TestGeneratorSpreadsOverEveryStoreBucket(t *testing.T) {
	g := Generator{Seed: 1}
	scheme := store.MustParseScheme(store.BriefSchemeName) // KV × prefix: 40 buckets
	seen := make([]int, scheme.NumBuckets())
	labels := [3]int{}
	for i := range int64(6000) {
		s := g.Sample(i)
		if s != g.Sample(i) {
			t.Fatal("Generator is not deterministic")
		}
		if r := s.Row; r.KVCachePercentage < 0 || r.KVCachePercentage >= 1 || r.PrefixCacheScore < 0 || r.PrefixCacheScore >= 1 ||
			r.InputTokenLength < 16 || r.InputTokenLength > 8192 || r.NumRequestRunning < 1 {
			t.Fatalf("sample %d out of range: %+v", i, s)
		}
		seen[scheme.Index(&s.Row)]++
		switch {
		case s.ActualTTFTMs > 0 && s.ActualTPOTMs > 0:
			labels[2]++
		case s.ActualTTFTMs > 0:
			labels[0]++
		case s.ActualTPOTMs > 0:
			labels[1]++
		default:
			t.Fatalf("sample %d has no label", i)
		}
	}
	for b, n := range seen {
		// 6000 entries over 40 buckets: 150 expected each.
		if n < 75 {
			t.Errorf("bucket %d got %d entries", b, n)
		}
	}
	if labels != [3]int{2000, 2000, 2000} {
		t.Errorf("labels TTFT-only/TPOT-only/both = %v, want a third each", labels)
	}
	if (Generator{Seed: 2}).Sample(0) == g.Sample(0) {
		t.Error("seed has no effect")
	}
}
