package wire

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/headroomhq/headroom/features"
)

// kv is one member of a test object, its value as raw JSON.
type kv struct{ key, lit string }

var (
	baseRowFields = []kv{
		{"kv_cache_percentage", "0.5"}, {"input_token_length", "512"}, {"num_request_waiting", "1"},
		{"num_request_running", "2"}, {"num_tokens_generated", "1"}, {"prefix_cache_score", "0.25"},
	}
	baseEntryFields = append(append([]kv(nil), baseRowFields...), kv{"actual_ttft_ms", "253"}, kv{"actual_tpot_ms", "0"})
	baseRow         = features.Row{KVCachePercentage: 0.5, InputTokenLength: 512, NumRequestWaiting: 1,
		NumRequestRunning: 2, NumTokensGenerated: 1, PrefixCacheScore: 0.25}
	baseSample = features.Sample{Row: baseRow, ActualTTFTMs: 253}
)

// object renders fields as a JSON object with key set to lit: replaced if
// present, appended if not, removed if lit is "". Several key/lit pairs may
// be given.
func object(fields []kv, edits ...string) string {
	out := append([]kv(nil), fields...)
	for i := 0; i+1 < len(edits); i += 2 {
		key, lit := edits[i], edits[i+1]
		found := false
		for j := 0; j < len(out); j++ {
			if out[j].key == key {
				found = true
				if lit == "" {
					out = append(out[:j], out[j+1:]...)
					j--
				} else {
					out[j].lit = lit
				}
			}
		}
		if !found && lit != "" {
			out = append(out, kv{key, lit})
		}
	}
	parts := make([]string, len(out))
	for i, f := range out {
		parts[i] = strconv.Quote(f.key) + ":" + f.lit
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// checkErrors asserts the invariants every reported error keeps.
func checkErrors(t *testing.T, errs []FieldError) {
	t.Helper()
	for _, e := range errs {
		if e.Type == "" || e.Msg == "" || len(e.Loc) == 0 || e.Loc[0] != "body" {
			t.Errorf("malformed error %+v", e)
		}
		if _, err := json.Marshal(e); err != nil {
			t.Errorf("error %+v is not JSON-encodable: %v", e, err)
		}
	}
}

// fieldCase is one value for one field and what every decoder must make of
// it. want adjusts the expected sample when the value is accepted.
type fieldCase struct {
	field, lit string
	typ        string // expected error type; "" when accepted
	input      any    // expected error input; nil: not checked
	ctx        map[string]any
	want       func(*features.Sample)
	rows       bool // applies to prediction rows
	entries    bool // applies to training entries
}

func both(c fieldCase) fieldCase     { c.rows, c.entries = true, true; return c }
func rowsOnly(c fieldCase) fieldCase { c.rows = true; return c }
func entriesOnly(c fieldCase) fieldCase {
	c.entries = true
	return c
}

var wholeObject = struct{}{} // marker: the input is the enclosing object

func fieldCases() []fieldCase {
	setTokens := func(v int64) func(*features.Sample) { return func(s *features.Sample) { s.Row.InputTokenLength = v } }
	setTransfer := func(set func(*features.Transfer)) func(*features.Sample) {
		return func(s *features.Sample) {
			s.Transfer = new(features.Transfer)
			set(s.Transfer)
		}
	}
	setKV := func(v float64) func(*features.Sample) {
		return func(s *features.Sample) { s.Row.KVCachePercentage = v }
	}
	cases := []fieldCase{
		// Integer fields.
		both(fieldCase{field: "input_token_length", lit: "200", want: setTokens(200)}),
		both(fieldCase{field: "input_token_length", lit: "200.0", want: setTokens(200)}),
		both(fieldCase{field: "input_token_length", lit: "2e2", want: setTokens(200)}),
		both(fieldCase{field: "input_token_length", lit: "2E+2", want: setTokens(200)}),
		both(fieldCase{field: "input_token_length", lit: `"200"`, want: setTokens(200)}),
		both(fieldCase{field: "input_token_length", lit: "0", want: setTokens(0)}),
		both(fieldCase{field: "input_token_length", lit: "200.5", typ: "int_from_float", input: 200.5}),
		both(fieldCase{field: "input_token_length", lit: `"200.5"`, typ: "int_parsing", input: "200.5"}),
		both(fieldCase{field: "input_token_length", lit: `"abc"`, typ: "int_parsing", input: "abc"}),
		both(fieldCase{field: "input_token_length", lit: "-1", typ: "greater_than_equal", input: int64(-1), ctx: map[string]any{"ge": int64(0)}}),
		both(fieldCase{field: "input_token_length", lit: "9223372036854775808", typ: "less_than_equal", input: 9.223372036854775808e18}),
		both(fieldCase{field: "input_token_length", lit: "1e400", typ: "less_than_equal", input: "1e400"}),
		both(fieldCase{field: "input_token_length", lit: "NaN", typ: "finite_number", input: "NaN"}),
		both(fieldCase{field: "input_token_length", lit: "-Infinity", typ: "finite_number", input: "-Infinity"}),
		both(fieldCase{field: "input_token_length", lit: `"NaN"`, typ: "finite_number", input: "NaN"}),
		both(fieldCase{field: "input_token_length", lit: "true", typ: "int_type", input: true}),
		both(fieldCase{field: "input_token_length", lit: "{}", typ: "int_type", input: map[string]any{}}),
		both(fieldCase{field: "input_token_length", lit: "[1]", typ: "int_type", input: []any{int64(1)}}),
		both(fieldCase{field: "input_token_length", lit: "null", typ: "int_type"}),
		both(fieldCase{field: "input_token_length", lit: "", typ: "missing", input: wholeObject}),
		// Ceilings: 10^9 on prediction rows, 10^8 on training entries.
		rowsOnly(fieldCase{field: "input_token_length", lit: "1000000000", want: setTokens(1e9)}),
		rowsOnly(fieldCase{field: "input_token_length", lit: "1000000001", typ: "less_than_equal", ctx: map[string]any{"le": int64(1e9)}}),
		entriesOnly(fieldCase{field: "input_token_length", lit: "100000000", want: setTokens(1e8)}),
		entriesOnly(fieldCase{field: "input_token_length", lit: "100000001", typ: "less_than_equal", ctx: map[string]any{"le": int64(1e8)}}),
		entriesOnly(fieldCase{field: "prefill_tokens_in_flight", lit: "2e8", typ: "less_than_equal"}),

		// Fractions.
		both(fieldCase{field: "kv_cache_percentage", lit: "0", want: setKV(0)}),
		both(fieldCase{field: "kv_cache_percentage", lit: "1", want: setKV(1)}),
		both(fieldCase{field: "kv_cache_percentage", lit: "0.3252", want: setKV(0.3252)}),
		both(fieldCase{field: "kv_cache_percentage", lit: `"0.75"`, want: setKV(0.75)}),
		both(fieldCase{field: "kv_cache_percentage", lit: "-0", want: setKV(0)}),
		both(fieldCase{field: "kv_cache_percentage", lit: "1.5", typ: "less_than_equal", input: 1.5, ctx: map[string]any{"le": 1.0}}),
		both(fieldCase{field: "kv_cache_percentage", lit: "-0.1", typ: "greater_than_equal", input: -0.1, ctx: map[string]any{"ge": 0.0}}),
		both(fieldCase{field: "prefix_cache_score", lit: "1.01", typ: "less_than_equal"}),
		both(fieldCase{field: "prefix_cache_score", lit: "-1", typ: "greater_than_equal"}),
		both(fieldCase{field: "kv_cache_percentage", lit: "NaN", typ: "finite_number", input: "NaN"}),
		both(fieldCase{field: "kv_cache_percentage", lit: "nan", typ: "finite_number", input: "nan"}),
		both(fieldCase{field: "kv_cache_percentage", lit: "Infinity", typ: "finite_number"}),
		both(fieldCase{field: "kv_cache_percentage", lit: "-Infinity", typ: "finite_number"}),
		both(fieldCase{field: "kv_cache_percentage", lit: "+Infinity", typ: "finite_number"}),
		both(fieldCase{field: "kv_cache_percentage", lit: "inf", typ: "finite_number"}),
		both(fieldCase{field: "kv_cache_percentage", lit: "-inf", typ: "finite_number"}),
		both(fieldCase{field: "kv_cache_percentage", lit: `"Infinity"`, typ: "finite_number", input: "Infinity"}),
		both(fieldCase{field: "kv_cache_percentage", lit: `"nan"`, typ: "finite_number"}),
		both(fieldCase{field: "kv_cache_percentage", lit: "1e400", typ: "finite_number", input: "1e400"}),
		both(fieldCase{field: "kv_cache_percentage", lit: `"abc"`, typ: "float_parsing", input: "abc"}),
		both(fieldCase{field: "kv_cache_percentage", lit: "{}", typ: "float_type"}),
		both(fieldCase{field: "kv_cache_percentage", lit: "false", typ: "float_type"}),
		both(fieldCase{field: "kv_cache_percentage", lit: "null", typ: "float_type"}),
		both(fieldCase{field: "prefix_cache_score", lit: "", typ: "missing", input: wholeObject}),

		// pod_type: any string or null.
		both(fieldCase{field: "pod_type", lit: `"prefill"`, want: func(s *features.Sample) { s.Row.PodType = "prefill" }}),
		both(fieldCase{field: "pod_type", lit: `"monolithic"`, want: func(s *features.Sample) { s.Row.PodType = "monolithic" }}),
		both(fieldCase{field: "pod_type", lit: `"r\u00f4le \"x\""`, want: func(s *features.Sample) { s.Row.PodType = `rôle "x"` }}),
		both(fieldCase{field: "pod_type", lit: "null", want: func(*features.Sample) {}}),
		both(fieldCase{field: "pod_type", lit: "7", typ: "string_type", input: int64(7)}),

		// Optional integers: absent or null means 0.
		both(fieldCase{field: "prefill_tokens_in_flight", lit: "4809", want: func(s *features.Sample) { s.Row.PrefillTokensInFlight = 4809 }}),
		both(fieldCase{field: "prefill_tokens_in_flight", lit: "null", want: func(*features.Sample) {}}),
		both(fieldCase{field: "prefill_tokens_in_flight", lit: "-1", typ: "greater_than_equal", input: int64(-1)}),
		both(fieldCase{field: "decode_tokens_in_flight", lit: "-5", typ: "greater_than_equal"}),
		both(fieldCase{field: "decode_tokens_in_flight", lit: "1.5", typ: "int_from_float"}),
		both(fieldCase{field: "encoder_input_size", lit: "-1", typ: "greater_than_equal"}),
		// The client checks matched <= input; the server does not.
		both(fieldCase{field: "encoder_matched_size", lit: "3", want: func(s *features.Sample) { s.Row.EncoderMatchedSize = 3 }}),

		// Unknown fields are ignored whatever they hold.
		both(fieldCase{field: "future_field", lit: `{"a":[1,{"b":null}],"c":"\u00e9"}`, want: func(*features.Sample) {}}),
		both(fieldCase{field: "future_number", lit: "NaN", want: func(*features.Sample) {}}),
		both(fieldCase{field: "Kv_Cache_Percentage", lit: "7", want: func(*features.Sample) {}}),

		// Training fields are unknown in a prediction row.
		rowsOnly(fieldCase{field: "actual_ttft_ms", lit: "NaN", want: func(*features.Sample) {}}),
		rowsOnly(fieldCase{field: "timestamp", lit: "5", want: func(*features.Sample) {}}),

		// Labels.
		entriesOnly(fieldCase{field: "actual_ttft_ms", lit: "253.5", want: func(s *features.Sample) { s.ActualTTFTMs = 253.5 }}),
		entriesOnly(fieldCase{field: "actual_tpot_ms", lit: `"11.7"`, want: func(s *features.Sample) { s.ActualTPOTMs = 11.7 }}),
		entriesOnly(fieldCase{field: "actual_ttft_ms", lit: "3600000", want: func(s *features.Sample) { s.ActualTTFTMs = 3.6e6 }}),
		entriesOnly(fieldCase{field: "actual_ttft_ms", lit: "3600001", typ: "less_than_equal", ctx: map[string]any{"le": 3.6e6}}),
		entriesOnly(fieldCase{field: "actual_tpot_ms", lit: "-0.5", typ: "greater_than_equal"}),
		entriesOnly(fieldCase{field: "actual_ttft_ms", lit: "Infinity", typ: "finite_number", input: "Infinity"}),
		entriesOnly(fieldCase{field: "actual_tpot_ms", lit: "NaN", typ: "finite_number"}),
		entriesOnly(fieldCase{field: "actual_ttft_ms", lit: "1e400", typ: "finite_number"}),
		entriesOnly(fieldCase{field: "actual_ttft_ms", lit: "null", typ: "float_type"}),
		entriesOnly(fieldCase{field: "actual_tpot_ms", lit: "", typ: "missing", input: wholeObject}),
		entriesOnly(fieldCase{field: "predicted_ttft_ms", lit: "84.2", want: func(s *features.Sample) { s.PredictedTTFTMs = 84.2 }}),
		entriesOnly(fieldCase{field: "predicted_tpot_ms", lit: "1e300", want: func(s *features.Sample) { s.PredictedTPOTMs = 1e300 }}),
		entriesOnly(fieldCase{field: "predicted_tpot_ms", lit: "null", want: func(*features.Sample) {}}),
		entriesOnly(fieldCase{field: "predicted_ttft_ms", lit: "-1", typ: "greater_than_equal"}),
		entriesOnly(fieldCase{field: "predicted_ttft_ms", lit: "-Infinity", typ: "finite_number"}),

		// Timestamps.
		entriesOnly(fieldCase{field: "timestamp", lit: `"2026-11-29T15:42:36.709963272Z"`, want: func(s *features.Sample) {
			s.Timestamp = time.Date(2026, 11, 29, 15, 42, 36, 709963272, time.UTC)
		}}),
		entriesOnly(fieldCase{field: "timestamp", lit: `"2026-11-29T16:42:36+01:00"`, want: func(s *features.Sample) {
			s.Timestamp = time.Date(2026, 11, 29, 15, 42, 36, 0, time.UTC)
		}}),
		entriesOnly(fieldCase{field: "timestamp", lit: `"2026-11-29T15:42:36"`, want: func(s *features.Sample) {
			s.Timestamp = time.Date(2026, 11, 29, 15, 42, 36, 0, time.UTC)
		}}),
		entriesOnly(fieldCase{field: "timestamp", lit: "null", want: func(*features.Sample) {}}),
		// Issue 11 row 1: times the store cannot hold failed the whole batch.
		entriesOnly(fieldCase{field: "timestamp", lit: `"9999-12-31T23:59:59Z"`, typ: "datetime_parsing", input: "9999-12-31T23:59:59Z"}),
		entriesOnly(fieldCase{field: "timestamp", lit: `"1500-01-01T00:00:00Z"`, typ: "datetime_parsing", input: "1500-01-01T00:00:00Z"}),
		entriesOnly(fieldCase{field: "timestamp", lit: `"0001-01-01T00:00:00Z"`, typ: "datetime_parsing", input: "0001-01-01T00:00:00Z"}),
		entriesOnly(fieldCase{field: "timestamp", lit: `"2262-04-12T00:00:00Z"`, typ: "datetime_parsing", input: "2262-04-12T00:00:00Z"}),
		entriesOnly(fieldCase{field: "timestamp", lit: `"1677-09-21T00:00:00Z"`, typ: "datetime_parsing", input: "1677-09-21T00:00:00Z"}),
		entriesOnly(fieldCase{field: "timestamp", lit: `"2262-04-11T23:47:16+00:00"`, want: func(s *features.Sample) {
			s.Timestamp = time.Date(2262, 4, 11, 23, 47, 16, 0, time.UTC)
		}}),
		entriesOnly(fieldCase{field: "timestamp", lit: `"1677-09-21T00:12:44Z"`, want: func(s *features.Sample) {
			s.Timestamp = time.Date(1677, 9, 21, 0, 12, 44, 0, time.UTC)
		}}),
		// Issue 11 row 7: a 10 MB pod_type was stored, 18 samples made a
		// 236 MB store. Labels are short; the limit is MaxPodTypeLen.
		both(fieldCase{field: "pod_type", lit: `"` + strings.Repeat("p", MaxPodTypeLen) + `"`, want: func(s *features.Sample) { s.Row.PodType = strings.Repeat("p", MaxPodTypeLen) }}),
		both(fieldCase{field: "pod_type", lit: `"` + strings.Repeat("p", MaxPodTypeLen+1) + `"`, typ: "string_too_long", ctx: map[string]any{"max_length": MaxPodTypeLen}}),
		both(fieldCase{field: "pod_type", lit: `"` + strings.Repeat("\u00e9", MaxPodTypeLen) + `"`, want: func(s *features.Sample) { s.Row.PodType = strings.Repeat("é", MaxPodTypeLen) }}),
		both(fieldCase{field: "pod_type", lit: `"` + strings.Repeat("x", 1<<20) + `"`, typ: "string_too_long"}),
		entriesOnly(fieldCase{field: "timestamp", lit: `"not a time"`, typ: "datetime_parsing", input: "not a time"}),
		entriesOnly(fieldCase{field: "timestamp", lit: "1764430956", typ: "datetime_type"}),

		// KV transfer fields, one at a time (the rules that tie them
		// together are in TestDecodeTransfer). Each makes the sample's
		// Transfer; in a prediction row they are unknown and ignored.
		entriesOnly(fieldCase{field: "kv_transfer_tokens", lit: "400", want: setTransfer(func(tr *features.Transfer) { tr.Tokens = 400 })}),
		entriesOnly(fieldCase{field: "kv_transfer_tokens", lit: "512", want: setTransfer(func(tr *features.Transfer) { tr.Tokens = 512 })}),
		entriesOnly(fieldCase{field: "kv_transfer_tokens", lit: "513", typ: "less_than_equal", input: int64(513), ctx: map[string]any{"le": int64(512)}}),
		entriesOnly(fieldCase{field: "kv_transfer_tokens", lit: "-1", typ: "greater_than_equal"}),
		entriesOnly(fieldCase{field: "kv_transfer_tokens", lit: "1.5", typ: "int_from_float"}),
		entriesOnly(fieldCase{field: "kv_transfer_tokens", lit: "null", want: func(*features.Sample) {}}),
		entriesOnly(fieldCase{field: "kv_bytes_per_token", lit: "163840", want: setTransfer(func(tr *features.Transfer) { tr.BytesPerToken = 163840 })}),
		entriesOnly(fieldCase{field: "kv_bytes_per_token", lit: "-1", typ: "greater_than_equal"}),
		entriesOnly(fieldCase{field: "kv_bytes_per_token", lit: "1e12", typ: "less_than_equal", ctx: map[string]any{"le": float64(MaxKVBytesPerToken)}}),
		entriesOnly(fieldCase{field: "kv_bytes_per_token", lit: "NaN", typ: "finite_number"}),
		entriesOnly(fieldCase{field: "concurrent_transfers", lit: "3", want: setTransfer(func(tr *features.Transfer) { tr.Concurrent = 3 })}),
		entriesOnly(fieldCase{field: "concurrent_transfers", lit: "-3", typ: "greater_than_equal"}),
		entriesOnly(fieldCase{field: "actual_kv_transfer_ms", lit: "-2", typ: "greater_than_equal"}),
		entriesOnly(fieldCase{field: "actual_kv_transfer_ms", lit: "Infinity", typ: "finite_number"}),
		entriesOnly(fieldCase{field: "actual_kv_transfer_ms", lit: "0", want: setTransfer(func(*features.Transfer) {})}),
		entriesOnly(fieldCase{field: "prefill_pod", lit: `"vllm-p-7f9c"`, want: setTransfer(func(tr *features.Transfer) { tr.PrefillPod = "vllm-p-7f9c" })}),
		entriesOnly(fieldCase{field: "decode_pod", lit: `"vllm-d-0"`, want: setTransfer(func(tr *features.Transfer) { tr.DecodePod = "vllm-d-0" })}),
		entriesOnly(fieldCase{field: "decode_pod", lit: "null", want: func(*features.Sample) {}}),
		entriesOnly(fieldCase{field: "decode_pod", lit: "7", typ: "string_type"}),
		entriesOnly(fieldCase{field: "decode_pod", lit: `""`, typ: "string_too_short"}),
		entriesOnly(fieldCase{field: "prefill_pod", lit: `"` + strings.Repeat("p", MaxPodNameLen+1) + `"`, typ: "string_too_long", ctx: map[string]any{"max_length": MaxPodNameLen}}),
		entriesOnly(fieldCase{field: "decode_topology", lit: `{"node":"n1","rack":"r1","zone":"z","region":"eu","future":[1]}`,
			want: setTransfer(func(tr *features.Transfer) {
				tr.Decode = features.Topology{Node: "n1", Rack: "r1", Zone: "z", Region: "eu"}
			})}),
		entriesOnly(fieldCase{field: "prefill_topology", lit: `{"node":"n1","zone":null}`,
			want: setTransfer(func(tr *features.Transfer) { tr.Prefill = features.Topology{Node: "n1"} })}),
		entriesOnly(fieldCase{field: "prefill_topology", lit: "null", want: func(*features.Sample) {}}),
		entriesOnly(fieldCase{field: "prefill_topology", lit: `"rack-1"`, typ: "model_attributes_type", input: "rack-1"}),
		entriesOnly(fieldCase{field: "decode_topology", lit: `[1]`, typ: "model_attributes_type"}),
		rowsOnly(fieldCase{field: "prefill_topology", lit: `"rack-1"`, want: func(*features.Sample) {}}),
		rowsOnly(fieldCase{field: "actual_kv_transfer_ms", lit: "NaN", want: func(*features.Sample) {}}),
	}
	// Every integer field follows the same rules.
	for _, f := range []string{"num_request_waiting", "num_request_running", "num_tokens_generated",
		"prefill_tokens_in_flight", "decode_tokens_in_flight", "encoder_input_size", "encoder_matched_size"} {
		cases = append(cases,
			both(fieldCase{field: f, lit: "3.5", typ: "int_from_float"}),
			both(fieldCase{field: f, lit: "-1", typ: "greater_than_equal"}),
			both(fieldCase{field: f, lit: "Infinity", typ: "finite_number"}),
			both(fieldCase{field: f, lit: `"x"`, typ: "int_parsing"}),
		)
	}
	return cases
}

// checkFieldError asserts that errs is exactly one error of the case's type
// at loc.
func checkFieldError(t *testing.T, c fieldCase, errs []FieldError, loc []any, whole string) {
	t.Helper()
	checkErrors(t, errs)
	if len(errs) != 1 {
		t.Fatalf("%s=%s: %d errors %+v, want one %s", c.field, c.lit, len(errs), errs, c.typ)
	}
	e := errs[0]
	if e.Type != c.typ || !reflect.DeepEqual(e.Loc, loc) {
		t.Errorf("%s=%s: error %s at %v, want %s at %v", c.field, c.lit, e.Type, e.Loc, c.typ, loc)
	}
	switch c.input {
	case nil:
	case wholeObject:
		var want any
		if err := json.Unmarshal([]byte(whole), &want); err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(e.Input)
		wantJSON, _ := json.Marshal(want)
		if string(got) != string(wantJSON) {
			t.Errorf("%s=%s: input %s, want the object %s", c.field, c.lit, got, wantJSON)
		}
	default:
		if !reflect.DeepEqual(e.Input, c.input) {
			t.Errorf("%s=%s: input %#v, want %#v", c.field, c.lit, e.Input, c.input)
		}
	}
	for k, v := range c.ctx {
		if !reflect.DeepEqual(e.Ctx[k], v) {
			t.Errorf("%s=%s: ctx %v, want %s=%#v", c.field, c.lit, e.Ctx, k, v)
		}
	}
}

func TestDecodePredictRequestFields(t *testing.T) {
	for _, c := range fieldCases() {
		if !c.rows {
			continue
		}
		body := object(baseRowFields, c.field, c.lit)
		row, errs := DecodePredictRequest([]byte(body))
		if c.typ != "" {
			checkFieldError(t, c, errs, []any{"body", c.field}, body)
			if row != (features.Row{}) {
				t.Errorf("%s=%s: rejected row returned as %+v", c.field, c.lit, row)
			}
			continue
		}
		want := baseSample
		c.want(&want)
		if len(errs) != 0 || row != want.Row {
			t.Errorf("%s=%s: got %+v, %+v; want %+v", c.field, c.lit, row, errs, want.Row)
		}
	}
}

func TestDecodeBulkPredictRequestFields(t *testing.T) {
	for _, clamp := range []bool{false, true} {
		for _, c := range fieldCases() {
			if !c.rows {
				continue
			}
			bad := object(baseRowFields, c.field, c.lit)
			body := `{"requests":[` + object(baseRowFields) + "," + bad + `]}`
			dst := make([]features.Row, 1, 4) // appended to, never overwritten
			dst[0].PodType = "keep"
			rows, clamped, errs := DecodeBulkPredictRequest([]byte(body), MaxBulkRows, clamp, dst)
			if rows[0].PodType != "keep" {
				t.Fatalf("dst[0] overwritten")
			}
			isInFlight := c.field == "prefill_tokens_in_flight" || c.field == "decode_tokens_in_flight"
			if clamp && isInFlight && c.typ == "greater_than_equal" {
				if len(errs) != 0 || clamped != 1 || len(rows) != 3 || rows[2] != baseRow {
					t.Errorf("clamp %s=%s: rows %+v clamped %d errs %+v; want the base row, 1 clamped", c.field, c.lit, rows, clamped, errs)
				}
				continue
			}
			if c.typ != "" {
				checkFieldError(t, c, errs, []any{"body", "requests", 1, c.field}, bad)
				if len(rows) != 1 || clamped != 0 {
					t.Errorf("%s=%s: invalid request returned %d rows, %d clamped", c.field, c.lit, len(rows), clamped)
				}
				continue
			}
			want := baseSample
			c.want(&want)
			if len(errs) != 0 || len(rows) != 3 || rows[1] != baseRow || rows[2] != want.Row || clamped != 0 {
				t.Errorf("%s=%s: got %+v, %d, %+v; want [keep, base, %+v]", c.field, c.lit, rows, clamped, errs, want.Row)
			}
		}
	}
}

func TestDecodeSamplesFields(t *testing.T) {
	for _, c := range fieldCases() {
		if !c.entries {
			continue
		}
		bad := object(baseEntryFields, c.field, c.lit)
		bodies := []struct {
			form, body string
			index      int
			loc        []any
			detail     string
		}{
			{"envelope", `{"entries":[` + object(baseEntryFields) + "," + bad + `]}`, 1,
				[]any{"body", "entries", 1, c.field}, "entries[1]." + c.field},
			{"array", `[` + object(baseEntryFields) + "," + bad + `]`, 1,
				[]any{"body", 1, c.field}, "[1]." + c.field},
			{"single", bad, 0, []any{"body", c.field}, c.field},
		}
		for _, b := range bodies {
			samples, rejected, envErrs := DecodeSamples([]byte(b.body), 0)
			if len(envErrs) != 0 {
				t.Fatalf("%s %s=%s: envelope errors %+v", b.form, c.field, c.lit, envErrs)
			}
			good := samples
			if b.form != "single" {
				if len(samples) == 0 || !reflect.DeepEqual(samples[0], baseSample) {
					t.Fatalf("%s %s=%s: the valid entry was not returned first: %+v", b.form, c.field, c.lit, samples)
				}
				good = samples[1:]
			}
			if c.typ != "" {
				if len(good) != 0 || len(rejected) != 1 {
					t.Fatalf("%s %s=%s: samples %+v, rejected %+v; want one rejection", b.form, c.field, c.lit, good, rejected)
				}
				r := rejected[0]
				checkFieldError(t, c, r.Errors, b.loc, bad)
				if r.Index != b.index || !strings.HasPrefix(r.Detail, b.detail+": ") || r.Detail != b.detail+": "+r.Errors[0].Msg {
					t.Errorf("%s %s=%s: rejection %d %q, want index %d and detail %q: <msg>", b.form, c.field, c.lit, r.Index, r.Detail, b.index, b.detail)
				}
				continue
			}
			want := baseSample
			c.want(&want)
			if len(rejected) != 0 || len(good) != 1 || !reflect.DeepEqual(good[0], want) {
				t.Errorf("%s %s=%s: got %+v, rejected %+v; want %+v", b.form, c.field, c.lit, good, rejected, want)
			}
		}
	}
}

func TestDuplicateKeys(t *testing.T) {
	row := `{"kv_cache_percentage":0.5,"input_token_length":1,"input_token_length":2,"num_request_waiting":1,
		"num_request_running":2,"num_tokens_generated":1,"prefix_cache_score":0.25,"x":1,"x":2}`
	_, errs := DecodePredictRequest([]byte(row))
	if len(errs) != 1 || errs[0].Type != "duplicate_key" || !reflect.DeepEqual(errs[0].Loc, []any{"body", "input_token_length"}) ||
		!strings.Contains(errs[0].Msg, `"input_token_length"`) || errs[0].Input != int64(2) {
		t.Errorf("duplicate in a row: %+v", errs)
	}
	_, _, errs = DecodeBulkPredictRequest([]byte(`{"requests":[`+row+`]}`), 0, false, nil)
	if len(errs) != 1 || errs[0].Type != "duplicate_key" || !reflect.DeepEqual(errs[0].Loc, []any{"body", "requests", 0, "input_token_length"}) {
		t.Errorf("duplicate in a bulk row: %+v", errs)
	}
	r := object(baseRowFields)
	_, _, errs = DecodeBulkPredictRequest([]byte(`{"requests":[`+r+`],"requests":[`+r+`]}`), 0, false, nil)
	if len(errs) != 1 || errs[0].Type != "duplicate_key" || !reflect.DeepEqual(errs[0].Loc, []any{"body", "requests"}) {
		t.Errorf("duplicate requests: %+v", errs)
	}
	e := object(baseEntryFields)
	_, _, envErrs := DecodeSamples([]byte(`{"entries":[`+e+`],"entries":[]}`), 0)
	if len(envErrs) != 1 || envErrs[0].Type != "duplicate_key" {
		t.Errorf("duplicate entries: %+v", envErrs)
	}
	_, errs = DecodeFlushRequest([]byte(`{"flush_metrics":true,"flush_metrics":false}`))
	if len(errs) != 1 || errs[0].Type != "duplicate_key" {
		t.Errorf("duplicate flush flag: %+v", errs)
	}
}

// bodyCase is a body-level situation and the single error it gives.
type bodyCase struct {
	name, body string
	typ        string
	loc        []any
}

func jsonCases() []bodyCase {
	deep := strings.Repeat("[", 70) + strings.Repeat("]", 70)
	return []bodyCase{
		{"truncated", `{"requests":[{"kv_cache_percentage":0.5`, "json_invalid", []any{"body", 39}},
		{"trailing garbage", `{"requests":[]} x`, "json_invalid", []any{"body", 16}},
		{"two values", `{} {}`, "json_invalid", []any{"body", 3}},
		{"single quotes", `{'requests':[]}`, "json_invalid", []any{"body", 1}},
		{"trailing comma", `{"requests":[],}`, "json_invalid", []any{"body", 15}},
		{"bad utf-8", "{\"requests\":[],\"x\":\"\xff\"}", "json_invalid", []any{"body", 20}},
		{"deep unknown", `{"x":` + deep + `,"requests":[]}`, "json_invalid", nil},
		{"bare word", `hello`, "json_invalid", []any{"body", 0}},
		// Keys read by prediction (see entryDecoder.predictedKey) and by scanning.
		{"no colon after a predicted key", `{"requests":[{"kv_cache_percentage" 1}]}`, "json_invalid", []any{"body", 36}},
		{"no colon after a key", `{"requests":[{"kv_cache_percentagex" 1}]}`, "json_invalid", []any{"body", 37}},
		{"key cut short", `{"requests":[{"kv_cache_percentage`, "json_invalid", []any{"body", 14}},
		{"key at the end", `{"requests":[{"kv_cache_percentage"`, "json_invalid", []any{"body", 35}},
		{"empty", ``, "missing", []any{"body"}},
		{"white space", " \n\t", "missing", []any{"body"}},
		{"null", `null`, "missing", []any{"body"}},
		{"string", `"x"`, "model_attributes_type", []any{"body"}},
		{"number", `1`, "model_attributes_type", []any{"body"}},
		{"nan", `NaN`, "model_attributes_type", []any{"body"}},
	}
}

func checkBodyError(t *testing.T, name string, c bodyCase, errs []FieldError) {
	t.Helper()
	checkErrors(t, errs)
	if len(errs) != 1 || errs[0].Type != c.typ || c.loc != nil && !reflect.DeepEqual(errs[0].Loc, c.loc) {
		t.Errorf("%s %s: %+v, want one %s at %v", name, c.name, errs, c.typ, c.loc)
		return
	}
	if c.typ == "json_invalid" {
		e := errs[0]
		if e.Msg != "JSON decode error" || e.Ctx["error"] == "" || !reflect.DeepEqual(e.Input, map[string]any{}) {
			t.Errorf("%s %s: json_invalid shape %+v", name, c.name, e)
		}
	}
}

func TestBodyLevelErrors(t *testing.T) {
	for _, c := range jsonCases() {
		_, _, errs := DecodeBulkPredictRequest([]byte(c.body), MaxBulkRows, true, nil)
		checkBodyError(t, "bulk", c, errs)
		_, errs = DecodePredictRequest([]byte(c.body))
		checkBodyError(t, "predict", c, errs)
		s, r, errs := DecodeSamples([]byte(c.body), 0)
		if c.name == "array" {
			continue
		}
		checkBodyError(t, "samples", c, errs)
		if s != nil || r != nil {
			t.Errorf("samples %s: returned %v, %v with an envelope error", c.name, s, r)
		}
	}
	// An invalid body hides every validation error: one json_invalid only.
	bad := `{"requests":[{"kv_cache_percentage":7},{"kv_cache_percentage":NaN}` // unterminated
	if _, _, errs := DecodeBulkPredictRequest([]byte(bad), 0, false, nil); len(errs) != 1 || errs[0].Type != "json_invalid" {
		t.Errorf("invalid JSON with invalid rows: %+v", errs)
	}
	if _, _, errs := DecodeSamples([]byte(`[`+object(baseEntryFields)+`,{"actual_ttft_ms":-1}`), 0); len(errs) != 1 || errs[0].Type != "json_invalid" {
		t.Errorf("invalid JSON after entries: %+v", errs)
	}
}

func TestDecodeBulkPredictRequestList(t *testing.T) {
	row := object(baseRowFields)
	rowsOf := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = row
		}
		return `{"requests":[` + strings.Join(parts, ",") + `]}`
	}
	tests := []struct {
		name    string
		body    string
		maxRows int
		rows    int
		typ     string
		loc     []any
		ctx     map[string]any
	}{
		{"one", rowsOf(1), 10, 1, "", nil, nil},
		{"at the limit", rowsOf(10), 10, 10, "", nil, nil},
		{"no limit", rowsOf(50), 0, 50, "", nil, nil},
		{"other keys ignored", `{"model":"x","requests":[` + row + `],"n":{"a":[]}}`, 10, 1, "", nil, nil},
		{"empty", `{"requests":[]}`, 10, 0, "too_short", []any{"body", "requests"},
			map[string]any{"min_length": 1, "actual_length": 0}},
		{"too long", rowsOf(11), 10, 0, "too_long", []any{"body", "requests"},
			map[string]any{"max_length": 10, "actual_length": 11}},
		{"missing", `{"request":[` + row + `]}`, 10, 0, "missing", []any{"body", "requests"}, nil},
		{"not a list", `{"requests":` + row + `}`, 10, 0, "list_type", []any{"body", "requests"}, nil},
		{"null list", `{"requests":null}`, 10, 0, "list_type", []any{"body", "requests"}, nil},
		{"row not an object", `{"requests":[` + row + `,[1]]}`, 10, 0, "model_attributes_type", []any{"body", "requests", 1}, nil},
		{"top-level array", `[` + row + `]`, 10, 0, "model_attributes_type", []any{"body"}, nil},
	}
	for _, tt := range tests {
		rows, _, errs := DecodeBulkPredictRequest([]byte(tt.body), tt.maxRows, false, nil)
		checkErrors(t, errs)
		if tt.typ == "" {
			if len(errs) != 0 || len(rows) != tt.rows {
				t.Errorf("%s: %d rows, errors %+v; want %d rows", tt.name, len(rows), errs, tt.rows)
			}
			for _, r := range rows {
				if r != baseRow {
					t.Errorf("%s: row %+v", tt.name, r)
				}
			}
			continue
		}
		if len(errs) != 1 || errs[0].Type != tt.typ || !reflect.DeepEqual(errs[0].Loc, tt.loc) || len(rows) != 0 {
			t.Errorf("%s: rows %d, errors %+v; want one %s at %v", tt.name, len(rows), errs, tt.typ, tt.loc)
			continue
		}
		for k, v := range tt.ctx {
			if errs[0].Ctx[k] != v {
				t.Errorf("%s: ctx %v, want %s=%v", tt.name, errs[0].Ctx, k, v)
			}
		}
	}
}

