package trace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

// sharedTrace is the shared H200 trace, outside this repository; tests that
// need it skip when it is absent.
const sharedTrace = "../../../shared/data/traces/sharegpt-h200.jsonl"

// entry is a trace line with every required field, the given fields
// (name, JSON value pairs) replacing or added to them; a value of "" drops
// the field.
func entry(fields ...string) string {
	names := []string{"kv_cache_percentage", "input_token_length", "num_request_waiting", "num_request_running",
		"num_tokens_generated", "prefix_cache_score", "actual_ttft_ms", "actual_tpot_ms"}
	values := map[string]string{"kv_cache_percentage": "0.25", "input_token_length": "48", "num_request_waiting": "2",
		"num_request_running": "7", "num_tokens_generated": "0", "prefix_cache_score": "0.5", "actual_ttft_ms": "455",
		"actual_tpot_ms": "0"}
	for i := 0; i+1 < len(fields); i += 2 {
		if _, ok := values[fields[i]]; !ok {
			names = append(names, fields[i])
		}
		values[fields[i]] = fields[i+1]
	}
	var b strings.Builder
	b.WriteString("{")
	for _, n := range names {
		if values[n] == "" {
			continue
		}
		if b.Len() > 1 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q: %s", n, values[n])
	}
	b.WriteString("}")
	return b.String()
}

func TestRead(t *testing.T) {
	in := entry("prefill_tokens_in_flight", "64", "decode_tokens_in_flight", "3", "pod_type", `"prefill"`,
		"predicted_ttft_ms", "400", "extra_field", `"ignored"`) + `

` + entry("input_token_length", "88", "actual_ttft_ms", "0", "actual_tpot_ms", "19.5", "pod_type", "null",
		"timestamp", `"2026-03-01T10:00:00.5Z"`) + `
   
` + entry("input_token_length", "1e3", "num_request_running", `"3"`, "num_tokens_generated", "12",
		"encoder_input_size", "2", "encoder_matched_size", "1", "actual_ttft_ms", "30", "actual_tpot_ms", "7.25",
		"predicted_tpot_ms", "8", "timestamp", `"2026-03-01T12:00:00+02:00"`) + `
` + entry("input_token_length", "0", "kv_cache_percentage", "1", "prefix_cache_score", "1", "actual_ttft_ms", "0",
		"timestamp", "null") + `
`
	got, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	row := features.Row{KVCachePercentage: 0.25, InputTokenLength: 48, NumRequestWaiting: 2, NumRequestRunning: 7,
		PrefixCacheScore: 0.5}
	with := func(edit func(r *features.Row)) features.Row { r := row; edit(&r); return r }
	want := []features.Sample{
		{
			Row: with(func(r *features.Row) {
				r.PrefillTokensInFlight, r.DecodeTokensInFlight, r.PodType = 64, 3, "prefill"
			}),
			ActualTTFTMs: 455, PredictedTTFTMs: 400, Timestamp: Epoch(),
		},
		{
			Row:          with(func(r *features.Row) { r.InputTokenLength = 88 }),
			ActualTPOTMs: 19.5, Timestamp: time.Date(2026, 3, 1, 10, 0, 0, 5e8, time.UTC),
		},
		{
			// What the service accepts, a trace may hold: integral floats
			// and numeric strings for counts.
			Row: with(func(r *features.Row) {
				r.InputTokenLength, r.NumRequestRunning, r.NumTokensGenerated = 1000, 3, 12
				r.EncoderInputSize, r.EncoderMatchedSize = 2, 1
			}),
			// An offset is kept as the instant, in UTC.
			ActualTTFTMs: 30, ActualTPOTMs: 7.25, PredictedTPOTMs: 8, Timestamp: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC),
		},
		{
			// The fourth entry, not the sixth line: blank lines take no
			// millisecond. A null timestamp counts as none.
			Row:       with(func(r *features.Row) { r.InputTokenLength, r.KVCachePercentage, r.PrefixCacheScore = 0, 1, 1 }),
			Timestamp: Epoch().Add(3 * time.Millisecond),
		},
	}
	if len(got) != len(want) {
		t.Fatalf("%d samples, want %d (blank lines skipped)", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("sample %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
		if loc := got[i].Timestamp.Location(); loc != time.UTC {
			t.Errorf("sample %d timestamp in %v, want UTC", i, loc)
		}
	}
	// Rows without a timestamp get fixed ones, so that the store's
	// holdout choice, which hashes them, is the same on every replay.
	again, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if !got[i].Timestamp.Equal(again[i].Timestamp) {
			t.Errorf("sample %d: timestamps %v and %v; want the same fixed one", i, got[i].Timestamp, again[i].Timestamp)
		}
	}
}

