package api

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

func lexAll(t *testing.T, lit string) numLit {
	t.Helper()
	n, end, ok, at, reason := lexNumber([]byte(lit), 0)
	if !ok || end != len(lit) {
		t.Fatalf("lexNumber(%q) = end %d ok %v (error at %d: %s), want the whole literal", lit, end, ok, at, reason)
	}
	return n
}

func TestToInt(t *testing.T) {
	tests := []struct {
		lit  string
		want int64
		st   intStatus
	}{
		{"0", 0, intOK},
		{"-0", 0, intOK},
		{"200", 200, intOK},
		{"200.0", 200, intOK},
		{"200.000000000000000000000000000", 200, intOK},
		{"2e2", 200, intOK},
		{"2E+2", 200, intOK},
		{"20000e-2", 200, intOK},
		{"1.5e1", 15, intOK},
		{"0.0", 0, intOK},
		{"0e999999999999", 0, intOK},
		{"-1", -1, intOK},
		{"9223372036854775807", math.MaxInt64, intOK},
		{"-9223372036854775808", math.MinInt64, intOK},
		{"9223372036854775807.0", math.MaxInt64, intOK},
		{"9.223372036854775807e18", math.MaxInt64, intOK},
		// 19 significant digits, the 20th dropped but zero.
		{"12345678901234567890e-1", 1234567890123456789, intOK},
		{"1234567890123456789.0", 1234567890123456789, intOK},
		{"200.5", 0, intFractional},
		{"0.5", 0, intFractional},
		{"-0.5", 0, intFractional},
		{"1e-1", 0, intFractional},
		{"1e-999999999999", 0, intFractional},
		{"12345678901234567890123e-10", 0, intFractional},
		{"1234567890123456789.5", 0, intFractional},
		// Exactness: a float64 would round this to an integer.
		{"9007199254740993.5", 0, intFractional},
		{"9223372036854775808", 0, intAboveRange},
		{"-9223372036854775809", 0, intBelowRange},
		{"1e19", 0, intAboveRange},
		{"1e400", 0, intAboveRange},
		{"-1e400", 0, intBelowRange},
		{"100000000000000000000000000000", 0, intAboveRange},
		{"123456789012345678901.5", 0, intAboveRange},
	}
	for _, tt := range tests {
		got, st := lexAll(t, tt.lit).toInt()
		if st != tt.st || st == intOK && got != tt.want {
			t.Errorf("toInt(%s) = %d, status %d; want %d, status %d", tt.lit, got, st, tt.want, tt.st)
		}
	}
}

func TestToFloatMatchesStrconv(t *testing.T) {
	fixed := []string{
		"0", "-0", "1", "0.3252", "0.6573", "253", "1e-7", "5e-324", "1e-400", "-1e-400",
		"1.7976931348623157e308", "1.7976931348623159e308", "1e308", "1e309", "-1e400",
		"9007199254740993", "9007199254740992.5", "123456789012345678901234567890",
		"0.1000000000000000055511151231257827", "4.9406564584124654e-324",
		"2.2250738585072011e-308", "1e22", "1e23", "9999999999999999e22", "0.000000000000000000000001",
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		fixed = append(fixed, randomLiteral(r))
	}
	for _, lit := range fixed {
		n := lexAll(t, lit)
		got, finite := n.toFloat([]byte(lit))
		want, err := strconv.ParseFloat(lit, 64)
		if math.IsInf(want, 0) {
			if finite {
				t.Errorf("toFloat(%s) = %g, finite; want overflow", lit, got)
			}
			continue
		}
		if err != nil {
			t.Fatalf("strconv.ParseFloat(%s): %v", lit, err)
		}
		if !finite || got != want || got == 0 && math.Signbit(got) {
			t.Errorf("toFloat(%s) = %v (finite %v, signbit %v); want %v, never -0", lit, got, finite, math.Signbit(got), want)
		}
	}
}

// randomLiteral returns a JSON number literal of a random shape: short
// decimals like routers send, long ones, exponents near the float64 limits.
func randomLiteral(r *rand.Rand) string {
	digits := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteByte(byte('0' + r.IntN(10)))
		}
		return b.String()
	}
	var b strings.Builder
	if r.IntN(4) == 0 {
		b.WriteByte('-')
	}
	intPart := digits(1 + r.IntN(25))
	intPart = strings.TrimLeft(intPart, "0")
	if intPart == "" {
		intPart = "0"
	}
	b.WriteString(intPart)
	if r.IntN(2) == 0 {
		b.WriteByte('.')
		b.WriteString(digits(1 + r.IntN(25)))
	}
	if r.IntN(3) == 0 {
		b.WriteString([]string{"e", "E", "e+", "e-", "E-"}[r.IntN(5)])
		b.WriteString(strconv.Itoa(r.IntN(340)))
	}
	return b.String()
}

func TestLexNumberRejects(t *testing.T) {
	for _, lit := range []string{"-", "", ".5", "1.", "1.e5", "1e", "1e+", "-x", "+1"} {
		if _, _, ok, _, _ := lexNumber([]byte(lit), 0); ok {
			t.Errorf("lexNumber(%q) accepted", lit)
		}
	}
	// A valid prefix ends the literal; the caller judges what follows.
	for lit, end := range map[string]int{"01": 1, "1x": 1, "-0.5e3,": 6, "12 ": 2} {
		if _, got, ok, _, _ := lexNumber([]byte(lit), 0); !ok || got != end {
			t.Errorf("lexNumber(%q) end = %d, %v; want %d", lit, got, ok, end)
		}
	}
}

func TestNonFiniteLen(t *testing.T) {
	for in, want := range map[string]int{
		"NaN": 3, "nan": 3, "-nan": 4, "Infinity": 8, "-Infinity": 9, "+Infinity": 9, "inf": 3,
		"-INF": 4, "+inf": 4, "INFINITY,": 8, "Infinite": 3, "null": 0, "1": 0, "-1": 0, "": 0, "+": 0, "in": 0,
	} {
		if got := nonFiniteLen([]byte(in)); got != want {
			t.Errorf("nonFiniteLen(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestParseNumericString(t *testing.T) {
	tests := []struct {
		in   string
		kind numericStringKind
	}{
		{"200", numericFinite},
		{" 200 ", numericFinite},
		{"-1.5e3", numericFinite},
		{"NaN", numericNonFinite},
		{" -Infinity", numericNonFinite},
		{"inf", numericNonFinite},
		{"", notNumeric},
		{"   ", notNumeric},
		{"abc", notNumeric},
		{"200abc", notNumeric},
		{"0x10", notNumeric},
		{"1_000", notNumeric},
		{"+5", notNumeric},
		{"NaNa", notNumeric},
	}
	for _, tt := range tests {
		if _, _, kind := parseNumericString([]byte(tt.in)); kind != tt.kind {
			t.Errorf("parseNumericString(%q) kind = %d, want %d", tt.in, kind, tt.kind)
		}
	}
}
