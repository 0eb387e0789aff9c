package wire

import (
	"reflect"
	"testing"
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
