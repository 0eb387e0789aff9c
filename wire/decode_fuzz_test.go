package wire

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/jsonscan"
)

// The fuzz targets check properties that hold for every input:
//   - decoding never panics;
//   - every error is well formed and encodable by encoding/json;
//   - everything accepted is finite and within bounds;
//   - a body is json_invalid exactly when it is not JSON (against
//     encoding/json, allowing for what this package refuses on purpose);
//   - accepted values equal an independent decode (encoding/json into
//     generic values, converted with strconv and math/big).
// Seed corpora live in testdata/fuzz/<target>.

const fuzzMaxRows = 50

func fuzzSeeds(f *testing.F) {
	row := object(baseRowFields)
	entry := object(baseEntryFields)
	for _, s := range []string{
		`{"requests":[` + row + `]}`,
		`{"entries":[` + entry + `]}`,
		row, entry, `[` + entry + `,` + entry + `]`,
		`{"requests":[{"kv_cache_percentage":0,"input_token_length":512,"num_request_waiting":0,"num_request_running":1,"num_tokens_generated":1,"prefix_cache_score":0,"encoder_input_size":0,"encoder_matched_size":0,"prefill_tokens_in_flight":-1,"decode_tokens_in_flight":0}]}`,
		`{"requests":[` + object(baseRowFields, "kv_cache_percentage", "NaN", "pod_type", `"d\u00e9code"`) + `]}`,
		`{"requests":[` + object(baseRowFields, "input_token_length", "2e2", "num_request_waiting", `"7"`) + `]}`,
		`{"entries":[` + object(baseEntryFields, "actual_ttft_ms", "1e400", "timestamp", `"2026-11-29T15:42:36.709963272Z"`) + `]}`,
		`{"entries":[` + object(baseEntryFields, "timestamp", `"2026-11-29T15:42:36+01:00"`, "predicted_ttft_ms", "84.2") + `]}`,
		`{"requests":[{"kv_cache_percentage":0.5,"kv_cache_percentage":0.5}]}`,
		`{"requests":[],"x":[[[[{"a":null}]]]]}`,
		`{"flush_training_data": "yes", "reason": null}`,
		"{\"requests\":[{\"pod_type\":\"\xff\"}]}",
		`{"requests":[` + row + `,` + row + `]} trailing`,
		`{"entries":[` + entry + `,{"kv_cache_percentage":-Infinity}]}`,
		object(transferEntry),
		`{"entries":[` + object(transferEntry, "decode_topology", `{"node":"n\u00e9","rack":null,"zone":7}`, "actual_kv_transfer_ms", "300") + `]}`,
		`[` + object(transferEntry, "prefill_topology", `{"rack":"r"}`, "kv_transfer_tokens", `"12"`, "prefill_pod", `""`) + `]`,
		``, `null`, `[]`, `{}`, `"x"`,
	} {
		f.Add([]byte(s))
	}
}

// checkErrs asserts the shape every reported error keeps.
func checkErrs(t *testing.T, body []byte, errs []FieldError) {
	t.Helper()
	for _, e := range errs {
		if e.Type == "" || e.Msg == "" || len(e.Loc) == 0 || e.Loc[0] != "body" {
			t.Fatalf("malformed error %+v for %q", e, body)
		}
		if _, err := json.Marshal(e); err != nil {
			t.Fatalf("error %+v for %q is not encodable: %v", e, body, err)
		}
	}
	for _, e := range errs {
		if e.Type == "json_invalid" && len(errs) != 1 {
			t.Fatalf("json_invalid reported with other errors for %q: %+v", body, errs)
		}
	}
}