func TestDecodeBulkPredictRequestClamp(t *testing.T) {
	row := object(baseRowFields, "prefill_tokens_in_flight", "-3", "decode_tokens_in_flight", `"-1"`)
	body := []byte(`{"requests":[` + row + `,` + row + `]}`)
	rows, clamped, errs := DecodeBulkPredictRequest(body, 0, true, nil)
	if len(errs) != 0 || clamped != 4 || len(rows) != 2 || rows[0] != baseRow || rows[1] != baseRow {
		t.Errorf("clamp: rows %+v clamped %d errors %+v; want 2 base rows, 4 clamped", rows, clamped, errs)
	}
	rows, clamped, errs = DecodeBulkPredictRequest(body, 0, false, nil)
	if len(errs) != 4 || clamped != 0 || len(rows) != 0 {
		t.Errorf("no clamp: rows %d clamped %d errors %d; want 4 errors", len(rows), clamped, len(errs))
	}
	// Clamping covers negative counts only; other fields and other faults
	// still fail, and clamped is 0 on failure.
	for _, edit := range [][2]string{
		{"input_token_length", "-1"}, {"prefill_tokens_in_flight", "-1.5"}, {"decode_tokens_in_flight", "-Infinity"},
	} {
		bad := object(baseRowFields, edit[0], edit[1], "prefill_tokens_in_flight", "-2")
		if edit[0] == "prefill_tokens_in_flight" {
			bad = object(baseRowFields, edit[0], edit[1])
		}
		_, clamped, errs := DecodeBulkPredictRequest([]byte(`{"requests":[`+row+","+bad+`]}`), 0, true, nil)
		if len(errs) != 1 || !reflect.DeepEqual(errs[0].Loc, []any{"body", "requests", 1, edit[0]}) || clamped != 0 {
			t.Errorf("clamp with %s=%s: clamped %d errors %+v; want one error at that field", edit[0], edit[1], clamped, errs)
		}
	}
	// POST /predict keeps the reference's 422 (docs/PROTOCOL.md §4.2).
	if _, errs := DecodePredictRequest([]byte(row)); len(errs) != 2 || errs[0].Type != "greater_than_equal" {
		t.Errorf("predict with negative in-flight: %+v", errs)
	}
}

