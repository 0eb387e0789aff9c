package wire

import (
	"math"
	"testing"

	"github.com/headroomhq/headroom/internal/jsonscan"
)

// tokenOf reads one JSON value as the decoders read a field value.
func tokenOf(t *testing.T, lit string) jsonscan.Token {
	t.Helper()
	s := jsonscan.New([]byte(lit), 64)
	tok, ok := s.ReadToken(2)
	if !ok || !s.Finish() {
		pos, reason := s.Err()
		t.Fatalf("token %s: %s at %d", lit, reason, pos)
	}
	return tok
}

func TestCountValue(t *testing.T) {
	const max = 1000
	tests := []struct {
		lit  string
		want int64
		code problemCode
	}{
		{`0`, 0, noProblem},
		{`200`, 200, noProblem},
		{`200.0`, 200, noProblem},
		{`2e2`, 200, noProblem},
		{`"200"`, 200, noProblem},
		{`" 200 "`, 200, noProblem},
		{`"2e2"`, 200, noProblem},
		{`"200.0"`, 200, noProblem},
		{`1000`, 1000, noProblem},
		{`200.5`, 0, probIntFromFloat},
		{`-0.5`, 0, probIntFromFloat},
		{`"200.5"`, 0, probIntParsing},
		{`"abc"`, 0, probIntParsing},
		{`""`, 0, probIntParsing},
		{`1001`, 0, probLessEqual},
		{`1e400`, 0, probLessEqual},
		{`9223372036854775808`, 0, probLessEqual},
		{`-1`, -1, probGreaterEqual},
		{`"-1"`, -1, probGreaterEqual},
		{`-1e400`, math.MinInt64, probGreaterEqual},
		{`NaN`, 0, probFiniteNumber},
		{`-Infinity`, 0, probFiniteNumber},
		{`"NaN"`, 0, probFiniteNumber},
		{`"inf"`, 0, probFiniteNumber},
		{`true`, 0, probIntType},
		{`null`, 0, probIntType},
		{`{}`, 0, probIntType},
		{`[1]`, 0, probIntType},
	}
	for _, tt := range tests {
		tok := tokenOf(t, tt.lit)
		got, code := countValue(&tok, max)
		if code != tt.code || got != tt.want {
			t.Errorf("countValue(%s) = %d, problem %d; want %d, problem %d", tt.lit, got, code, tt.want, tt.code)
		}
	}
}

func TestBoundedFloat(t *testing.T) {
	const maxMs = 3_600_000
	tests := []struct {
		lit      string
		fraction float64
		fracCode problemCode
		latency  float64
		latCode  problemCode
	}{
		{`0`, 0, noProblem, 0, noProblem},
		{`-0`, 0, noProblem, 0, noProblem},
		{`1`, 1, noProblem, 1, noProblem},
		{`0.3252`, 0.3252, noProblem, 0.3252, noProblem},
		{`"0.5"`, 0.5, noProblem, 0.5, noProblem},
		{`253`, 0, probLessEqual, 253, noProblem},
		{`1.0000001`, 0, probLessEqual, 1.0000001, noProblem},
		{`3600000`, 0, probLessEqual, 3600000, noProblem},
		{`3600000.5`, 0, probLessEqual, 0, probLessEqual},
		{`-0.001`, 0, probGreaterEqual, 0, probGreaterEqual},
		{`1e400`, 0, probFiniteNumber, 0, probFiniteNumber},
		{`-1e400`, 0, probFiniteNumber, 0, probFiniteNumber},
		{`1e-400`, 0, noProblem, 0, noProblem},
		{`NaN`, 0, probFiniteNumber, 0, probFiniteNumber},
		{`Infinity`, 0, probFiniteNumber, 0, probFiniteNumber},
		{`"Infinity"`, 0, probFiniteNumber, 0, probFiniteNumber},
		{`"-inf"`, 0, probFiniteNumber, 0, probFiniteNumber},
		{`"1e400"`, 0, probFiniteNumber, 0, probFiniteNumber},
		{`"abc"`, 0, probFloatParsing, 0, probFloatParsing},
		{`{}`, 0, probFloatType, 0, probFloatType},
		{`[]`, 0, probFloatType, 0, probFloatType},
		{`true`, 0, probFloatType, 0, probFloatType},
		{`null`, 0, probFloatType, 0, probFloatType},
	}
	for _, tt := range tests {
		tok := tokenOf(t, tt.lit)
		if got, code := boundedFloat(&tok, 1); code != tt.fracCode || got != tt.fraction || math.Signbit(got) {
			t.Errorf("fraction %s = %v, problem %d; want %v, problem %d", tt.lit, got, code, tt.fraction, tt.fracCode)
		}
		if got, code := boundedFloat(&tok, maxMs); code != tt.latCode || got != tt.latency || math.Signbit(got) {
			t.Errorf("latency %s = %v, problem %d; want %v, problem %d", tt.lit, got, code, tt.latency, tt.latCode)
		}
	}
}

func TestPodTypeValue(t *testing.T) {
	tests := []struct {
		lit  string
		want string
		code problemCode
	}{
		{`"prefill"`, "prefill", noProblem},
		{`"decode"`, "decode", noProblem},
		{`""`, "", noProblem},
		{`null`, "", noProblem},
		{`"Prefill"`, "Prefill", noProblem}, // kept as sent; features.PodTypeCode folds case
		{`"gpu-\u00e9 \"x\""`, `gpu-é "x"`, noProblem},
		{`1`, "", probStringType},
		{`true`, "", probStringType},
		{`{}`, "", probStringType},
	}
	for _, tt := range tests {
		tok := tokenOf(t, tt.lit)
		if got, code := podTypeValue(&tok, ""); got != tt.want || code != tt.code {
			t.Errorf("podTypeValue(%s) = %q, problem %d; want %q, problem %d", tt.lit, got, code, tt.want, tt.code)
		}
	}
}

func TestDecodeLimitsDefaults(t *testing.T) {
	d := DefaultDecodeLimits()
	if got := (DecodeLimits{}).withDefaults(); got != d {
		t.Errorf("zero DecodeLimits resolves to %+v, want %+v", got, d)
	}
	if d.MaxPredictCount != 1e9 || d.MaxSampleCount != 1e8 || d.MaxLatencyMs != 3.6e6 || d.MaxDepth != 64 {
		t.Errorf("DefaultDecodeLimits = %+v, not the documented values", d)
	}
	custom := DecodeLimits{MaxPredictCount: 5, MaxSampleCount: 6, MaxLatencyMs: 7, MaxDepth: 8, MaxErrors: 9}
	if got := custom.withDefaults(); got != custom {
		t.Errorf("withDefaults changed set limits: %+v", got)
	}
	if got := (DecodeLimits{MaxLatencyMs: math.Inf(1)}).withDefaults(); got.MaxLatencyMs != d.MaxLatencyMs {
		t.Errorf("an infinite latency ceiling was kept: %v", got.MaxLatencyMs)
	}
}

func TestLookupFieldIsExact(t *testing.T) {
	for f := range numFields {
		if got, ok := lookupField([]byte(fieldNames[f])); !ok || got != f {
			t.Errorf("lookupField(%q) = %d, %v", fieldNames[f], got, ok)
		}
	}
	for _, k := range []string{"KV_CACHE_PERCENTAGE", "kv_cache_percentage ", "podType", ""} {
		if _, ok := lookupField([]byte(k)); ok {
			t.Errorf("lookupField(%q) matched", k)
		}
	}
}