// checkJSONVerdict compares the decoder's view of the body's syntax with
// encoding/json's. This package also refuses invalid UTF-8 and nesting past
// MaxDepth, and accepts non-finite literals (to reject them per field): a
// body encoding/json refuses must then be one the scanner accepts, which
// jsonscan's own fuzz test (FuzzScan) allows only for non-finite literals.
func checkJSONVerdict(t *testing.T, body []byte, errs []FieldError) {
	t.Helper()
	invalid := len(errs) == 1 && errs[0].Type == "json_invalid"
	strict := json.Valid(body) && utf8.Valid(body) && nestingDepth(body) <= DefaultDecodeLimits().MaxDepth
	if strict && invalid {
		t.Fatalf("valid JSON %q reported invalid: %+v", body, errs)
	}
	if !strict && !invalid && len(bytes.TrimSpace(body)) > 0 {
		s := jsonscan.New(body, DefaultDecodeLimits().MaxDepth)
		if s.SkipValue(1) {
			s.Finish()
		}
		if s.Failed() {
			t.Fatalf("invalid JSON %q accepted as JSON: %+v", body, errs)
		}
	}
}

// nestingDepth is the deepest container nesting of a valid JSON text.
func nestingDepth(b []byte) int {
	depth, max, inString := 0, 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
			max = maxInt(max, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return max
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

func checkRow(t *testing.T, r features.Row, maxCount int64) {
	t.Helper()
	for _, f := range []float64{r.KVCachePercentage, r.PrefixCacheScore} {
		if !(f >= 0 && f <= 1) || math.Signbit(f) {
			t.Fatalf("fraction out of bounds in %+v", r)
		}
	}
	for _, v := range []int64{r.InputTokenLength, r.NumRequestWaiting, r.NumRequestRunning, r.NumTokensGenerated,
		r.PrefillTokensInFlight, r.DecodeTokensInFlight, r.EncoderInputSize, r.EncoderMatchedSize} {
		if v < 0 || v > maxCount {
			t.Fatalf("count out of bounds in %+v", r)
		}
	}
}

func checkSample(t *testing.T, s features.Sample) {
	t.Helper()
	lim := DefaultDecodeLimits()
	checkRow(t, s.Row, lim.MaxSampleCount)
	for _, f := range []float64{s.ActualTTFTMs, s.ActualTPOTMs} {
		if !(f >= 0 && f <= lim.MaxLatencyMs) || math.Signbit(f) {
			t.Fatalf("label out of bounds in %+v", s)
		}
	}
	for _, f := range []float64{s.PredictedTTFTMs, s.PredictedTPOTMs} {
		if !(f >= 0) || math.IsInf(f, 0) {
			t.Fatalf("prediction out of bounds in %+v", s)
		}
	}
	if s.Timestamp.Location() != time.UTC {
		t.Fatalf("timestamp not in UTC in %+v", s)
	}
}

// oracle decodes body with encoding/json into generic values, for an
// independent reading of accepted bodies. It returns nil when the body is
// outside what the oracle can read (non-finite literals, exponents too
// large for math/big to expand cheaply).
func oracle(body []byte) any {
	if !json.Valid(body) || !utf8.Valid(body) {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return nil
	}
	return v
}

// oracleEntry converts a generic object as the decoders must, reporting
// false when it cannot judge a value.
func oracleEntry(m map[string]any, training bool) (features.Sample, bool) {
	var s features.Sample
	num := func(v any) (string, bool) {
		switch x := v.(type) {
		case json.Number:
			return string(x), true
		case string:
			return strings.Trim(x, " \t\n\r"), true
		}
		return "", false
	}
	count := func(key string, dst *int64) bool {
		v, present := m[key]
		if !present || v == nil {
			return true
		}
		lit, ok := num(v)
		if !ok || len(lit) > 40 || strings.ContainsAny(lit, "eE") && len(lit[strings.IndexAny(lit, "eE"):]) > 5 {
			return false
		}
		r, ok := new(big.Rat).SetString(lit)
		if !ok || !r.IsInt() || !r.Num().IsInt64() {
			return false
		}
		*dst = r.Num().Int64()
		return true
	}
	float := func(key string, dst *float64) bool {
		v, present := m[key]
		if !present || v == nil {
			return true
		}
		lit, ok := num(v)
		if !ok {
			return false
		}
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil {
			return false
		}
		*dst = f
		return true
	}
	r := &s.Row
	ok := float("kv_cache_percentage", &r.KVCachePercentage) && float("prefix_cache_score", &r.PrefixCacheScore) &&
		count("input_token_length", &r.InputTokenLength) && count("num_request_waiting", &r.NumRequestWaiting) &&
		count("num_request_running", &r.NumRequestRunning) && count("num_tokens_generated", &r.NumTokensGenerated) &&
		count("prefill_tokens_in_flight", &r.PrefillTokensInFlight) && count("decode_tokens_in_flight", &r.DecodeTokensInFlight) &&
		count("encoder_input_size", &r.EncoderInputSize) && count("encoder_matched_size", &r.EncoderMatchedSize)
	if p, isString := m["pod_type"].(string); isString {
		r.PodType = p
	}
	if training {
		ok = ok && float("actual_ttft_ms", &s.ActualTTFTMs) && float("actual_tpot_ms", &s.ActualTPOTMs) &&
			float("predicted_ttft_ms", &s.PredictedTTFTMs) && float("predicted_tpot_ms", &s.PredictedTPOTMs)
		if !oracleTransfer(m, &s, count, float) {
			return s, false
		}
		if ts, isString := m["timestamp"].(string); isString {
			parsed, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				return s, false // naive or lower-case forms: not judged here
			}
			s.Timestamp = parsed.UTC()
		}
	}
	if r.KVCachePercentage == 0 {
		r.KVCachePercentage = 0 // -0 reads as 0
	}
	if tr := s.Transfer; tr != nil {
		tr.Ms += 0 // -0 reads as 0
		tr.BytesPerToken += 0
	}
	if r.PrefixCacheScore == 0 {
		r.PrefixCacheScore = 0
	}
	for _, f := range []*float64{&s.ActualTTFTMs, &s.ActualTPOTMs, &s.PredictedTTFTMs, &s.PredictedTPOTMs} {
		if *f == 0 {
			*f = 0
		}
	}
	return s, ok
}

func FuzzDecodeBulkPredict(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, clamp := range []bool{false, true} {
			dst := make([]features.Row, 1, 8)
			rows, clamped, errs := DecodeBulkPredictRequest(body, fuzzMaxRows, clamp, dst)
			checkErrs(t, body, errs)
			checkJSONVerdict(t, body, errs)
			if len(errs) > 0 {
				if len(rows) != 1 || clamped != 0 {
					t.Fatalf("rejected body returned %d rows, %d clamped", len(rows), clamped)
				}
				continue
			}
			rows = rows[1:]
			if len(rows) < 1 || len(rows) > fuzzMaxRows || !clamp && clamped != 0 {
				t.Fatalf("accepted %d rows (%d clamped) from %q", len(rows), clamped, body)
			}
			for _, r := range rows {
				checkRow(t, r, DefaultDecodeLimits().MaxPredictCount)
			}
			top, _ := oracle(body).(map[string]any)
			list, _ := top["requests"].([]any)
			if top == nil || clamped > 0 {
				continue
			}
			if len(list) != len(rows) {
				t.Fatalf("%d rows accepted, encoding/json sees %d in %q", len(rows), len(list), body)
			}
			for i, item := range list {
				want, ok := oracleEntry(item.(map[string]any), false)
				if ok && want.Row != rows[i] {
					t.Fatalf("row %d of %q = %+v, encoding/json reads %+v", i, body, rows[i], want.Row)
				}
			}
		}
	})
}