func TestErrorCap(t *testing.T) {
	bad := object(baseRowFields, "kv_cache_percentage", "2")
	parts := make([]string, 500)
	for i := range parts {
		parts[i] = bad
	}
	body := []byte(`{"requests":[` + strings.Join(parts, ",") + `]}`)
	dec := Decoder{Limits: DecodeLimits{MaxErrors: 7}}
	_, _, errs := dec.DecodeBulkPredictRequest(body, 0, false, nil)
	if len(errs) != 7 {
		t.Errorf("%d errors reported, want the cap of 7", len(errs))
	}
	// The cap must not hide a syntax error later in the body.
	_, _, errs = dec.DecodeBulkPredictRequest(append(body[:len(body)-2:len(body)-2], ']', ']'), 0, false, nil)
	if len(errs) != 1 || errs[0].Type != "json_invalid" {
		t.Errorf("syntax error after the cap: %+v", errs)
	}
	// Training bodies: every rejection is reported and described, but only
	// the first MaxErrors carry their error list.
	entries := make([]string, 20)
	for i := range entries {
		entries[i] = object(baseEntryFields, "actual_ttft_ms", "-1")
	}
	samples, rejected, envErrs := dec.DecodeSamples([]byte(`{"entries":[`+strings.Join(entries, ",")+`]}`), 0)
	if len(samples) != 0 || len(rejected) != 20 || len(envErrs) != 0 {
		t.Fatalf("samples %d rejected %d envelope %+v", len(samples), len(rejected), envErrs)
	}
	for i, r := range rejected {
		if r.Index != i || r.Detail == "" || (i < 7) != (r.Errors != nil) {
			t.Errorf("rejection %d: index %d detail %q errors %v", i, r.Index, r.Detail, r.Errors)
		}
	}
}

