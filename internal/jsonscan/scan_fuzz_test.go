package jsonscan

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzScan compares the scanner's verdict with encoding/json's on any
// input, in strict terms (no non-finite literals). Its seed corpus is in
// testdata/fuzz/FuzzScan; the wire package fuzzes the decoders built on it.
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{"requests":[{"kv_cache_percentage":0,"input_token_length":512,"prefill_tokens_in_flight":-1}]}`,
		`{"entries":[{"actual_ttft_ms":1e400,"timestamp":"2026-11-29T15:42:36.709963272Z"}]}`,
		`{"a":"d\u00e9code","b":"\ud83d\ude00","c":"\ud800"}`,
		`{"requests":[],"x":[[[[{"a":null}]]]]}`,
		"{\"pod_type\":\"\xff\"}",
		`{"a":1} trailing`,
		`[1,-2.5e3,"x",true,false,null,-Infinity,NaN]`,
		``, `null`, `[]`, `{}`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s := scanAll(body, 10000) // encoding/json's own depth limit
		want := json.Valid(body) && utf8.Valid(body)
		switch {
		case s.sawNonFinite && want:
			t.Fatalf("scanner read a non-finite literal in valid JSON %q", body)
		case !s.sawNonFinite && s.Failed() == want:
			t.Fatalf("scanner says valid=%v (%s at %d), encoding/json %v, for %q", !s.Failed(), s.errMsg, s.errPos, want, body)
		}
		if !s.Failed() {
			sc := New(body, 10000)
			v, ok := sc.AnyValue(1)
			if !ok {
				t.Fatalf("AnyValue failed on scanned body %q", body)
			}
			if _, err := json.Marshal(v); err != nil {
				t.Fatalf("AnyValue(%q) not encodable: %v", body, err)
			}
		}
	})
}
