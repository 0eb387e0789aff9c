package demo

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/wire"
)

func TestPredictRowIsWhatTheRouterSends(t *testing.T) {
	r := features.Row{KVCachePercentage: 0.25, InputTokenLength: 900, NumRequestWaiting: 2, NumRequestRunning: 7,
		PrefixCacheScore: 0.5, PrefillTokensInFlight: 1200}
	row := predictRow(r)
	data := wire.AppendRow(nil, &row)
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"kv_cache_percentage": 0.25, "input_token_length": 900.0, "num_request_waiting": 2.0,
		"num_request_running": 7.0, "num_tokens_generated": 1.0, "prefix_cache_score": 0.5,
		"prefill_tokens_in_flight": 1200.0, "decode_tokens_in_flight": 0.0,
		"encoder_input_size": 0.0, "encoder_matched_size": 0.0,
	}
	if len(got) != len(want) {
		t.Fatalf("fields %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

func TestClientAgainstTheService(t *testing.T) {
	_, client := startTestService(t, true)
	ctx := context.Background()
	row := features.Row{KVCachePercentage: 0.1, InputTokenLength: 500, NumTokensGenerated: 1}

	if _, err := client.Predict(ctx, []features.Row{row}); !errors.Is(err, ErrNotReady) {
		t.Errorf("predict before any model: %v, want ErrNotReady", err)
	}
	info, err := client.ModelInfo(ctx)
	if err != nil || info.Version != 0 || info.TTFT.Ready {
		t.Errorf("model info before any model: %+v, %v", info, err)
	}

	n, err := client.AddTrainingData(ctx, []features.Sample{
		{Row: row, ActualTTFTMs: 80},
		{Row: row, ActualTPOTMs: 21.5},
	})
	if err != nil || n != 2 {
		t.Errorf("add training data: accepted %d, %v", n, err)
	}
	// The trainer refuses an impossible row, and the client says why.
	bad := row
	bad.KVCachePercentage = 2
	_, err = client.AddTrainingData(ctx, []features.Sample{{Row: bad, ActualTTFTMs: 80}})
	if err == nil || !strings.Contains(err.Error(), "422") {
		t.Errorf("invalid entry: %v, want a 422", err)
	}
	if _, err := client.Predict(ctx, []features.Row{bad}); err == nil || errors.Is(err, ErrNotReady) {
		t.Errorf("predict an invalid row: %v, want a validation error", err)
	}
}
