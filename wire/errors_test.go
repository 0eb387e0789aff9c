package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestProblemFieldErrors(t *testing.T) {
	loc := []any{"body", "requests", 3, "kv_cache_percentage"}
	tests := []struct {
		p    problem
		typ  string
		msg  string
		ctx  map[string]any
		json string // the encoded ctx
	}{
		{problem{code: probMissing}, "missing", "Field required", nil, ""},
		{ge(0, true), "greater_than_equal", "Input should be greater than or equal to 0", map[string]any{"ge": int64(0)}, `{"ge":0}`},
		{le(1, false), "less_than_equal", "Input should be less than or equal to 1", map[string]any{"le": 1.0}, `{"le":1}`},
		{le(1e9, true), "less_than_equal", "Input should be less than or equal to 1000000000", map[string]any{"le": int64(1e9)}, `{"le":1000000000}`},
		{le(3.6e6, false), "less_than_equal", "Input should be less than or equal to 3600000", map[string]any{"le": 3.6e6}, `{"le":3600000}`},
		{problem{code: probIntFromFloat}, "int_from_float", "Input should be a valid integer, got a number with a fractional part", nil, ""},
		{problem{code: probFiniteNumber}, "finite_number", "Input should be a finite number", nil, ""},
		{problem{code: probDatetimeParsing, reason: "input is too short"}, "datetime_parsing",
			"Input should be a valid datetime, input is too short", map[string]any{"error": "input is too short"}, `{"error":"input is too short"}`},
		{problem{code: probDuplicateKey, reason: "pod_type"}, "duplicate_key", `Key "pod_type" appears more than once in this object`,
			map[string]any{"key": "pod_type"}, `{"key":"pod_type"}`},
	}
	for _, tt := range tests {
		e := tt.p.fieldError(loc, 1.5)
		if e.Type != tt.typ || e.Msg != tt.msg || !reflect.DeepEqual(e.Ctx, tt.ctx) || !reflect.DeepEqual(e.Loc, loc) || e.Input != 1.5 {
			t.Errorf("%s: %+v", tt.typ, e)
		}
		if tt.json != "" {
			if b, _ := json.Marshal(e.Ctx); string(b) != tt.json {
				t.Errorf("%s: ctx encodes as %s, want %s", tt.typ, b, tt.json)
			}
		}
	}
	// Every code has a distinct pydantic-style type and message.
	types := map[string]bool{}
	for c := probMissing; c <= probDuplicateKey; c++ {
		e := problem{code: c, reason: "r"}.fieldError(loc, nil)
		if types[e.Type] || e.Type == "value_error" || !strings.HasPrefix(e.Msg, "Input should") && e.Type != "missing" && e.Type != "duplicate_key" {
			t.Errorf("code %d: type %q msg %q", c, e.Type, e.Msg)
		}
		types[e.Type] = true
	}
}

func TestJSONInvalidShape(t *testing.T) {
	b, err := json.Marshal(jsonInvalid(12, "Expecting value"))
	want := `{"type":"json_invalid","loc":["body",12],"msg":"JSON decode error","input":{},"ctx":{"error":"Expecting value"}}`
	if err != nil || string(b) != want {
		t.Errorf("json_invalid encodes as %s (%v), want %s", b, err, want)
	}
}

func TestListLengthError(t *testing.T) {
	short := listLengthError([]any{"body", "requests"}, 0, 10)
	long := listLengthError([]any{"body", "requests"}, 11, 10)
	if short.Type != "too_short" || short.Msg != "List should have at least 1 item after validation, not 0" {
		t.Errorf("too_short: %+v", short)
	}
	if long.Type != "too_long" || long.Msg != "List should have at most 10 items after validation, not 11" ||
		long.Ctx["max_length"] != 10 || long.Ctx["actual_length"] != 11 || long.Input != nil {
		t.Errorf("too_long: %+v", long)
	}
}

func TestLocPathAndDescribe(t *testing.T) {
	for want, loc := range map[string][]any{
		"entries[3].actual_ttft_ms": {"body", "entries", 3, "actual_ttft_ms"},
		"[2].pod_type":              {"body", 2, "pod_type"},
		"pod_type":                  {"body", "pod_type"},
		"requests[0]":               {"body", "requests", 0},
		"body":                      {"body"},
	} {
		if got := locPath(loc); got != want {
			t.Errorf("locPath(%v) = %q, want %q", loc, got, want)
		}
	}
	errs := []FieldError{{Loc: []any{"body", "entries", 3, "x"}, Msg: "Field required"}}
	for total, want := range map[int]string{
		1: "entries[3].x: Field required",
		2: "entries[3].x: Field required (and 1 more error)",
		5: "entries[3].x: Field required (and 4 more errors)",
	} {
		if got := describe(errs, total); got != want {
			t.Errorf("describe(total %d) = %q, want %q", total, got, want)
		}
	}
	// A body that is not JSON is described by where and why.
	if got, want := Describe([]FieldError{jsonInvalid(12, "Expecting value")}), "JSON decode error at byte 12: Expecting value"; got != want {
		t.Errorf("Describe(json_invalid) = %q, want %q", got, want)
	}
}

func TestLocBase(t *testing.T) {
	for _, tt := range []struct {
		b     locBase
		field string
		want  []any
	}{
		{topLevel, "", []any{"body"}},
		{topLevel, "x", []any{"body", "x"}},
		{locBase{index: 2}, "x", []any{"body", 2, "x"}},
		{locBase{list: "requests", index: 0}, "x", []any{"body", "requests", 0, "x"}},
		{locBase{list: "entries", index: 9}, "", []any{"body", "entries", 9}},
	} {
		if got := tt.b.loc(tt.field); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%+v.loc(%q) = %v, want %v", tt.b, tt.field, got, tt.want)
		}
	}
}
