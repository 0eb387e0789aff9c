package jsonscan

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// scanAll validates data as one JSON text the way the decoders do.
func scanAll(data []byte, maxDepth int) Scanner {
	s := New(data, maxDepth)
	if s.SkipValue(1) {
		s.Finish()
	}
	return s
}

func TestScannerValidity(t *testing.T) {
	tests := []struct {
		in     string
		valid  bool
		errPos int    // when invalid
		reason string // when invalid: a substring of the reason
	}{
		{`{}`, true, 0, ""},
		{` [1, -2.5e3, "x", true, false, null, {"a": [{}]}] `, true, 0, ""},
		{`"\u00e9\"\\\/\b\f\n\r\t"`, true, 0, ""},
		{`""`, true, 0, ""},
		{``, false, 0, "Expecting value"},
		{`   `, false, 3, "Expecting value"},
		{`{"a":1,}`, false, 7, "Expecting property name"},
		{`{"a" 1}`, false, 5, "Expecting ':'"},
		{`{"a":1 "b":2}`, false, 7, "Expecting ','"},
		{`[1 2]`, false, 3, "Expecting ','"},
		{`[1,]`, false, 3, "Expecting value"},
		{`{"a":1}x`, false, 7, "Extra data"},
		{`{"a":1}{}`, false, 7, "Extra data"},
		{`{'a':1}`, false, 1, "Expecting property name"},
		{`"abc`, false, 0, "Unterminated string"},
		{"\"a\x01b\"", false, 2, "Invalid control character"},
		{"\"a\xffb\"", false, 2, "Invalid UTF-8"},
		{"\"\xed\xa0\x80\"", false, 1, "Invalid UTF-8"}, // a surrogate encoded in UTF-8
		{`"\x"`, false, 1, "Invalid \\escape"},
		{`"\u12"`, false, 1, "Invalid \\uXXXX"},
		{`tru`, false, 0, "Expecting value"},
		{`nul`, false, 0, "Expecting value"},
		{`01`, false, 1, "Extra data"},
		{`1.`, false, 2, "Expecting digit"},
		{`-`, false, 1, "Expecting value"},
		{`+1`, false, 0, "Expecting value"},
		{`.5`, false, 0, "Expecting value"},
		{"\ufeff{}", false, 0, "Expecting value"}, // a byte order mark is not JSON
	}
	for _, tt := range tests {
		s := scanAll([]byte(tt.in), 64)
		if got := !s.Failed(); got != tt.valid {
			t.Errorf("%q: valid = %v, want %v (error %q at %d)", tt.in, got, tt.valid, s.errMsg, s.errPos)
			continue
		}
		if !tt.valid && (s.errPos != tt.errPos || !strings.Contains(s.errMsg, tt.reason)) {
			t.Errorf("%q: error %q at %d, want %q at %d", tt.in, s.errMsg, s.errPos, tt.reason, tt.errPos)
		}
		// Agreement with encoding/json, which does not check UTF-8.
		if want := json.Valid([]byte(tt.in)) && utf8.ValidString(tt.in); want != tt.valid {
			t.Errorf("%q: table says valid=%v, encoding/json says %v", tt.in, tt.valid, want)
		}
	}
}

