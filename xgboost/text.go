package xgboost

import (
	"math"
	"strconv"
	"strings"
)

// floatText formats v for XGBoost's text readers (the CSV parser and the
// configuration file) so that they read exactly float32(v). They parse with
// dmlc-core's strtof, which is fast but not correctly rounded: it adds the
// integer and fraction parts in float32 and scales by powers of ten built
// from float32 products, so the shortest decimal for a float32 (what strconv
// writes) is sometimes read one ulp off: "1.3309378e+06" and "4.6888983e-04"
// are, and so are about 1% of plain decimals between 1 and 10000. The text
// is the first of these that dmlcStrtof, a bit-exact model of that parser,
// reads back as float32(v): the shortest plain decimal, plain decimals with
// more fraction digits, then a plain mantissa with an exponent. Only some
// values below 1e-35 in magnitude reach none of them; they fall back to the
// shortest decimal and may be read one ulp off.
func floatText(v float64) string {
	s, _ := exactDecimal(float32(v))
	return s
}

// exactDecimal is floatText for a float32; exact reports whether XGBoost
// reads the text as exactly v.
func exactDecimal(v float32) (text string, exact bool) {
	switch {
	case v != v:
		return "nan", true
	case math.IsInf(float64(v), 1):
		return "inf", true
	case math.IsInf(float64(v), -1):
		return "-inf", true
	}
	if s, ok := plainDecimal(v); ok {
		return s, true
	}
	sign, a := "", v
	if v < 0 {
		sign, a = "-", -v
	}
	// The parser clamps a mantissa below 1.175494351 when dividing by 1e38,
	// so subnormals are out of reach; the search below would only spin.
	if a < math.SmallestNonzeroFloat32*(1<<23) {
		return strconv.FormatFloat(float64(v), 'g', -1, 32), false
	}
	// Mantissa c and exponent e: the parser reads c (exactly, as
	// plainDecimal checks), then multiplies or divides by its own 10^e. Try
	// the float32 values around a·10^∓e; rounding against an inexact power
	// of ten skips some results, so several exponents may be needed.
	for _, mantissas := range [...][2]float64{{1, 1 << 63}, {1e-6, 1}} { // prefer 1e-30 to 0.000001e-24
		for e := 1; e <= 38; e++ {
			scale := dmlcPow10(e)
			for _, divide := range [...]bool{true, false} {
				m, expSign := float64(a)/float64(scale), "e+"
				if divide {
					m, expSign = float64(a)*float64(scale), "e-"
				}
				if m < mantissas[0] || m >= mantissas[1] {
					continue
				}
				c := float32(m)
				for range 3 {
					c = math.Nextafter32(c, 0)
				}
				for range 7 {
					if mant, ok := plainDecimal(c); ok {
						if s := sign + mant + expSign + strconv.Itoa(e); dmlcStrtof(s) == v {
							return s, true
						}
					}
					c = math.Nextafter32(c, float32(math.Inf(1)))
				}
			}
		}
	}
	return strconv.FormatFloat(float64(v), 'g', -1, 32), false
}

// plainDecimal returns digits with an optional fraction that dmlcStrtof
// reads as exactly v, if one of the forms it tries does: the shortest
// decimal, then the value rounded to 1, 2, … 19 fraction digits (the parser
// ignores digits past the 19th).
func plainDecimal(v float32) (string, bool) {
	if s := strconv.FormatFloat(float64(v), 'f', -1, 32); dmlcStrtof(s) == v {
		return s, true
	}
	for digits := 1; digits <= 19; digits++ {
		if s := strconv.FormatFloat(float64(v), 'f', digits, 64); dmlcStrtof(s) == v {
			return s, true
		}
	}
	return "", false
}

// dmlcStrtof is dmlc::ParseFloat<float> (dmlc-core's strtonum.h, used by
// XGBoost 1.7's CSV parser and parameter parser) for the forms
// exactDecimal writes: "nan", an optionally signed "inf", or an optional
// sign, digits, an optional fraction and an optional exponent. Every step rounds as the C++ does; explicit conversions stop the
// compiler from fusing operations.
func dmlcStrtof(s string) float32 {
	i := 0
	negative := false
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		negative = s[i] == '-'
		i++
	}
	switch rest := strings.ToLower(s[i:]); rest {
	case "inf", "infinity":
		if negative {
			return float32(math.Inf(-1))
		}
		return float32(math.Inf(1))
	case "nan":
		return float32(math.NaN())
	}
	var predec uint64 // wraps on overflow, as in C++
	for ; i < len(s) && isDigit(s[i]); i++ {
		predec = predec*10 + uint64(s[i]-'0')
	}
	value := float32(predec)
	if i < len(s) && s[i] == '.' {
		i++
		var frac, pow10 uint64 = 0, 1
		for n := 0; i < len(s) && isDigit(s[i]); i, n = i+1, n+1 {
			if n < 19 {
				frac = frac*10 + uint64(s[i]-'0')
				pow10 *= 10
			}
		}
		value = float32(value + float32(float64(frac)/float64(pow10)))
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		divide := false
		if i < len(s) && (s[i] == '-' || s[i] == '+') {
			divide = s[i] == '-'
			i++
		}
		var e uint32
		for ; i < len(s) && isDigit(s[i]); i++ {
			e = e*10 + uint32(s[i]-'0')
		}
		if e > 38 {
			e = 38
		}
		if e == 38 {
			switch {
			case !divide && value > 3.402823466:
				value = 3.402823466
			case divide && value < 1.175494351:
				value = 1.175494351
			}
		}
		if divide {
			value = float32(value / dmlcPow10(int(e)))
		} else {
			value = float32(value * dmlcPow10(int(e)))
		}
	}
	if negative {
		return -value
	}
	return value
}

// dmlcPow10 is 10^e as dmlc::ParseFloat<float> computes it: by 1e8 steps,
// then by 10, each product rounded to float32.
func dmlcPow10(e int) float32 {
	scale := float32(1)
	for ; e >= 8; e -= 8 {
		scale = float32(scale * 1e8)
	}
	for ; e > 0; e-- {
		scale = float32(scale * 10)
	}
	return scale
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
