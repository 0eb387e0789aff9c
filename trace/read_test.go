package trace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

// sharedTrace is the shared H200 trace, outside this repository; tests that
// need it skip when it is absent.
const sharedTrace = "../../shared/data/traces/sharegpt-h200.jsonl"

func TestRead(t *testing.T) {
	in := `{"kv_cache_percentage": 0.25, "input_token_length": 48, "num_request_waiting": 2, "num_request_running": 7, "num_tokens_generated": 0, "actual_ttft_ms": 455, "actual_tpot_ms": 0, "prefix_cache_score": 0.5, "prefill_tokens_in_flight": 64, "decode_tokens_in_flight": 3, "pod_type": "prefill", "predicted_ttft_ms": 400, "extra_field": "ignored"}

{"input_token_length": 88, "actual_tpot_ms": 19.5, "pod_type": null, "timestamp": "2026-03-01T10:00:00.5Z"}
   
{"input_token_length": 1e3, "num_tokens_generated": 12, "encoder_input_size": 2, "encoder_matched_size": 1, "actual_ttft_ms": 30, "actual_tpot_ms": 7.25, "predicted_tpot_ms": 8, "kv_cache_percentage": null, "timestamp": "2026-03-01T12:00:00+02:00"}
{"input_token_length": 0, "kv_cache_percentage": 1, "prefix_cache_score": 1, "timestamp": ""}
`
	got, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []features.Sample{
		{
			Row: features.Row{KVCachePercentage: 0.25, InputTokenLength: 48, NumRequestWaiting: 2, NumRequestRunning: 7,
				PrefixCacheScore: 0.5, PrefillTokensInFlight: 64, DecodeTokensInFlight: 3, PodType: "prefill"},
			ActualTTFTMs: 455, PredictedTTFTMs: 400, Timestamp: Epoch(),
		},
		{
			Row:          features.Row{InputTokenLength: 88},
			ActualTPOTMs: 19.5, Timestamp: time.Date(2026, 3, 1, 10, 0, 0, 5e8, time.UTC),
		},
		{
			Row: features.Row{InputTokenLength: 1000, NumTokensGenerated: 12, EncoderInputSize: 2, EncoderMatchedSize: 1},
			// An offset is kept as the instant, in UTC.
			ActualTTFTMs: 30, ActualTPOTMs: 7.25, PredictedTPOTMs: 8, Timestamp: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC),
		},
		{
			// The fourth entry, not the sixth line: blank lines take no
			// millisecond. An empty timestamp counts as none.
			Row:       features.Row{KVCachePercentage: 1, PrefixCacheScore: 1},
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

func TestReadRejects(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "no entries"},
		{"only blank lines", "\n  \n\t\n", "no entries"},
		{"not json", `{"input_token_length": 4}` + "\nnope\n", "line 2"},
		{"not an object", `[1, 2]`, "line 1"},
		{"string for a number", `{"input_token_length": "4"}`, "line 1"},
		{"number for pod type", `{"input_token_length": 4, "pod_type": 3}`, "line 1"},
		{"no prompt length", `{"actual_ttft_ms": 3}`, "input_token_length is missing"},
		{"null prompt length", `{"input_token_length": null}`, "input_token_length is missing"},
		{"line of the bad entry", `{"input_token_length": 4}` + "\n\n" + `{"actual_ttft_ms": 3}`, "trace line 3: input_token_length is missing"},
		{"negative count", `{"input_token_length": -4}`, "input_token_length is -4, want a non-negative integer"},
		{"fractional count", `{"input_token_length": 4.5}`, "input_token_length is 4.5"},
		{"huge count", `{"input_token_length": 1e15}`, "input_token_length is 1e+15"},
		{"negative waiting", `{"input_token_length": 4, "num_request_waiting": -1}`, "num_request_waiting is -1"},
		{"fractional running", `{"input_token_length": 4, "num_request_running": 0.5}`, "num_request_running is 0.5"},
		{"fractional generated", `{"input_token_length": 4, "num_tokens_generated": 2.5}`, "num_tokens_generated is 2.5"},
		{"negative prefill in flight", `{"input_token_length": 4, "prefill_tokens_in_flight": -64}`, "prefill_tokens_in_flight is -64"},
		{"negative decode in flight", `{"input_token_length": 4, "decode_tokens_in_flight": -3}`, "decode_tokens_in_flight is -3"},
		{"fractional encoder input", `{"input_token_length": 4, "encoder_input_size": 1.5}`, "encoder_input_size is 1.5"},
		{"negative encoder matched", `{"input_token_length": 4, "encoder_matched_size": -2}`, "encoder_matched_size is -2"},
		{"kv above 1", `{"input_token_length": 4, "kv_cache_percentage": 1.5}`, "kv_cache_percentage is 1.5, want a number in [0, 1]"},
		{"kv below 0", `{"input_token_length": 4, "kv_cache_percentage": -0.1}`, "kv_cache_percentage is -0.1"},
		{"prefix above 1", `{"input_token_length": 4, "prefix_cache_score": 2}`, "prefix_cache_score is 2"},
		{"negative ttft", `{"input_token_length": 4, "actual_ttft_ms": -1}`, "actual_ttft_ms is -1, want a non-negative number"},
		{"negative tpot", `{"input_token_length": 4, "actual_tpot_ms": -0.5}`, "actual_tpot_ms is -0.5"},
		{"negative predicted ttft", `{"input_token_length": 4, "predicted_ttft_ms": -2}`, "predicted_ttft_ms is -2"},
		{"negative predicted tpot", `{"input_token_length": 4, "predicted_tpot_ms": -3}`, "predicted_tpot_ms is -3"},
		{"bad timestamp", `{"input_token_length": 4, "timestamp": "yesterday"}`, `timestamp "yesterday"`},
		{"timestamp without zone", `{"input_token_length": 4, "timestamp": "2026-03-01T10:00:00"}`, "timestamp"},
		{"line too long", `{"input_token_length": 4}` + "\n" + strings.Repeat(" ", 5<<20), "trace line 2"},
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
	if err := os.WriteFile(good, []byte(`{"input_token_length": 7, "actual_ttft_ms": 12}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"input_token_length": 7}`+"\n"+`{"input_token_length": -7}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if want := (features.Sample{Row: features.Row{InputTokenLength: 7}, ActualTTFTMs: 12, Timestamp: Epoch()}); len(got) != 1 || got[0] != want {
		t.Errorf("got %+v, want [%+v]", got, want)
	}

	for _, tt := range []struct {
		name, path string
		want       []string
	}{
		{"missing", filepath.Join(dir, "none.jsonl"), []string{"read trace", "none.jsonl"}},
		{"bad line", bad, []string{"read trace " + bad + ": trace line 2: input_token_length is -7"}},
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