func TestScannerNonFiniteTokens(t *testing.T) {
	for _, in := range []string{`NaN`, `[Infinity, -Infinity, nan, +inf]`, `{"x": -INF}`} {
		s := scanAll([]byte(in), 64)
		if s.Failed() || !s.sawNonFinite {
			t.Errorf("%q: failed %v (%s), sawNonFinite %v; want accepted as non-finite", in, s.Failed(), s.errMsg, s.sawNonFinite)
		}
	}
	for _, in := range []string{`Infinitx`, `[NaNa]`, `-Infinity1`} {
		if s := scanAll([]byte(in), 64); !s.Failed() {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestScannerDepth(t *testing.T) {
	nested := func(n int) []byte {
		return []byte(strings.Repeat(`{"a":[`, n) + strings.Repeat(`]}`, n))
	}
	// n levels of {"a":[ ... ]} are 2n containers deep.
	if s := scanAll(nested(32), 64); s.Failed() {
		t.Errorf("depth 64 refused: %s", s.errMsg)
	}
	s := scanAll(nested(33), 64)
	if !s.Failed() || !strings.Contains(s.errMsg, "depth") {
		t.Errorf("depth 66: error %q, want a depth error", s.errMsg)
	}
	// Far past any stack a recursive decoder could survive without a limit.
	if s := scanAll(nested(1_000_000), 64); !s.Failed() {
		t.Error("depth 2e6 accepted")
	}
}

func TestReadStringUnescapes(t *testing.T) {
	tests := map[string]string{
		`"plain"`:                     "plain",
		`"caf\u00e9"`:                 "café",
		`"café"`:                      "café",
		`"a\"b\\c\/d"`:                `a"b\c/d`,
		`"\b\f\n\r\t"`:                "\b\f\n\r\t",
		`"\ud83d\ude00"`:              "😀",
		`"\uD83D\uDE00x"`:             "😀x",
		`"lone \ud83d here"`:          "lone \ufffd here",
		`"lone \ude00"`:               "lone \ufffd",
		`"\ud83d\u0041"`:              "\ufffdA",
		`"\u003cscript\u003e \u0026"`: "<script> &",
		`"mixed é and \u00e9 and \n"`: "mixed é and é and \n",
	}
	for in, want := range tests {
		s := New([]byte(in), 64)
		got, ok := s.readString(true)
		if !ok || string(got) != want {
			t.Errorf("readString(%s) = %q, %v (%s); want %q", in, got, ok, s.errMsg, want)
		}
		var ref string
		if err := json.Unmarshal([]byte(in), &ref); err != nil || ref != want {
			t.Errorf("encoding/json reads %s as %q (%v); the table says %q", in, ref, err, want)
		}
	}
}

func TestAnyValueIsEncodable(t *testing.T) {
	in := `{"i": 200, "f": 0.5, "big": 1e400, "neg": -1e400, "huge": 123456789012345678901234,
		"nan": NaN, "inf": -Infinity, "s": "x", "b": true, "n": null, "l": [1, {"k": []}], "dup": 1, "dup": 2}`
	s := New([]byte(in), 64)
	v, ok := s.AnyValue(1)
	if !ok {
		t.Fatalf("anyValue: %s at %d", s.errMsg, s.errPos)
	}
	want := map[string]any{
		"i": int64(200), "f": 0.5, "big": "1e400", "neg": "-1e400", "huge": 1.2345678901234568e23,
		"nan": "NaN", "inf": "-Infinity", "s": "x", "b": true, "n": nil,
		"l": []any{int64(1), map[string]any{"k": []any{}}}, "dup": int64(2),
	}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("anyValue = %#v\nwant %#v", v, want)
	}
	if _, err := json.Marshal(v); err != nil {
		t.Errorf("anyValue result not encodable: %v", err)
	}
}

func TestNumberValue(t *testing.T) {
	for lit, want := range map[string]any{
		"1": int64(1), "-7": int64(-7), "1.0": 1.0, "2e2": 200.0, "9223372036854775808": 9.223372036854775808e18,
		"1e400": "1e400", "0.1": 0.1,
	} {
		n := lexAll(t, lit)
		if got := numberValue(n, []byte(lit)); got != want {
			t.Errorf("numberValue(%s) = %#v, want %#v", lit, got, want)
		}
		if f, ok := numberValue(n, []byte(lit)).(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			t.Errorf("numberValue(%s) is not finite", lit)
		}
	}
}

// TestPlainPrefix checks the eight-at-a-time scan against the byte table:
// it must never skip a special byte, and stop at most 7 bytes short.
func TestPlainPrefix(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	special := []byte{'"', '\\', 0, 0x1f, 0x7f, 0x80, 0xff, 0x20, 0x21, 0x5b, 0x5d}
	for range 200000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(0x20 + r.IntN(0x5f))
			if r.IntN(12) == 0 {
				b[i] = special[r.IntN(len(special))]
			}
		}
		want := 0
		for want < len(b) && strPlain[b[want]] {
			want++
		}
		if got := plainPrefix(b); got > want || want-got > 7 && len(b)-got >= 8 {
			t.Fatalf("plainPrefix(%q) = %d, the first special byte is at %d", b, got, want)
		}
	}
}
