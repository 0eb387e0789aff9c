package loadgen

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/wire"
)

const twoLineTrace = `{"kv_cache_percentage": 0.25, "input_token_length": 48, "num_request_waiting": 1, "num_request_running": 3, "num_tokens_generated": 0, "actual_ttft_ms": 455, "actual_tpot_ms": 0, "prefix_cache_score": 0.5, "prefill_tokens_in_flight": 64, "decode_tokens_in_flight": 7, "extra_field": "ignored"}

{"kv_cache_percentage": 0, "input_token_length": 88, "num_request_waiting": 0, "num_request_running": 1, "num_tokens_generated": 0, "actual_ttft_ms": 0, "actual_tpot_ms": 21.5, "prefix_cache_score": 0, "prefill_tokens_in_flight": 0, "decode_tokens_in_flight": 0, "pod_type": "decode"}
`

func TestReadTrace(t *testing.T) {
	tr, err := ReadTrace(strings.NewReader(twoLineTrace))
	if err != nil {
		t.Fatal(err)
	}
	want := Trace{
		{KVCachePercentage: 0.25, InputTokenLength: 48, NumRequestWaiting: 1, NumRequestRunning: 3, ActualTTFTMs: 455,
			PrefixCacheScore: 0.5, PrefillTokensInFlight: 64, DecodeTokensInFlight: 7},
		{InputTokenLength: 88, NumRequestRunning: 1, ActualTPOTMs: 21.5, PodType: "decode"},
	}
	if len(tr) != len(want) || tr[0] != want[0] || tr[1] != want[1] {
		t.Fatalf("got %+v\nwant %+v", tr, want)
	}
	if tr.Entry(5) != want[1] || tr.Entry(4) != want[0] {
		t.Error("Trace.Entry does not wrap around")
	}
}