func FuzzDecodePredict(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		row, errs := DecodePredictRequest(body)
		checkErrs(t, body, errs)
		checkJSONVerdict(t, body, errs)
		if len(errs) > 0 {
			if row != (features.Row{}) {
				t.Fatalf("rejected body returned %+v", row)
			}
			return
		}
		checkRow(t, row, DefaultDecodeLimits().MaxPredictCount)
		if m, ok := oracle(body).(map[string]any); ok {
			if want, ok := oracleEntry(m, false); ok && want.Row != row {
				t.Fatalf("%q = %+v, encoding/json reads %+v", body, row, want.Row)
			}
		}
	})
}

func FuzzDecodeSamples(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		const maxEntries = 20
		for _, bulk := range []bool{false, true} {
			decode := DecodeSamples
			if bulk {
				decode = DecodeTrainingBulk
			}
			samples, rejected, envErrs := decode(body, maxEntries)
			checkErrs(t, body, envErrs)
			checkJSONVerdict(t, body, envErrs)
			if len(envErrs) > 0 {
				if samples != nil || rejected != nil {
					t.Fatalf("envelope error with results for %q", body)
				}
				continue
			}
			if len(samples)+len(rejected) > maxEntries {
				t.Fatalf("%d entries from %q, over the limit", len(samples)+len(rejected), body)
			}
			for _, s := range samples {
				checkSample(t, s)
			}
			last := -1
			for _, r := range rejected {
				if r.Index <= last || r.Detail == "" || strings.Contains(r.Detail, "\n") {
					t.Fatalf("bad rejection %+v for %q", r, body)
				}
				last = r.Index
				checkErrs(t, body, r.Errors)
			}
			// Independent reading of the accepted entries.
			var items []any
			switch v := oracle(body).(type) {
			case []any:
				items = v
			case map[string]any:
				if list, ok := v["entries"].([]any); ok {
					items = list
				} else {
					items = []any{v}
				}
			default:
				continue
			}
			if len(items) != len(samples)+len(rejected) {
				t.Fatalf("%d samples + %d rejected, encoding/json sees %d entries in %q", len(samples), len(rejected), len(items), body)
			}
			rejectedAt := map[int]bool{}
			for _, r := range rejected {
				rejectedAt[r.Index] = true
			}
			next := 0
			for i, item := range items {
				if rejectedAt[i] {
					continue
				}
				got := samples[next]
				next++
				if m, ok := item.(map[string]any); ok {
					if want, ok := oracleEntry(m, true); ok && !reflect.DeepEqual(want, got) {
						t.Fatalf("entry %d of %q = %+v, encoding/json reads %+v", i, body, got, want)
					}
				}
			}
		}
	})
}