func TestDecodeSamplesEnvelope(t *testing.T) {
	e := object(baseEntryFields)
	tests := []struct {
		name       string
		body       string
		maxEntries int
		samples    int
		rejected   int
		envType    string // expected envelope error from DecodeSamples
		bulkType   string // expected envelope error from DecodeTrainingBulk
	}{
		{"envelope", `{"entries":[` + e + `,` + e + `]}`, 0, 2, 0, "", ""},
		{"envelope, key not first", `{"version":2,"entries":[` + e + `]}`, 0, 1, 0, "", ""},
		{"empty envelope", `{"entries":[]}`, 0, 0, 0, "", ""},
		{"array", `[` + e + `,` + e + `,` + e + `]`, 0, 3, 0, "", "model_attributes_type"},
		{"empty array", `[]`, 0, 0, 0, "", "model_attributes_type"},
		{"single", e, 0, 1, 0, "", "missing"},
		{"single invalid", `{}`, 0, 0, 1, "", "missing"},
		{"entries null", `{"entries":null}`, 0, 0, 0, "list_type", "list_type"},
		{"entries object", `{"entries":` + e + `}`, 0, 0, 0, "list_type", "list_type"},
		{"at the limit", `{"entries":[` + e + `,` + e + `]}`, 2, 2, 0, "", ""},
		{"too many", `{"entries":[` + e + `,` + e + `,` + e + `]}`, 2, 0, 0, "too_long", "too_long"},
		{"array too long", `[` + e + `,` + e + `,` + e + `]`, 2, 0, 0, "too_long", "model_attributes_type"},
		{"entry not an object", `{"entries":[` + e + `,"x",7]}`, 0, 1, 2, "", ""},
		{"string body", `"entries"`, 0, 0, 0, "model_attributes_type", "model_attributes_type"},
	}
	for _, tt := range tests {
		for _, bulk := range []bool{false, true} {
			decode, wantType := DecodeSamples, tt.envType
			if bulk {
				decode, wantType = DecodeTrainingBulk, tt.bulkType
			}
			samples, rejected, envErrs := decode([]byte(tt.body), tt.maxEntries)
			checkErrors(t, envErrs)
			if wantType != "" {
				if len(envErrs) != 1 || envErrs[0].Type != wantType || samples != nil || rejected != nil {
					t.Errorf("%s (bulk %v): envelope %+v, samples %d; want one %s and nothing else", tt.name, bulk, envErrs, len(samples), wantType)
				}
				continue
			}
			if len(envErrs) != 0 || len(samples) != tt.samples || len(rejected) != tt.rejected {
				t.Errorf("%s (bulk %v): %d samples, %d rejected, envelope %+v; want %d, %d", tt.name, bulk,
					len(samples), len(rejected), envErrs, tt.samples, tt.rejected)
			}
			for _, s := range samples {
				if s != baseSample {
					t.Errorf("%s: sample %+v", tt.name, s)
				}
			}
		}
	}
}