// ReadTrace holds lines to package trace's rules: a line the server would
// reject, or that would load it with nonsense, fails the read with its line
// number rather than being sent.
func TestReadTraceErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "\n\n", "no entries"},
		{"not JSON", "{\"input_token_length\": 4}\n{oops}\n", "line 2"},
		{"fractional token count", `{"input_token_length": 4.5}`, "line 1: input_token_length is 4.5"},
		{"no prompt length", "{\"input_token_length\": 4}\n{\"kv_cache_percentage\": 0}\n", "line 2: input_token_length is missing"},
		{"negative count", `{"input_token_length": 4, "num_request_running": -1}`, "num_request_running is -1"},
		{"kv above 1", `{"input_token_length": 4, "kv_cache_percentage": 1.5}`, "kv_cache_percentage is 1.5"},
		{"negative latency", `{"input_token_length": 4, "actual_tpot_ms": -2}`, "actual_tpot_ms is -2"},
		{"bad timestamp", `{"input_token_length": 4, "timestamp": "yesterday"}`, "timestamp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadTrace(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestReadTraceFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "trace.jsonl")
	if err := os.WriteFile(path, []byte(twoLineTrace), 0o644); err != nil {
		t.Fatal(err)
	}
	fromFile, err := ReadTraceFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fromReader, err := ReadTrace(strings.NewReader(twoLineTrace))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fromFile, fromReader) {
		t.Errorf("file gives %+v, reader %+v", fromFile, fromReader)
	}
	if _, err := ReadTraceFile(filepath.Join(dir, "none.jsonl")); err == nil || !strings.Contains(err.Error(), "none.jsonl") {
		t.Errorf("missing file: err %v, want one naming the file", err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"input_token_length": -1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTraceFile(bad); err == nil || !strings.Contains(err.Error(), bad+": trace line 1") {
		t.Errorf("bad file: err %v, want one naming the file and line", err)
	}
}

// entryOf keeps every field an Entry has: a sample with all of them set
// comes back unchanged when written as a body and decoded by the server.
func TestEntryOfKeepsEveryField(t *testing.T) {
	s := features.Sample{
		Row: features.Row{KVCachePercentage: 0.5, InputTokenLength: 1, NumRequestWaiting: 2, NumRequestRunning: 3,
			NumTokensGenerated: 4, PrefixCacheScore: 0.25, PodType: "decode", PrefillTokensInFlight: 5,
			DecodeTokensInFlight: 6, EncoderInputSize: 7, EncoderMatchedSize: 8},
		ActualTTFTMs: 9, ActualTPOTMs: 10, PredictedTTFTMs: 11, Timestamp: time.Unix(12, 0).UTC(),
	}
	e := entryOf(s)
	body := AppendIngestBody(nil, Trace{e}, 0, 1)
	samples, rejected, errs := wire.DecodeTrainingBulk(body, 0)
	if len(errs) > 0 || len(rejected) > 0 || len(samples) != 1 {
		t.Fatalf("server refuses %s: %+v %+v", body, errs, rejected)
	}
	if got := samples[0]; got.Row != s.Row || got.ActualTTFTMs != s.ActualTTFTMs || got.ActualTPOTMs != s.ActualTPOTMs {
		t.Errorf("round trip gives %+v, want %+v", got, s)
	}
}

// The shared H200 trace, when the repository sits beside it, loads whole,
// each line to what encoding/json makes of it as an Entry: the strict
// reader changes nothing on a valid trace.
func TestReadSharedTrace(t *testing.T) {
	data, err := os.ReadFile("../../shared/data/traces/sharegpt-h200.jsonl")
	if err != nil {
		t.Skipf("shared trace not available: %v", err)
	}
	tr, err := ReadTrace(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(tr) != len(lines) {
		t.Fatalf("%d entries from %d lines", len(tr), len(lines))
	}
	for i, line := range lines {
		var want Entry
		if err := json.Unmarshal([]byte(line), &want); err != nil {
			t.Fatalf("line %d: encoding/json: %v", i+1, err)
		}
		if tr[i] != want {
			t.Fatalf("line %d: %+v, encoding/json gives %+v", i+1, tr[i], want)
		}
	}
}

// The bodies must be what the real server decodes into the same rows: any
// drift would make every load run measure 422s.
func TestPredictBodyDecodesToTheSameRows(t *testing.T) {
	tr, err := ReadTrace(strings.NewReader(twoLineTrace))
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []Source{tr, Generator{Seed: 7}} {
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
			e := src.Entry(3 + int64(k))
			want := features.Row{
				KVCachePercentage: e.KVCachePercentage, InputTokenLength: e.InputTokenLength,
				NumRequestWaiting: e.NumRequestWaiting, NumRequestRunning: e.NumRequestRunning,
				NumTokensGenerated: e.NumTokensGenerated, PrefixCacheScore: e.PrefixCacheScore, PodType: e.PodType,
				PrefillTokensInFlight: e.PrefillTokensInFlight, DecodeTokensInFlight: e.DecodeTokensInFlight,
			}
			if r != want {
				t.Fatalf("%T row %d: decoded %+v, want %+v", src, k, r, want)
			}
		}
	}
}

func TestIngestBodyDecodesToTheSameSamples(t *testing.T) {
	g := Generator{Seed: 3}
	const n = 30
	body := AppendIngestBody(nil, g, 100, n)
	samples, rejected, errs := wire.DecodeTrainingBulk(body, 0)
	if len(errs) > 0 || len(rejected) > 0 {
		t.Fatalf("server refuses entries: %+v %+v", errs, rejected)
	}
	if len(samples) != n {
		t.Fatalf("%d samples, want %d", len(samples), n)
	}
	for k, s := range samples {
		e := g.Entry(100 + int64(k))
		if s.ActualTTFTMs != e.ActualTTFTMs || s.ActualTPOTMs != e.ActualTPOTMs ||
			s.Row.InputTokenLength != e.InputTokenLength || s.Row.KVCachePercentage != e.KVCachePercentage {
			t.Fatalf("sample %d: %+v, want %+v", k, s, e)
		}
	}
	// And the JSON is plain JSON, readable by anything.
	var v struct{ Entries []Entry }
	if err := json.Unmarshal(body, &v); err != nil || len(v.Entries) != n {
		t.Fatalf("encoding/json: %v, %d entries", err, len(v.Entries))
	}
}

func TestGeneratorSpreadsOverEveryStoreBucket(t *testing.T) {
	g := Generator{Seed: 1}
	scheme := store.MustParseScheme(store.BriefSchemeName) // KV × prefix: 40 buckets
	seen := make([]int, scheme.NumBuckets())
	labels := [3]int{}
	for i := range int64(6000) {
		e := g.Entry(i)
		if e != g.Entry(i) {
			t.Fatal("Generator is not deterministic")
		}
		if e.KVCachePercentage < 0 || e.KVCachePercentage >= 1 || e.PrefixCacheScore < 0 || e.PrefixCacheScore >= 1 ||
			e.InputTokenLength < 16 || e.InputTokenLength > 8192 || e.NumRequestRunning < 1 {
			t.Fatalf("entry %d out of range: %+v", i, e)
		}
		row := features.Row{KVCachePercentage: e.KVCachePercentage, PrefixCacheScore: e.PrefixCacheScore,
			InputTokenLength: e.InputTokenLength, NumRequestWaiting: e.NumRequestWaiting, NumRequestRunning: e.NumRequestRunning}
		seen[scheme.Index(&row)]++
		switch {
		case e.ActualTTFTMs > 0 && e.ActualTPOTMs > 0:
			labels[2]++
		case e.ActualTTFTMs > 0:
			labels[0]++
		case e.ActualTPOTMs > 0:
			labels[1]++
		default:
			t.Fatalf("entry %d has no label", i)
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
	if (Generator{Seed: 2}).Entry(0) == g.Entry(0) {
		t.Error("seed has no effect")
	}
}
