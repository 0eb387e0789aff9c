package eval

import (
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

func TestReadTrace(t *testing.T) {
	in := `{"kv_cache_percentage": 0.25, "input_token_length": 48, "num_request_waiting": 2, "num_request_running": 7, "num_tokens_generated": 0, "actual_ttft_ms": 455, "actual_tpot_ms": 0, "prefix_cache_score": 0.5, "prefill_tokens_in_flight": 64, "decode_tokens_in_flight": 3, "pod_type": "prefill", "predicted_ttft_ms": 400}

{"input_token_length": 88, "actual_tpot_ms": 19.5, "pod_type": null, "timestamp": "2026-03-01T10:00:00.5Z"}
`
	got, err := ReadTrace(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d samples, want 2 (the blank line skipped)", len(got))
	}
	want := features.Row{KVCachePercentage: 0.25, InputTokenLength: 48, NumRequestWaiting: 2, NumRequestRunning: 7,
		PrefixCacheScore: 0.5, PrefillTokensInFlight: 64, DecodeTokensInFlight: 3, PodType: "prefill"}
	if got[0].Row != want {
		t.Errorf("row 0 = %+v, want %+v", got[0].Row, want)
	}
	if got[0].ActualTTFTMs != 455 || got[0].ActualTPOTMs != 0 || got[0].PredictedTTFTMs != 400 {
		t.Errorf("labels of row 0: %+v", got[0])
	}
	if got[1].ActualTPOTMs != 19.5 || got[1].Row.PodType != "" || got[1].Row.InputTokenLength != 88 {
		t.Errorf("row 1 = %+v", got[1])
	}
	if want := time.Date(2026, 3, 1, 10, 0, 0, 5e8, time.UTC); !got[1].Timestamp.Equal(want) {
		t.Errorf("row 1 timestamp %v, want %v", got[1].Timestamp, want)
	}
	// Rows without a timestamp get fixed ones, so that the store's
	// holdout choice, which hashes them, is the same on every replay.
	again, _ := ReadTrace(strings.NewReader(in))
	if !got[0].Timestamp.Equal(again[0].Timestamp) || got[0].Timestamp.IsZero() {
		t.Errorf("timestamps %v and %v; want the same fixed one", got[0].Timestamp, again[0].Timestamp)
	}
}

func TestReadTraceRejects(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "\n\n", "no entries"},
		{"not json", `{"input_token_length": 4}` + "\nnope\n", "line 2"},
		{"no prompt length", `{"actual_ttft_ms": 3}`, "input_token_length is missing"},
		{"negative count", `{"input_token_length": -4}`, "input_token_length is -4"},
		{"fractional count", `{"input_token_length": 4.5}`, "input_token_length is 4.5"},
		{"kv above 1", `{"input_token_length": 4, "kv_cache_percentage": 1.5}`, "kv_cache_percentage is 1.5"},
		{"negative latency", `{"input_token_length": 4, "actual_ttft_ms": -1}`, "actual_ttft_ms is -1"},
		{"bad timestamp", `{"input_token_length": 4, "timestamp": "yesterday"}`, "timestamp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadTrace(strings.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one saying %q", err, tt.want)
			}
		})
	}
}

func TestReadTraceFileMissing(t *testing.T) {
	if _, err := ReadTraceFile(t.TempDir() + "/none.jsonl"); err == nil {
		t.Fatal("read a file that does not exist")
	}
}