// A line is held to the rules of the service's training bodies (package
// wire), and a bad one is reported with its line number and first field.
func TestReadRejects(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "no entries"},
		{"only blank lines", "\n  \n\t\n", "no entries"},
		{"not json", entry() + "\nnope\n", "trace line 2: JSON decode error at byte 0"},
		{"not an object", `[1, 2]`, "trace line 1: body: Input should be a valid dictionary"},
		{"word for a number", entry("input_token_length", `"four"`), "input_token_length: Input should be a valid integer"},
		{"number for pod type", entry("pod_type", "3"), "pod_type: Input should be a valid string"},
		{"no prompt length", entry("input_token_length", ""), "trace line 1: input_token_length: Field required"},
		{"no queue length", entry("num_request_waiting", ""), "num_request_waiting: Field required"},
		{"no label field", entry("actual_tpot_ms", ""), "actual_tpot_ms: Field required"},
		{"null prompt length", entry("input_token_length", "null"), "input_token_length: Input should be a valid integer"},
		{"line of the bad entry", entry() + "\n\n" + entry("input_token_length", ""), "trace line 3: input_token_length: Field required"},
		{"negative count", entry("input_token_length", "-4"), "input_token_length: Input should be greater than or equal to 0"},
		{"fractional count", entry("input_token_length", "4.5"), "input_token_length: Input should be a valid integer, got a number with a fractional part"},
		{"huge count", entry("input_token_length", "1e15"), "input_token_length: Input should be less than or equal to 100000000"},
		// The service's ceiling on a stored count, not a looser one of the
		// trace reader's own.
		{"count above the sample ceiling", entry("prefill_tokens_in_flight", "100000001"), "prefill_tokens_in_flight: Input should be less than or equal to 100000000"},
		{"fractional running", entry("num_request_running", "0.5"), "num_request_running: Input should be a valid integer"},
		{"negative decode in flight", entry("decode_tokens_in_flight", "-3"), "decode_tokens_in_flight: Input should be greater than or equal to 0"},
		{"fractional encoder input", entry("encoder_input_size", "1.5"), "encoder_input_size: Input should be a valid integer"},
		{"kv above 1", entry("kv_cache_percentage", "1.5"), "kv_cache_percentage: Input should be less than or equal to 1"},
		{"prefix below 0", entry("prefix_cache_score", "-0.1"), "prefix_cache_score: Input should be greater than or equal to 0"},
		{"negative ttft", entry("actual_ttft_ms", "-1"), "actual_ttft_ms: Input should be greater than or equal to 0"},
		{"ttft over an hour", entry("actual_ttft_ms", "3600001"), "actual_ttft_ms: Input should be less than or equal to 3600000"},
		{"non-finite tpot", entry("actual_tpot_ms", "NaN"), "actual_tpot_ms: Input should be a finite number"},
		{"negative predicted tpot", entry("predicted_tpot_ms", "-3"), "predicted_tpot_ms: Input should be greater than or equal to 0"},
		{"bad timestamp", entry("timestamp", `"yesterday"`), "timestamp: Input should be a valid datetime"},
		{"empty timestamp", entry("timestamp", `""`), "timestamp: Input should be a valid datetime"},
		{"repeated field", `{"input_token_length": 4, ` + entry()[1:], "input_token_length: Key \"input_token_length\" appears more than once"},
		{"several faults", entry("kv_cache_percentage", "2", "actual_ttft_ms", "-1"), "kv_cache_percentage: Input should be less than or equal to 1 (and 1 more error)"},
		{"line too long", entry() + "\n" + strings.Repeat(" ", 5<<20), "trace line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(strings.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one saying %q", err, tt.want)
			}
			if got != nil {
				t.Errorf("a failed read returned %d samples", len(got))
			}
		})
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jsonl")
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(good, []byte(entry("actual_ttft_ms", "12")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(entry()+"\n"+entry("input_token_length", "-7")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if want := (features.Sample{Row: features.Row{KVCachePercentage: 0.25, InputTokenLength: 48, NumRequestWaiting: 2,
		NumRequestRunning: 7, PrefixCacheScore: 0.5}, ActualTTFTMs: 12, Timestamp: Epoch()}); len(got) != 1 || got[0] != want {
		t.Errorf("got %+v, want [%+v]", got, want)
	}

	for _, tt := range []struct {
		name, path string
		want       []string
	}{
		{"missing", filepath.Join(dir, "none.jsonl"), []string{"read trace", "none.jsonl"}},
		{"bad line", bad, []string{"read trace " + bad + ": trace line 2: input_token_length: Input should be greater than or equal to 0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadFile(tt.path)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want one saying %q", err, w)
				}
			}
		})
	}
	if _, err := ReadFile(filepath.Join(dir, "none.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v, want it to wrap os.ErrNotExist", err)
	}
}

// TestReadSharedTrace reads the shared H200 trace, when the repository sits
// beside it: every line is a valid entry with one label.
func TestReadSharedTrace(t *testing.T) {
	if _, err := os.Stat(sharedTrace); err != nil {
		t.Skipf("shared trace not available: %v", err)
	}
	got, err := ReadFile(sharedTrace)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(sharedTrace)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(strings.TrimSpace(string(data)), "\n") + 1; len(got) != lines {
		t.Errorf("%d samples from %d lines", len(got), lines)
	}
	// Its first line, as recorded.
	first := features.Sample{Row: features.Row{InputTokenLength: 48}, ActualTTFTMs: 455, Timestamp: Epoch()}
	if got[0] != first {
		t.Errorf("first sample %+v, want %+v", got[0], first)
	}
	var ttft, tpot int
	for i, s := range got {
		if s.ActualTTFTMs > 0 {
			ttft++
		}
		if s.ActualTPOTMs > 0 {
			tpot++
		}
		if s.ActualTTFTMs == 0 && s.ActualTPOTMs == 0 {
			t.Errorf("sample %d has no label: %+v", i, s)
		}
	}
	if ttft == 0 || tpot == 0 {
		t.Errorf("%d TTFT and %d TPOT samples, want some of each", ttft, tpot)
	}
}