func TestDecodeSamplesMixed(t *testing.T) {
	ok := object(baseEntryFields)
	noLabel := object(baseEntryFields, "actual_ttft_ms", "0")
	body := `{"entries":[` + strings.Join([]string{
		ok,
		object(baseEntryFields, "actual_ttft_ms", "Infinity"),
		noLabel,
		object(baseEntryFields, "kv_cache_percentage", "", "input_token_length", "-1"),
		object(baseEntryFields, "pod_type", `"decode"`),
	}, ",") + `]}`
	samples, rejected, envErrs := DecodeSamples([]byte(body), 0)
	if len(envErrs) != 0 {
		t.Fatal(envErrs)
	}
	decode := baseSample
	decode.Row.PodType = "decode"
	unlabelled := baseSample
	unlabelled.ActualTTFTMs = 0
	// Entries without any label are returned: the store discards them.
	if want := []features.Sample{baseSample, unlabelled, decode}; !reflect.DeepEqual(samples, want) {
		t.Errorf("samples %+v\nwant %+v", samples, want)
	}
	wantRejected := []struct {
		index  int
		detail string
	}{
		{1, "entries[1].actual_ttft_ms: Input should be a finite number"},
		{3, "entries[3].input_token_length: Input should be greater than or equal to 0 (and 1 more error)"},
	}
	if len(rejected) != len(wantRejected) {
		t.Fatalf("rejected %+v", rejected)
	}
	for i, w := range wantRejected {
		if rejected[i].Index != w.index || rejected[i].Detail != w.detail {
			t.Errorf("rejection %d = %d %q, want %d %q", i, rejected[i].Index, rejected[i].Detail, w.index, w.detail)
		}
	}
	if n := len(rejected[1].Errors); n != 2 || rejected[1].Errors[1].Type != "missing" {
		t.Errorf("rejection 3 errors %+v, want the range error then missing", rejected[1].Errors)
	}
	if _, err := json.Marshal(rejected); err != nil {
		t.Errorf("rejections not encodable: %v", err)
	}
}

