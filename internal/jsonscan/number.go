package jsonscan

import (
	"math"
	"strconv"
)

// Number is a JSON number literal reduced to a decimal significand and
// exponent while it is scanned, so that integer fields are checked exactly
// (200.0 and 2e2 are integers, 9007199254740993.0 is not rounded first) and
// short decimals convert to float64 without strconv.
//
// The value is ±(mant + δ) × 10^exp, where mant holds the first 19
// significant digits and 0 ≤ δ < 1 stands for the digits after them;
// δ > 0 exactly when droppedNonZero.
type Number struct {
	mant           uint64
	exp            int
	neg            bool
	droppedNonZero bool
}

// maxSigDigits is how many significant digits fit in mant without overflow.
const maxSigDigits = 19

// exponentClamp bounds a parsed exponent. Any literal whose exponent reaches
// it is far outside int64 and float64 either way, so clamping keeps the
// classification right while keeping arithmetic on exp from overflowing.
const exponentClamp = 1 << 30

// LexNumber reads a JSON number starting at b[i]. It returns the literal's
// end, or ok false with the offset and reason of the first bad byte. A valid
// literal may be followed by anything: the caller decides whether that is
// a delimiter.
func LexNumber(b []byte, i int) (n Number, end int, ok bool, errAt int, reason string) {
	if i < len(b) && b[i] == '-' {
		n.neg = true
		i++
	}
	sig := 0 // significant digits taken into mant
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if sig < maxSigDigits {
				n.mant = n.mant*10 + uint64(b[i]-'0')
				sig++
				continue
			}
			n.exp++
			if b[i] != '0' {
				n.droppedNonZero = true
			}
		}
	default:
		return n, 0, false, i, "Expecting value"
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return n, 0, false, i, "Expecting digit after decimal point"
		}
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			switch d := b[i]; {
			case n.mant == 0 && d == '0':
				n.exp-- // a leading zero only shifts the scale
			case sig < maxSigDigits:
				n.mant = n.mant*10 + uint64(d-'0')
				sig++
				n.exp--
			case d != '0':
				n.droppedNonZero = true
			}
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		expNeg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			expNeg = b[i] == '-'
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return n, 0, false, i, "Expecting digit in exponent"
		}
		e := 0
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if e < exponentClamp {
				e = e*10 + int(b[i]-'0')
			}
		}
		if expNeg {
			e = -e
		}
		n.exp += e
	}
	return n, i, true, 0, ""
}

// IntStatus classifies a literal read as an integer.
type IntStatus uint8

const (
	IntOK         IntStatus = iota
	IntFractional           // has a non-zero fractional part
	IntAboveRange           // an integer above math.MaxInt64
	IntBelowRange           // an integer below math.MinInt64
)

// toInt returns the literal's exact integer value when it has one that fits
// in an int64.
func (n Number) Int() (int64, IntStatus) {
	outOfRange := IntAboveRange
	if n.neg {
		outOfRange = IntBelowRange
	}
	if n.mant == 0 {
		return 0, IntOK // droppedNonZero needs 19 digits in mant first
	}
	m, exp := n.mant, n.exp
	if n.droppedNonZero {
		// mant has 19 digits, so mant+δ is not an integer: any scale that
		// keeps a fraction is fractional, any other is at least 10^19.
		if exp > 0 {
			return 0, outOfRange
		}
		return 0, IntFractional
	}
	for exp < 0 && m%10 == 0 {
		m /= 10
		exp++
	}
	if exp < 0 {
		return 0, IntFractional
	}
	if exp > maxSigDigits {
		return 0, outOfRange
	}
	for ; exp > 0; exp-- {
		if m > math.MaxUint64/10 {
			return 0, outOfRange
		}
		m *= 10
	}
	if n.neg {
		if m > 1<<63 {
			return 0, outOfRange
		}
		return int64(-m), IntOK // -(1<<63) wraps to MinInt64, as wanted
	}
	if m > math.MaxInt64 {
		return 0, outOfRange
	}
	return int64(m), IntOK
}

// pow10 holds the powers of ten that float64 represents exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// toFloat converts the literal lit (the bytes n was lexed from) to the
// nearest float64, reporting false when it overflows to an infinity.
// Negative zero becomes zero so that stored values compare plainly.
//
// When the significand and the power of ten are both exact in float64, one
// IEEE multiplication or division rounds correctly (Clinger's fast path):
// the result equals strconv's, which serves every other literal.
func (n Number) Float(lit []byte) (float64, bool) {
	if n.mant == 0 && !n.droppedNonZero {
		return 0, true
	}
	if n.mant < 1<<53 && n.exp >= -22 && n.exp <= 22 {
		f := float64(n.mant)
		if n.exp < 0 {
			f /= pow10[-n.exp]
		} else {
			f *= pow10[n.exp]
		}
		if n.neg {
			f = -f
		}
		return f, true
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		// LexNumber accepted lit, so the only possible error is overflow
		// to an infinity (underflow rounds to zero without error).
		return 0, false
	}
	if f == 0 {
		f = 0 // a negative literal that underflows gives -0
	}
	return f, true
}

// NonFiniteLen returns the length of a non-finite spelling at the start of
// b: an optional sign and "nan", "inf" or "infinity" in any case, as Python
// and strconv spell them; 0 when there is none. JSON has no such values,
// but Python clients emit them, and a field-level "finite_number" error is
// clearer than "invalid JSON".
func NonFiniteLen(b []byte) int {
	i := 0
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		i++
	}
	for _, word := range [...]string{"infinity", "inf", "nan"} {
		if HasPrefixFold(b[i:], word) {
			return i + len(word)
		}
	}
	return 0
}

// HasPrefixFold reports whether b starts with word, which is lower-case
// ASCII, ignoring the case of ASCII letters only.
func HasPrefixFold(b []byte, word string) bool {
	if len(b) < len(word) {
		return false
	}
	for j := 0; j < len(word); j++ {
		c := b[j]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != word[j] {
			return false
		}
	}
	return true
}

// numericString classifies the content of a JSON string given for a number
// field (pydantic's lax mode accepts "200"): a JSON number literal with
// optional surrounding ASCII space, or a non-finite spelling.
type NumericKind uint8

const (
	NotNumeric NumericKind = iota
	NumericFinite
	NumericNonFinite
)

func ParseNumericString(s []byte) (n Number, lit []byte, kind NumericKind) {
	s = TrimSpace(s)
	if len(s) == 0 {
		return n, nil, NotNumeric
	}
	if l := NonFiniteLen(s); l > 0 && l == len(s) {
		return n, s, NumericNonFinite
	}
	n, end, ok, _, _ := LexNumber(s, 0)
	if !ok || end != len(s) {
		return n, nil, NotNumeric
	}
	return n, s, NumericFinite
}

func TrimSpace(s []byte) []byte {
	for len(s) > 0 && IsSpace(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && IsSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

func IsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
