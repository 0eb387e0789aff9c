package wire

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/headroomhq/headroom/model"
)

// keysOf is the sorted keys of v's JSON object.
func keysOf(t *testing.T, v any) []string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// The answers carry the reference's fields and Headroom's documented ones
// (docs/PROTOCOL.md), every one of them present when it is always sent.
func TestAnswersFields(t *testing.T) {
	serving := NewServing("quantile", model.DefaultQuantile)
	for _, tc := range []struct {
		name string
		v    any
		want []string
	}{
		{"error", Detail{Detail: "Not Found"}, []string{"detail"}},
		{"refused ingest", Detail{Detail: []FieldError{}, Rejected: []Rejection{{}}}, []string{"detail", "rejected"}},
		{"health", Health{Status: "ok"}, []string{"status"}},
		{"predictor health", Health{Status: "ok", Service: "s"}, []string{"service", "status"}},
		{"trainer readiness", TrainerReadiness{Status: "ready"}, []string{"model_ready", "status"}},
		{"predictor readiness", PredictorReadiness{Status: "ready", Serving: serving},
			[]string{"model_type", "objective_type", "quantile", "status"}},
		{"ingest", IngestAnswer{Rejected: []Rejection{}}, []string{"accepted", "message", "rejected", "stored"}},
		{"trainer status", TrainerStatus{Serving: serving}, []string{"bundle_epoch", "is_ready", "kv_transfer", "model_generation",
			"model_type", "objective_type", "quantile", "samples", "split_ttft", "training", "xgboost_available", "xgboost_error"}},
		{"predictor status before a bundle", PredictorStatus{Serving: serving}, []string{"ensemble_active", "is_ready", "kv_transfer",
			"last_model_load", "model_generation", "model_type", "models_exist", "objective_type", "quantile", "split_ttft", "trained", "training_server_url"}},
		{"predictor status with a bundle", PredictorStatus{Serving: serving, LoadedBundle: &LoadedBundle{}}, []string{"bundle_age_seconds",
			"bundle_checksum", "bundle_epoch", "ensemble_active", "is_ready", "kv_transfer", "last_model_load", "model_generation", "model_type",
			"models_exist", "objective_type", "quantile", "samples_seen", "split_ttft", "trained", "training_server_url"}},
		{"reload", ReloadAnswer{Serving: serving}, []string{"is_ready", "last_load_time", "loaded", "model_type", "objective_type",
			"quantile", "synced"}},
		{"trainer root", TrainerRoot{Serving: serving}, []string{"description", "message", "model_type", "objective_type", "quantile"}},
		{"predictor root", PredictorRoot{Serving: serving}, []string{"is_ready", "message", "model_type", "objective_type", "quantile",
			"sync_interval", "training_server"}},
		{"download info", DownloadInfo{Serving: serving}, []string{"available_endpoints", "evaluation_info", "model_status", "model_type",
			"objective_type", "quantile"}},
		{"bulk before models", BulkNotReady{}, []string{"errors", "failed_predictions", "predictions", "processing_time_ms",
			"successful_predictions", "total_requests"}},
	} {
		if got := keysOf(t, tc.v); !slices.Equal(got, tc.want) {
			t.Errorf("%s: fields %v, want %v", tc.name, got, tc.want)
		}
	}
	if serving.ModelType != ModelType {
		t.Errorf("model type %q, want %q", serving.ModelType, ModelType)
	}
}