// TestNoAliasing checks that nothing returned points into the body, which
// handlers recycle as soon as decoding returns.
func TestNoAliasing(t *testing.T) {
	row := object(baseRowFields, "pod_type", `"gpu-pool-7"`)
	body := []byte(`{"requests":[` + row + `,` + row + `]}`)
	rows, _, _ := DecodeBulkPredictRequest(body, 0, false, nil)
	bad := []byte(object(baseEntryFields, "pod_type", `"p\u00e9"`, "timestamp", `"bad time"`, "actual_ttft_ms", `{"k":"v"}`))
	_, rejected, _ := DecodeSamples(bad, 0)
	before, _ := json.Marshal(rejected)
	for i := range body {
		body[i] = 'x'
	}
	for i := range bad {
		bad[i] = 'x'
	}
	if rows[0].PodType != "gpu-pool-7" || rows[1].PodType != "gpu-pool-7" {
		t.Errorf("rows changed with the body: %+v", rows)
	}
	if after, _ := json.Marshal(rejected); string(after) != string(before) {
		t.Errorf("rejections changed with the body:\n%s\n%s", before, after)
	}
}

// TestGoldenBodies decodes the examples of docs/PROTOCOL.md §4.1 and §5.1 and rows of
// the recorded trace to exact values.
func TestGoldenBodies(t *testing.T) {
	strict := `{"requests":[{"kv_cache_percentage":0,"input_token_length":512,"num_request_waiting":0,"num_request_running":1,
 "num_tokens_generated":1,"prefix_cache_score":0,"encoder_input_size":0,"encoder_matched_size":0,
 "prefill_tokens_in_flight":0,"decode_tokens_in_flight":0}]}`
	rows, clamped, errs := DecodeBulkPredictRequest([]byte(strict), MaxBulkRows, true, nil)
	want := features.Row{InputTokenLength: 512, NumRequestRunning: 1, NumTokensGenerated: 1}
	if len(errs) != 0 || clamped != 0 || len(rows) != 1 || rows[0] != want {
		t.Errorf("§4.1 example: %+v %d %+v", rows, clamped, errs)
	}

	entry := `{"kv_cache_percentage":0.3252,"input_token_length":963,"num_request_waiting":5,"num_request_running":2,
 "num_tokens_generated":0,"actual_ttft_ms":253,"actual_tpot_ms":0,"prefix_cache_score":0.6573,
 "encoder_input_size":0,"encoder_matched_size":0,"prefill_tokens_in_flight":4809,"decode_tokens_in_flight":0,
 "timestamp":"2026-11-29T15:42:36.709963272Z"}`
	wantSample := features.Sample{
		Row: features.Row{KVCachePercentage: 0.3252, InputTokenLength: 963, NumRequestWaiting: 5, NumRequestRunning: 2,
			PrefixCacheScore: 0.6573, PrefillTokensInFlight: 4809},
		ActualTTFTMs: 253,
		Timestamp:    time.Date(2026, 11, 29, 15, 42, 36, 709963272, time.UTC),
	}
	samples, rejected, envErrs := DecodeTrainingBulk([]byte(`{"entries":[`+entry+`]}`), 10_000)
	if len(envErrs) != 0 || len(rejected) != 0 || len(samples) != 1 || samples[0] != wantSample {
		t.Errorf("§5.1 example: %+v %+v %+v\nwant %+v", samples, rejected, envErrs, wantSample)
	}

	// Lines of the recorded H200 trace, as a router wrote them.
	trace := []string{
		`{"kv_cache_percentage": 0, "input_token_length": 48, "num_request_waiting": 0, "num_request_running": 0, "num_tokens_generated": 0, "actual_ttft_ms": 455, "actual_tpot_ms": 0, "prefix_cache_score": 0, "prefill_tokens_in_flight": 0, "decode_tokens_in_flight": 0}`,
		`{"kv_cache_percentage": 0.002251238180999593, "input_token_length": 17, "num_request_waiting": 0, "num_request_running": 3, "num_tokens_generated": 0, "actual_ttft_ms": 48, "actual_tpot_ms": 0, "prefix_cache_score": 0, "prefill_tokens_in_flight": 0, "decode_tokens_in_flight": 0}`,
	}
	wantTrace := []features.Sample{
		{Row: features.Row{InputTokenLength: 48}, ActualTTFTMs: 455},
		{Row: features.Row{KVCachePercentage: 0.002251238180999593, InputTokenLength: 17, NumRequestRunning: 3}, ActualTTFTMs: 48},
	}
	samples, rejected, envErrs = DecodeSamples([]byte("["+strings.Join(trace, ",\n")+"]"), 0)
	if len(envErrs) != 0 || len(rejected) != 0 || !reflect.DeepEqual(samples, wantTrace) {
		t.Errorf("trace lines: %+v %+v %+v", samples, rejected, envErrs)
	}
}