func FuzzDecodeFlush(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, errs := DecodeFlushRequest(body)
		checkErrs(t, body, errs)
		checkJSONVerdict(t, body, errs)
		if len(errs) > 0 && req != (FlushRequest{}) {
			t.Fatalf("rejected body returned %+v", req)
		}
	})
}

// oracleTransfer reads the KV-transfer members of an accepted entry into
// s.Transfer, which exists when any of them is present and not null.
func oracleTransfer(m map[string]any, s *features.Sample, count func(string, *int64) bool, float func(string, *float64) bool) bool {
	var tr features.Transfer
	present := false
	for _, k := range []string{"actual_kv_transfer_ms", "kv_transfer_tokens", "kv_bytes_per_token", "prefill_pod",
		"decode_pod", "prefill_topology", "decode_topology", "concurrent_transfers"} {
		if v, ok := m[k]; ok && v != nil {
			present = true
		}
	}
	if !present {
		return true
	}
	ok := float("actual_kv_transfer_ms", &tr.Ms) && float("kv_bytes_per_token", &tr.BytesPerToken) &&
		count("kv_transfer_tokens", &tr.Tokens) && count("concurrent_transfers", &tr.Concurrent)
	tr.PrefillPod, _ = m["prefill_pod"].(string)
	tr.DecodePod, _ = m["decode_pod"].(string)
	for key, dst := range map[string]*features.Topology{"prefill_topology": &tr.Prefill, "decode_topology": &tr.Decode} {
		obj, _ := m[key].(map[string]any)
		dst.Node, _ = obj["node"].(string)
		dst.Rack, _ = obj["rack"].(string)
		dst.Zone, _ = obj["zone"].(string)
		dst.Region, _ = obj["region"].(string)
	}
	s.Transfer = &tr
	return ok
}
