package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

func TestDecodeFlushRequest(t *testing.T) {
	str := func(s string) *string { return &s }
	all := FlushRequest{FlushTrainingData: true, FlushTestData: true, FlushMetrics: true}
	with := func(edit func(*FlushRequest)) FlushRequest { r := all; edit(&r); return r }
	tests := []struct {
		body string
		want FlushRequest
		typ  string // expected error type; "" when accepted
		loc  []any
	}{
		{"", all, "", nil},
		{"  \n", all, "", nil},
		{"null", all, "", nil},
		{"{}", all, "", nil},
		{`{"unknown": [1, {"x": null}]}`, all, "", nil},
		{`{"flush_training_data": false}`, with(func(r *FlushRequest) { r.FlushTrainingData = false }), "", nil},
		{`{"flush_test_data": 0}`, with(func(r *FlushRequest) { r.FlushTestData = false }), "", nil},
		{`{"flush_metrics": 1.0}`, all, "", nil},
		{`{"flush_metrics": "OFF"}`, with(func(r *FlushRequest) { r.FlushMetrics = false }), "", nil},
		{`{"flush_metrics": "No"}`, with(func(r *FlushRequest) { r.FlushMetrics = false }), "", nil},
		{`{"flush_metrics": "false"}`, with(func(r *FlushRequest) { r.FlushMetrics = false }), "", nil},
		{`{"flush_metrics": "0"}`, with(func(r *FlushRequest) { r.FlushMetrics = false }), "", nil},
		{`{"flush_training_data": false, "flush_metrics": "yes"}`, with(func(r *FlushRequest) { r.FlushTrainingData = false }), "", nil},
		{`{"flush_metrics": "True", "flush_test_data": "on", "flush_training_data": "1"}`, all, "", nil},
		{`{"reason": "nightly reset"}`, with(func(r *FlushRequest) { r.Reason = str("nightly reset") }), "", nil},
		{`{"reason": null}`, all, "", nil},
		{`{"flush_metrics": "not_a_boolean"}`, FlushRequest{}, "bool_parsing", []any{"body", "flush_metrics"}},
		{`{"flush_metrics": "\u0011"}`, FlushRequest{}, "bool_parsing", []any{"body", "flush_metrics"}},
		{`{"flush_metrics": "t"}`, FlushRequest{}, "bool_parsing", []any{"body", "flush_metrics"}},
		{`{"flush_metrics": 2}`, FlushRequest{}, "bool_parsing", []any{"body", "flush_metrics"}},
		{`{"flush_metrics": 0.5}`, FlushRequest{}, "bool_parsing", []any{"body", "flush_metrics"}},
		{`{"flush_metrics": NaN}`, FlushRequest{}, "bool_parsing", []any{"body", "flush_metrics"}},
		{`{"flush_test_data": null}`, FlushRequest{}, "bool_type", []any{"body", "flush_test_data"}},
		{`{"flush_test_data": []}`, FlushRequest{}, "bool_type", []any{"body", "flush_test_data"}},
		{`{"reason": 5}`, FlushRequest{}, "string_type", []any{"body", "reason"}},
		{`[]`, FlushRequest{}, "model_attributes_type", []any{"body"}},
		{`{"flush_metrics": tru}`, FlushRequest{}, "json_invalid", nil},
		{`{} x`, FlushRequest{}, "json_invalid", nil},
	}
	for _, tt := range tests {
		got, errs := DecodeFlushRequest([]byte(tt.body))
		checkErrors(t, errs)
		if tt.typ == "" {
			if len(errs) != 0 || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("%s: %+v %+v; want %+v", tt.body, got, errs, tt.want)
			}
			continue
		}
		if len(errs) != 1 || errs[0].Type != tt.typ || tt.loc != nil && !reflect.DeepEqual(errs[0].Loc, tt.loc) {
			t.Errorf("%s: %+v; want one %s at %v", tt.body, errs, tt.typ, tt.loc)
		}
		if got != (FlushRequest{}) {
			t.Errorf("%s: request %+v returned with an error", tt.body, got)
		}
	}
}

func TestFlushResponse(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	reason := "reset after an incident"
	counts := FlushResponse{Flushed: []FlushedTarget{{Target: features.TTFT, Train: 10, Test: 2}, {Target: features.TPOT, Train: 9, Test: 1}}}
	for _, tt := range []struct {
		name string
		req  FlushRequest
		msg  string
	}{
		{"everything", FlushRequest{FlushTrainingData: true, FlushTestData: true, FlushMetrics: true, Reason: &reason},
			"Successfully flushed: 10 TTFT and 9 TPOT training samples, 2 TTFT and 1 TPOT test samples, all metric scores"},
		{"test data", FlushRequest{FlushTestData: true}, "Successfully flushed: 2 TTFT and 1 TPOT test samples"},
		{"nothing", FlushRequest{}, "No data flushed"},
	} {
		r := counts.Complete(tt.req, at)
		if r.Message != tt.msg || !r.Success || r.FlushedAt != "2026-01-02T03:04:05Z" || r.Reason != tt.req.Reason ||
			r.MetricsCleared != tt.req.FlushMetrics || r.ModelsReset || r.Flushed[0].Train != 10 || r.Flushed[1].Test != 1 {
			t.Errorf("%s: %+v", tt.name, r)
		}
	}
	b, err := json.Marshal(counts.Complete(FlushRequest{}, at))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"success":true`, `"reason":null`, `"ttft_training_samples_flushed":10`, `"tpot_training_samples_flushed":9`,
		`"ttft_test_samples_flushed":2`, `"tpot_test_samples_flushed":1`, `"metrics_cleared":false`, `"models_reset":false`, `"flushed_at":"2026-01-02T03:04:05Z"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("%s lacks %s", b, key)
		}
	}
}

// The answer names every target it is given, in its order: the
// reference's fields for TTFT and TPOT, and the same for the others.
func TestFlushResponseEveryTarget(t *testing.T) {
	r := FlushResponse{Flushed: []FlushedTarget{{Target: features.TTFT, Train: 10, Test: 2},
		{Target: features.TPOT, Train: 9, Test: 1}, {Target: features.KVTransfer, Train: 45, Test: 5}}}
	r = r.Complete(FlushRequest{FlushTrainingData: true, FlushTestData: true}, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if want := "Successfully flushed: 10 TTFT, 9 TPOT and 45 KV-transfer training samples, 2 TTFT, 1 TPOT and 5 KV-transfer test samples"; r.Message != want {
		t.Errorf("message %q, want %q", r.Message, want)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"success":true,"flushed_at":"2026-01-02T03:04:05Z","reason":null,` +
		`"ttft_training_samples_flushed":10,"tpot_training_samples_flushed":9,"kv_transfer_training_samples_flushed":45,` +
		`"ttft_test_samples_flushed":2,"tpot_test_samples_flushed":1,"kv_transfer_test_samples_flushed":5,` +
		`"metrics_cleared":false,"message":"` + r.Message + `","models_reset":false}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}