// TestRecordedTrace decodes every line of the shared H200 trace, when the
// repository sits beside it, and compares with encoding/json.
func TestRecordedTrace(t *testing.T) {
	data, err := os.ReadFile("../../shared/data/traces/sharegpt-h200.jsonl")
	if err != nil {
		t.Skipf("trace not available: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	for i, line := range lines {
		samples, rejected, envErrs := DecodeSamples([]byte(line), 0)
		if len(envErrs) != 0 || len(rejected) != 0 || len(samples) != 1 {
			t.Fatalf("line %d: %+v %+v", i+1, rejected, envErrs)
		}
		var ref refEntry
		if err := json.Unmarshal([]byte(line), &ref); err != nil {
			t.Fatalf("line %d: encoding/json: %v", i+1, err)
		}
		if got, want := samples[0], ref.sample(); got != want {
			t.Fatalf("line %d: %+v, encoding/json gives %+v", i+1, got, want)
		}
	}
}

// refEntry is a training entry as encoding/json decodes it, the reference
// for equivalence tests.
type refEntry struct {
	refRow
	ActualTTFTMs    float64    `json:"actual_ttft_ms"`
	ActualTPOTMs    float64    `json:"actual_tpot_ms"`
	Timestamp       *time.Time `json:"timestamp,omitempty"`
	PredictedTTFTMs *float64   `json:"predicted_ttft_ms,omitempty"`
	PredictedTPOTMs *float64   `json:"predicted_tpot_ms,omitempty"`
}

type refRow struct {
	KVCachePercentage     float64 `json:"kv_cache_percentage"`
	InputTokenLength      int64   `json:"input_token_length"`
	NumRequestWaiting     int64   `json:"num_request_waiting"`
	NumRequestRunning     int64   `json:"num_request_running"`
	NumTokensGenerated    int64   `json:"num_tokens_generated"`
	PrefixCacheScore      float64 `json:"prefix_cache_score"`
	PodType               *string `json:"pod_type,omitempty"`
	PrefillTokensInFlight int64   `json:"prefill_tokens_in_flight,omitempty"`
	DecodeTokensInFlight  int64   `json:"decode_tokens_in_flight,omitempty"`
	EncoderInputSize      int64   `json:"encoder_input_size,omitempty"`
	EncoderMatchedSize    int64   `json:"encoder_matched_size,omitempty"`
}

func (r refRow) row() features.Row {
	row := features.Row{
		KVCachePercentage: r.KVCachePercentage, InputTokenLength: r.InputTokenLength,
		NumRequestWaiting: r.NumRequestWaiting, NumRequestRunning: r.NumRequestRunning,
		NumTokensGenerated: r.NumTokensGenerated, PrefixCacheScore: r.PrefixCacheScore,
		PrefillTokensInFlight: r.PrefillTokensInFlight, DecodeTokensInFlight: r.DecodeTokensInFlight,
		EncoderInputSize: r.EncoderInputSize, EncoderMatchedSize: r.EncoderMatchedSize,
	}
	if r.PodType != nil {
		row.PodType = *r.PodType
	}
	return row
}

func (e refEntry) sample() features.Sample {
	s := features.Sample{Row: e.row(), ActualTTFTMs: e.ActualTTFTMs, ActualTPOTMs: e.ActualTPOTMs}
	if e.Timestamp != nil {
		s.Timestamp = e.Timestamp.UTC()
	}
	if e.PredictedTTFTMs != nil {
		s.PredictedTTFTMs = *e.PredictedTTFTMs
	}
	if e.PredictedTPOTMs != nil {
		s.PredictedTPOTMs = *e.PredictedTPOTMs
	}
	return s
}

// randomEntry draws a valid training entry: values of every magnitude the
// bounds allow, optional fields sometimes absent, labels in any pod label.
func randomEntry(r *rand.Rand) refEntry {
	frac := func() float64 {
		switch r.IntN(4) {
		case 0:
			return float64(r.IntN(2))
		case 1:
			return math.Ldexp(r.Float64(), -r.IntN(60)) // tiny values print with exponents
		}
		return r.Float64()
	}
	count := func(max int64) int64 {
		switch r.IntN(3) {
		case 0:
			return r.Int64N(10)
		case 1:
			return r.Int64N(max + 1)
		}
		return r.Int64N(5000)
	}
	ms := func() float64 {
		if r.IntN(3) == 0 {
			return 0
		}
		return math.Min(3.6e6, math.Exp(r.Float64()*15)) // 1 ms .. one hour
	}
	e := refEntry{
		refRow: refRow{
			KVCachePercentage: frac(), InputTokenLength: count(1e8), NumRequestWaiting: count(1e8),
			NumRequestRunning: count(1e8), NumTokensGenerated: count(1e8), PrefixCacheScore: frac(),
			PrefillTokensInFlight: count(1e8), DecodeTokensInFlight: count(1e8),
			EncoderInputSize: count(1e8), EncoderMatchedSize: count(1e8),
		},
		ActualTTFTMs: ms(), ActualTPOTMs: ms(),
	}
	if r.IntN(2) == 0 {
		labels := []string{"", "prefill", "decode", "both", "monolithic", "pool <a&b>", "rôle-é", "tab\there", `q"uote`, "😀"}
		l := labels[r.IntN(len(labels))]
		e.PodType = &l
	}
	if r.IntN(2) == 0 {
		ts := time.Unix(r.Int64N(4e9), r.Int64N(1e9)).In(time.FixedZone("", (r.IntN(48)-24)*1800))
		e.Timestamp = &ts
	}
	if r.IntN(2) == 0 {
		p := ms()
		e.PredictedTTFTMs = &p
	}
	if r.IntN(2) == 0 {
		p := ms()
		e.PredictedTPOTMs = &p
	}
	return e
}

// reformat rewrites an object encoded by encoding/json with its members in
// random order and random white space, as other encoders might write it.
func reformat(r *rand.Rand, encoded []byte) string {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(encoded, &members); err != nil {
		panic(err)
	}
	keys := make([]string, 0, len(members))
	for k := range members {
		keys = append(keys, k)
	}
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	ws := func() string { return []string{"", "", " ", "\n  ", "\t"}[r.IntN(5)] }
	var b strings.Builder
	b.WriteString("{" + ws())
	for i, k := range keys {
		if i > 0 {
			b.WriteString(ws() + "," + ws())
		}
		b.WriteString(strconv.Quote(k) + ws() + ":" + ws())
		b.Write(members[k])
	}
	b.WriteString(ws() + "}")
	return b.String()
}

// TestEquivalenceWithEncodingJSON: random valid rows and entries, encoded by
// encoding/json, decode to the values they were encoded from.
func TestEquivalenceWithEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	const batches, perBatch = 200, 20
	for range batches {
		var rowBodies, entryBodies []string
		var wantRows []features.Row
		var wantSamples []features.Sample
		for range perBatch {
			e := randomEntry(r)
			rowJSON, err := json.Marshal(e.refRow)
			if err != nil {
				t.Fatal(err)
			}
			entryJSON, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			rowBodies = append(rowBodies, reformat(r, rowJSON))
			entryBodies = append(entryBodies, reformat(r, entryJSON))
			wantRows = append(wantRows, e.row())
			wantSamples = append(wantSamples, e.sample())
		}
		bulk := `{"requests":[` + strings.Join(rowBodies, ",") + `]}`
		rows, _, errs := DecodeBulkPredictRequest([]byte(bulk), MaxBulkRows, false, nil)
		if len(errs) != 0 || !reflect.DeepEqual(rows, wantRows) {
			t.Fatalf("bulk: errors %+v\n got %+v\nwant %+v\nbody %s", errs, rows, wantRows, bulk)
		}
		for i, body := range rowBodies {
			row, errs := DecodePredictRequest([]byte(body))
			if len(errs) != 0 || row != wantRows[i] {
				t.Fatalf("predict %s: %+v %+v, want %+v", body, row, errs, wantRows[i])
			}
		}
		train := `{"entries":[` + strings.Join(entryBodies, ",") + `]}`
		samples, rejected, envErrs := DecodeTrainingBulk([]byte(train), 0)
		if len(envErrs) != 0 || len(rejected) != 0 || len(samples) != len(wantSamples) {
			t.Fatalf("entries: %+v %+v", rejected, envErrs)
		}
		for i := range samples {
			if got, want := samples[i], wantSamples[i]; got != want {
				t.Fatalf("entry %s:\n got %+v\nwant %+v", entryBodies[i], got, want)
			}
		}
	}
}

// TestEquivalenceIntegralSpellings: an integer field spelled as an integral
// float or numeric string decodes to the same row.
func TestEquivalenceIntegralSpellings(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for range 2000 {
		v := r.Int64N(1e9 + 1)
		spellings := []string{
			strconv.FormatInt(v, 10), strconv.FormatInt(v, 10) + ".0", strconv.FormatInt(v, 10) + "e0",
			fmt.Sprintf(`"%d"`, v), strconv.FormatInt(v, 10) + "000e-3",
		}
		if v%100 == 0 {
			spellings = append(spellings, strconv.FormatInt(v/100, 10)+"e2")
		}
		for _, lit := range spellings {
			row, errs := DecodePredictRequest([]byte(object(baseRowFields, "input_token_length", lit)))
			if len(errs) != 0 || row.InputTokenLength != v {
				t.Fatalf("%s: %d, %+v; want %d", lit, row.InputTokenLength, errs, v)
			}
		}
	}
}

// TestKeyPrediction: keys that look like the predicted field but are not
// it must be read in full, and changing key orders between rows must not
// confuse the learnt order.
func TestKeyPrediction(t *testing.T) {
	rows := []string{
		object(baseRowFields),
		object(baseRowFields, "kv_cache_percentagex", "7"), // unknown: a longer key
		`{"kv_cache_percentag":7,` + object(baseRowFields)[1:],
		`{"prefix_cache_score":0.25,"num_tokens_generated":1,"num_request_running":2,"num_request_waiting":1,` +
			`"input_token_length":512,"kv_cache_percentage":0.5}`,
		`{"kv_cache_\u0070ercentage":0.5,"input_token_length":512,"num_request_waiting":1,` +
			`"num_request_running":2,"num_tokens_generated":1,"prefix_cache_score":0.25}`,
		object(baseRowFields),
	}
	got, _, errs := DecodeBulkPredictRequest([]byte(`{"requests":[`+strings.Join(rows, ",")+`]}`), 0, false, nil)
	if len(errs) != 0 || len(got) != len(rows) {
		t.Fatalf("%d rows, errors %+v", len(got), errs)
	}
	for i, r := range got {
		if r != baseRow {
			t.Errorf("row %d = %+v", i, r)
		}
	}
}

func TestMinEntryBytes(t *testing.T) {
	shortest := object([]kv{
		{"kv_cache_percentage", "0"}, {"input_token_length", "0"}, {"num_request_waiting", "0"},
		{"num_request_running", "0"}, {"num_tokens_generated", "0"}, {"prefix_cache_score", "0"},
		{"actual_ttft_ms", "0"}, {"actual_tpot_ms", "0"},
	})
	if len(shortest) != minEntryBytes {
		t.Errorf("minEntryBytes = %d, the shortest entry %s has %d", minEntryBytes, shortest, len(shortest))
	}
	samples, rejected, errs := DecodeSamples([]byte(shortest), 0)
	if len(samples) != 1 || len(rejected) != 0 || len(errs) != 0 {
		t.Errorf("the shortest entry: %+v %+v %+v", samples, rejected, errs)
	}
	// A body of shortest entries fits the capacity it was given.
	body := "[" + strings.Repeat(shortest+",", 99) + shortest + "]"
	samples, _, _ = DecodeSamples([]byte(body), 0)
	if len(samples) != 100 || cap(samples) < 100 || cap(samples) > len(body)/minEntryBytes+1 {
		t.Errorf("100 shortest entries: len %d cap %d", len(samples), cap(samples))
	}
}

func TestLargeInputsAreSummarised(t *testing.T) {
	rows := make([]string, 100)
	for i := range rows {
		rows[i] = object(baseRowFields, "pod_type", `"é"`)
	}
	body := `{"request":[` + strings.Join(rows, ",") + `]}` // a typo: requests is missing
	_, _, errs := DecodeBulkPredictRequest([]byte(body), 0, false, nil)
	if len(errs) != 1 || errs[0].Type != "missing" {
		t.Fatalf("errors %+v", errs)
	}
	in, ok := errs[0].Input.(string)
	if !ok || len(in) > 400 || !strings.HasPrefix(in, `{"request":[{`) || !strings.Contains(in, "truncated") || !utf8.ValidString(in) {
		t.Errorf("input of a large body = %#v, want a short valid summary", errs[0].Input)
	}
	// Small inputs are echoed as values.
	_, _, errs = DecodeBulkPredictRequest([]byte(`{"request":[]}`), 0, false, nil)
	if len(errs) != 1 || !reflect.DeepEqual(errs[0].Input, map[string]any{"request": []any{}}) {
		t.Errorf("input of a small body = %#v", errs)
	}
}

