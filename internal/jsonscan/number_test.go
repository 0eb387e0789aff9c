package jsonscan

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

func lexAll(t *testing.T, lit string) Number {
	t.Helper()
	n, end, ok, at, reason := LexNumber([]byte(lit), 0)
	if !ok || end != len(lit) {
		t.Fatalf("LexNumber(%q) = end %d ok %v (error at %d: %s), want the whole literal", lit, end, ok, at, reason)
	}
	return n
}

func TestToInt(t *testing.T) {
	tests := []struct {
		lit  string
		want int64
		st   IntStatus
	}{
		{"0", 0, IntOK},
		{"-0", 0, IntOK},
		{"200", 200, IntOK},
		{"200.0", 200, IntOK},
		{"200.000000000000000000000000000", 200, IntOK},
		{"2e2", 200, IntOK},
		{"2E+2", 200, IntOK},
		{"20000e-2", 200, IntOK},
		{"1.5e1", 15, IntOK},
		{"0.0", 0, IntOK},
		{"0e999999999999", 0, IntOK},
		{"-1", -1, IntOK},
		{"9223372036854775807", math.MaxInt64, IntOK},
		{"-9223372036854775808", math.MinInt64, IntOK},
		{"9223372036854775807.0", math.MaxInt64, IntOK},
		{"9.223372036854775807e18", math.MaxInt64, IntOK},
		// 19 significant digits, the 20th dropped but zero.
		{"12345678901234567890e-1", 1234567890123456789, IntOK},
		{"1234567890123456789.0", 1234567890123456789, IntOK},
		{"200.5", 0, IntFractional},
		{"0.5", 0, IntFractional},
		{"-0.5", 0, IntFractional},
		{"1e-1", 0, IntFractional},
		{"1e-999999999999", 0, IntFractional},
		{"12345678901234567890123e-10", 0, IntFractional},
		{"1234567890123456789.5", 0, IntFractional},
		// Exactness: a float64 would round this to an integer.
		{"9007199254740993.5", 0, IntFractional},
		{"9223372036854775808", 0, IntAboveRange},
		{"-9223372036854775809", 0, IntBelowRange},
		{"1e19", 0, IntAboveRange},
		{"1e400", 0, IntAboveRange},
		{"-1e400", 0, IntBelowRange},
		{"100000000000000000000000000000", 0, IntAboveRange},
		{"123456789012345678901.5", 0, IntAboveRange},
	}
	for _, tt := range tests {
		got, st := lexAll(t, tt.lit).Int()
		if st != tt.st || st == IntOK && got != tt.want {
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
		got, finite := n.Float([]byte(lit))
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
		if _, _, ok, _, _ := LexNumber([]byte(lit), 0); ok {
			t.Errorf("LexNumber(%q) accepted", lit)
		}
	}
	// A valid prefix ends the literal; the caller judges what follows.
	for lit, end := range map[string]int{"01": 1, "1x": 1, "-0.5e3,": 6, "12 ": 2} {
		if _, got, ok, _, _ := LexNumber([]byte(lit), 0); !ok || got != end {
			t.Errorf("LexNumber(%q) end = %d, %v; want %d", lit, got, ok, end)
		}
	}
}

func TestNonFiniteLen(t *testing.T) {
	for in, want := range map[string]int{
		"NaN": 3, "nan": 3, "-nan": 4, "Infinity": 8, "-Infinity": 9, "+Infinity": 9, "inf": 3,
		"-INF": 4, "+inf": 4, "INFINITY,": 8, "Infinite": 3, "null": 0, "1": 0, "-1": 0, "": 0, "+": 0, "in": 0,
	} {
		if got := NonFiniteLen([]byte(in)); got != want {
			t.Errorf("NonFiniteLen(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestParseNumericString(t *testing.T) {
	tests := []struct {
		in   string
		kind NumericKind
	}{
		{"200", NumericFinite},
		{" 200 ", NumericFinite},
		{"-1.5e3", NumericFinite},
		{"NaN", NumericNonFinite},
		{" -Infinity", NumericNonFinite},
		{"inf", NumericNonFinite},
		{"", NotNumeric},
		{"   ", NotNumeric},
		{"abc", NotNumeric},
		{"200abc", NotNumeric},
		{"0x10", NotNumeric},
		{"1_000", NotNumeric},
		{"+5", NotNumeric},
		{"NaNa", NotNumeric},
	}
	for _, tt := range tests {
		if _, _, kind := ParseNumericString([]byte(tt.in)); kind != tt.kind {
			t.Errorf("ParseNumericString(%q) kind = %d, want %d", tt.in, kind, tt.kind)
		}
	}
}