// DecodeEntry holds a trace line to the rules of a training body: what one
// accepts and refuses, the other does, with the same errors.
func TestDecodeEntryMatchesTrainingBodies(t *testing.T) {
	for _, line := range []string{
		object(baseEntryFields),
		object(baseEntryFields, "input_token_length", "200000000"), // above the sample ceiling
		object(baseEntryFields, "num_request_waiting", "-1"),
		object(baseEntryFields, "kv_cache_percentage", "1.5"),
		object(baseEntryFields, "actual_ttft_ms", "NaN"),
		object(baseEntryFields, "timestamp", `"2026-11-29T15:42:36Z"`, "pod_type", `"decode"`),
		`{"input_token_length": 4, "actual_ttft_ms": 3}`, // required fields missing
		`"an entry"`,
	} {
		got, errs := DecodeEntry([]byte(line))
		samples, rejected, envErrs := DecodeSamples([]byte(line), 0)
		switch {
		case len(envErrs) > 0:
			if !reflect.DeepEqual(errs, envErrs) {
				t.Errorf("%s: DecodeEntry errors %+v, DecodeSamples %+v", line, errs, envErrs)
			}
		case len(rejected) > 0:
			if !reflect.DeepEqual(errs, rejected[0].Errors) {
				t.Errorf("%s: DecodeEntry errors %+v, DecodeSamples %+v", line, errs, rejected[0].Errors)
			}
		default:
			if len(errs) > 0 || len(samples) != 1 || got != samples[0] {
				t.Errorf("%s: DecodeEntry %+v %+v, DecodeSamples %+v", line, got, errs, samples)
			}
		}
	}
}

// transferEntry is a complete disaggregated sample: a 400-token KV moved
// same-zone across racks in 3.5 ms of a 253 ms TTFT.
var transferEntry = append(append([]kv(nil), baseEntryFields...),
	kv{"actual_kv_transfer_ms", "3.5"}, kv{"kv_transfer_tokens", "400"}, kv{"kv_bytes_per_token", "163840"},
	kv{"prefill_pod", `"p-0"`}, kv{"decode_pod", `"d-3"`},
	kv{"prefill_topology", `{"node":"n0","rack":"r0","zone":"z","region":"eu"}`},
	kv{"decode_topology", `{"node":"n3","rack":"r1","zone":"z","region":"eu"}`},
	kv{"concurrent_transfers", "2"})

func TestDecodeTransfer(t *testing.T) {
	full := baseSample
	full.Transfer = &features.Transfer{Ms: 3.5, Tokens: 400, BytesPerToken: 163840, PrefillPod: "p-0", DecodePod: "d-3",
		Prefill: features.Topology{Node: "n0", Rack: "r0", Zone: "z", Region: "eu"},
		Decode:  features.Topology{Node: "n3", Rack: "r1", Zone: "z", Region: "eu"}, Concurrent: 2}
	type fieldErr struct {
		typ string
		loc []any
	}
	at := func(path ...any) []any { return append([]any{"body"}, path...) }
	for _, tc := range []struct {
		name  string
		edits []string
		want  func(*features.Sample) // accepted: the sample from full
		errs  []fieldErr             // rejected: exactly these errors
	}{
		{name: "complete", want: func(*features.Sample) {}},
		{name: "class is where the pods are", want: func(s *features.Sample) {
			if c := s.Transfer.Class(); c != features.SameZone {
				t.Errorf("class %s, want same-zone", c)
			}
		}},
		{name: "only node is required", edits: []string{"prefill_topology", `{"node":"n0"}`, "decode_topology", `{"node":"n0"}`},
			want: func(s *features.Sample) {
				s.Transfer.Prefill, s.Transfer.Decode = features.Topology{Node: "n0"}, features.Topology{Node: "n0"}
			}},
		{name: "pods, bytes per token and concurrency are optional",
			edits: []string{"prefill_pod", "", "decode_pod", "", "kv_bytes_per_token", "", "concurrent_transfers", ""},
			want: func(s *features.Sample) {
				s.Transfer.PrefillPod, s.Transfer.DecodePod, s.Transfer.BytesPerToken, s.Transfer.Concurrent = "", "", 0, 0
			}},
		{name: "a transfer sample needs no TTFT", edits: []string{"actual_ttft_ms", "0"},
			want: func(s *features.Sample) { s.ActualTTFTMs = 0 }},
		{name: "topology without a measured transfer", edits: []string{"actual_kv_transfer_ms", "", "kv_transfer_tokens", ""},
			want: func(s *features.Sample) { s.Transfer.Ms, s.Transfer.Tokens = 0, 0 }},
		{name: "no tokens moved: the decode pod had the prompt", edits: []string{"kv_transfer_tokens", "0"},
			want: func(s *features.Sample) { s.Transfer.Tokens = 0 }},

		{name: "a measured transfer needs its token count", edits: []string{"kv_transfer_tokens", ""},
			errs: []fieldErr{{"missing", at("kv_transfer_tokens")}}},
		{name: "null is absent", edits: []string{"kv_transfer_tokens", "null"},
			errs: []fieldErr{{"missing", at("kv_transfer_tokens")}}},
		{name: "a measured transfer needs both placements", edits: []string{"prefill_topology", "", "decode_topology", "null"},
			errs: []fieldErr{{"missing", at("prefill_topology")}, {"missing", at("decode_topology")}}},
		{name: "the transfer is part of the TTFT", edits: []string{"actual_kv_transfer_ms", "253"},
			errs: []fieldErr{{"less_than", at("actual_kv_transfer_ms")}}},
		{name: "node is required in a topology", edits: []string{"decode_topology", `{"rack":"r1"}`},
			errs: []fieldErr{{"missing", at("decode_topology", "node")}}},
		{name: "an empty topology has no node", edits: []string{"decode_topology", `{}`},
			errs: []fieldErr{{"missing", at("decode_topology", "node")}}},
		{name: "labels are strings", edits: []string{"prefill_topology", `{"node":"n0","rack":7}`},
			errs: []fieldErr{{"string_type", at("prefill_topology", "rack")}}},
		{name: "labels are not empty", edits: []string{"prefill_topology", `{"node":""}`},
			errs: []fieldErr{{"string_too_short", at("prefill_topology", "node")}}},
		{name: "labels are at most 63 characters", edits: []string{"prefill_topology", `{"node":"n0","zone":"` + strings.Repeat("z", 64) + `"}`},
			errs: []fieldErr{{"string_too_long", at("prefill_topology", "zone")}}},
		{name: "a label twice", edits: []string{"prefill_topology", `{"node":"n0","rack":"a","rack":"b"}`},
			errs: []fieldErr{{"duplicate_key", at("prefill_topology", "rack")}}},
		{name: "every error of an entry is reported",
			edits: []string{"prefill_topology", `{"rack":1}`, "concurrent_transfers", "-1", "kv_transfer_tokens", "9999"},
			errs: []fieldErr{{"string_type", at("prefill_topology", "rack")}, {"missing", at("prefill_topology", "node")},
				{"greater_than_equal", at("concurrent_transfers")}, {"less_than_equal", at("kv_transfer_tokens")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := object(transferEntry, tc.edits...)
			got, errs := DecodeEntry([]byte(body))
			checkErrors(t, errs)
			if tc.errs == nil {
				if len(errs) > 0 {
					t.Fatalf("refused %s: %+v", body, errs)
				}
				want := full
				tr := *full.Transfer
				want.Transfer = &tr
				tc.want(&want)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("got %+v %+v\nwant %+v %+v", got, got.Transfer, want, want.Transfer)
				}
				// What the decoder accepted, the encoder writes back the same.
				again, errs := DecodeEntry(AppendEntry(nil, &got))
				if len(errs) > 0 || !reflect.DeepEqual(again, got) {
					t.Fatalf("re-encoded %s reads back as %+v, %+v", AppendEntry(nil, &got), again, errs)
				}
				return
			}
			var have []fieldErr
			for _, e := range errs {
				have = append(have, fieldErr{e.Type, e.Loc})
			}
			if !reflect.DeepEqual(have, tc.errs) {
				t.Fatalf("errors %+v, want %+v", have, tc.errs)
			}
		})
	}
}

// A sample without transfer fields encodes exactly as before they existed.
func TestEntryWithoutTransferIsUnchanged(t *testing.T) {
	s := baseSample
	const want = `{"kv_cache_percentage":0.5,"input_token_length":512,"num_request_waiting":1,"num_request_running":2,` +
		`"num_tokens_generated":1,"prefix_cache_score":0.25,"encoder_input_size":0,"encoder_matched_size":0,` +
		`"prefill_tokens_in_flight":0,"decode_tokens_in_flight":0,"actual_ttft_ms":253,"actual_tpot_ms":0}`
	if got := string(AppendEntry(nil, &s)); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
