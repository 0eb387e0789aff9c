// Package jsonscan is the JSON reader under llm-d's wire format (package
// wire): a scanner over one JSON text in memory and a lexer that reduces
// number literals to an exact decimal form, so that the decoders can check
// integer fields exactly and report errors field by field without building
// generic values.
package jsonscan

import (
	"encoding/binary"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Scanner reads one JSON text from memory. It exists because the prediction
// hot path decodes tens to thousands of flat rows per request and
// encoding/json's reflection, interface boxing and per-value allocations
// cost more than the prediction itself.
//
// It accepts RFC 8259 JSON, plus the non-finite spellings of NonFiniteLen
// as number-like tokens so that they fail validation with a field-level
// error instead of failing the whole body. It refuses what encoding/json
// lets through: invalid UTF-8 in strings and nesting deeper than maxDepth.
//
// After the first syntax error every method fails fast, and Err describes
// that first error.
type Scanner struct {
	data     []byte
	pos      int
	maxDepth int
	errPos   int
	errMsg   string
	buf      []byte // unescaped string content; valid until the next string read

	sawNonFinite bool // a non-finite Token was read: the data is not strict JSON
}

// New returns a scanner at the start of data that refuses nesting deeper
// than maxDepth.
func New(data []byte, maxDepth int) Scanner {
	return Scanner{data: data, maxDepth: maxDepth}
}

// Pos is the offset of the next byte to read.
func (s *Scanner) Pos() int { return s.pos }

// AtEnd reports whether every byte has been read.
func (s *Scanner) AtEnd() bool { return s.pos == len(s.data) }

// Err returns the offset and reason of the first syntax error, if Failed.
func (s *Scanner) Err() (pos int, reason string) { return s.errPos, s.errMsg }

// Echo returns the generic value of data[start:end], an extent the scanner
// has already validated, for an error's echo of the offending input.
func (s *Scanner) Echo(start, end int) any { return echo(s.data, start, end, s.maxDepth) }

// Rest returns the data not yet read. A decoder's fast path lexes a plain
// number there itself (LexNumber(s.Rest(), 0)) and, if it takes the value,
// consumes it with Advance: one call, where a method wrapping LexNumber
// would be two on a path taken for every numeric field.
func (s *Scanner) Rest() []byte { return s.data[s.pos:] }

// Advance consumes n bytes that the caller has already examined.
func (s *Scanner) Advance(n int) { s.pos += n }

// MatchKey consumes the object key at the read position, and the colon
// after it, if the key's raw bytes are exactly name, and reports whether it
// did. name must need no escapes (a schema's field name), so comparing raw
// bytes is exact. Decoders use it to confirm a predicted key with one
// comparison; a key followed by something other than a colon is a syntax
// error, reported as by ReadKey.
func (s *Scanner) MatchKey(name string) bool {
	end := s.pos + 1 + len(name) // the closing quote, if name is right
	if end+1 >= len(s.data) || s.data[s.pos] != '"' || s.data[end] != '"' || string(s.data[s.pos+1:end]) != name {
		return false
	}
	if s.data[end+1] == ':' {
		s.pos = end + 2
		return true
	}
	s.pos = end + 1
	s.SkipSpace()
	if s.Peek() != ':' {
		return s.Fail(s.pos, "Expecting ':' delimiter")
	}
	s.pos++
	return true
}

// Fail records the first syntax error, at pos, and returns false.
func (s *Scanner) Fail(pos int, msg string) bool {
	if s.errMsg == "" {
		s.errPos, s.errMsg = pos, msg
	}
	return false
}

func (s *Scanner) Failed() bool { return s.errMsg != "" }

func (s *Scanner) SkipSpace() {
	// Bodies written by encoders have no white space: one comparison
	// settles the common case.
	for s.pos < len(s.data) && s.data[s.pos] <= ' ' && IsSpace(s.data[s.pos]) {
		s.pos++
	}
}

// Peek returns the next byte, or 0 at the end of the data.
func (s *Scanner) Peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// Finish checks that only white space follows the top-level value.
func (s *Scanner) Finish() bool {
	s.SkipSpace()
	if s.pos != len(s.data) {
		return s.Fail(s.pos, "Extra data")
	}
	return true
}

// Object and array traversal. A loop over an object reads
//
//	for more := s.Open(depth); more; more = s.Next('}') {
//		key, ok := s.ReadKey() // the key, then the ':'
//		... read or skip the value ...
//	}
//
// and every step reports failure through s.Failed(), so callers only test
// once per member.

// Open consumes the opening bracket at the read position, checks the nesting depth and
// reports whether the container has any element.
func (s *Scanner) Open(depth int) bool {
	if depth > s.maxDepth {
		return s.Fail(s.pos, "Maximum nesting depth exceeded")
	}
	close := byte('}')
	if s.data[s.pos] == '[' {
		close = ']'
	}
	s.pos++
	s.SkipSpace()
	if s.Peek() == close {
		s.pos++
		return false
	}
	return true
}

// ReadKey reads an object key and the colon after it. The key is only
// valid until the next string read.
func (s *Scanner) ReadKey() ([]byte, bool) {
	if s.Peek() != '"' {
		return nil, s.Fail(s.pos, "Expecting property name enclosed in double quotes")
	}
	key, ok := s.readString(true)
	if !ok {
		return nil, false
	}
	s.SkipSpace()
	if s.Peek() != ':' {
		return nil, s.Fail(s.pos, "Expecting ':' delimiter")
	}
	s.pos++
	return key, true
}

// Next consumes the separator after a member or element: it returns true
// after a comma, false after the closing bracket or on a syntax error.
func (s *Scanner) Next(close byte) bool {
	s.SkipSpace()
	switch s.Peek() {
	case ',':
		s.pos++
		s.SkipSpace()
		return true
	case close:
		s.pos++
		return false
	}
	return s.Fail(s.pos, "Expecting ',' delimiter")
}

// strPlain marks the string bytes that need no attention: printable ASCII
// other than the quote and the backslash.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// plainPrefix returns how many leading bytes of b are plain string bytes
// (see strPlain), eight at a time; it may stop short of the first special
// byte by up to seven bytes, which the caller scans one by one. Keys and
// labels are 8 to 24 bytes, so this replaces most of the per-byte loop.
func plainPrefix(b []byte) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	n := 0
	for len(b)-n >= 8 {
		x := binary.LittleEndian.Uint64(b[n:])
		q := x ^ ('"' * ones)   // zero byte where x has a quote
		bs := x ^ ('\\' * ones) // zero byte where x has a backslash
		// The high bit of a byte of special is set if that byte is a
		// quote, a backslash, below 0x20, or not ASCII. Borrows can flag
		// bytes after the first special one, never before it, and the
		// caller only needs "none" versus "somewhere".
		special := ((q - ones) &^ q) | ((bs - ones) &^ bs) | ((x - 0x20*ones) &^ x) | x
		if special&highs != 0 {
			return n
		}
		n += 8
	}
	return n
}

// readString reads the string whose opening quote is at s.pos and returns
// its content. Content without escapes is a sub-slice of the data; escaped
// content is unescaped into s.buf, unless keep is false (the caller only
// skips the string). Invalid UTF-8 and control characters are errors.
func (s *Scanner) readString(keep bool) ([]byte, bool) {
	start := s.pos + 1
	i := start + plainPrefix(s.data[start:])
	for i < len(s.data) && strPlain[s.data[i]] {
		i++
	}
	if i < len(s.data) && s.data[i] == '"' {
		s.pos = i + 1
		return s.data[start:i], true
	}
	return s.readStringSlow(start, i, keep)
}

func (s *Scanner) readStringSlow(start, i int, keep bool) ([]byte, bool) {
	data := s.data
	out := s.buf[:0]
	unescaped := false // out holds the content so far
	for {
		if i >= len(data) {
			return nil, s.Fail(start-1, "Unterminated string starting at")
		}
		c := data[i]
		switch {
		case c == '"':
			s.pos = i + 1
			if !unescaped {
				return data[start:i], true
			}
			s.buf = out
			return out, true
		case c == '\\':
			if keep && !unescaped {
				out = append(out, data[start:i]...)
				unescaped = true
			}
			r, n, ok := s.unescape(i)
			if !ok {
				return nil, false
			}
			if unescaped {
				out = utf8.AppendRune(out, r)
			}
			i += n
		case c < 0x20:
			return nil, s.Fail(i, "Invalid control character at")
		case c < utf8.RuneSelf:
			if unescaped {
				out = append(out, c)
			}
			i++
		default:
			r, n := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && n == 1 {
				return nil, s.Fail(i, "Invalid UTF-8 in string")
			}
			if unescaped {
				out = append(out, data[i:i+n]...)
			}
			i += n
		}
	}
}

// unescape decodes the escape sequence at data[i] (a backslash) and returns
// the rune and the sequence's length. A UTF-16 surrogate pair in two \u
// escapes is one rune; a lone surrogate becomes U+FFFD, as encoding/json
// does.
func (s *Scanner) unescape(i int) (rune, int, bool) {
	data := s.data
	if i+1 >= len(data) {
		return 0, 0, s.Fail(i, "Invalid \\escape")
	}
	switch data[i+1] {
	case '"', '\\', '/':
		return rune(data[i+1]), 2, true
	case 'b':
		return '\b', 2, true
	case 'f':
		return '\f', 2, true
	case 'n':
		return '\n', 2, true
	case 'r':
		return '\r', 2, true
	case 't':
		return '\t', 2, true
	case 'u':
		r, ok := hex4(data, i+2)
		if !ok {
			return 0, 0, s.Fail(i, "Invalid \\uXXXX escape")
		}
		if !utf16.IsSurrogate(r) {
			return r, 6, true
		}
		if i+7 < len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
			if r2, ok := hex4(data, i+8); ok {
				if pair := utf16.DecodeRune(r, r2); pair != utf8.RuneError {
					return pair, 12, true
				}
			}
		}
		return utf8.RuneError, 6, true
	}
	return 0, 0, s.Fail(i, "Invalid \\escape")
}

func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// Kind is the JSON type of a value read by ReadToken.
type Kind uint8

const (
	Null Kind = iota
	Bool
	Num
	NonFinite
	String
	Object
	Array
)

// Token is one value. Containers are skipped (validated, not built): no
// field of llm-d's schema is a container, so they are only ever type errors.
type Token struct {
	Kind       Kind
	Truth      bool   // Bool
	Start, End int    // the value's extent in the data, for echoing it in errors
	Text       []byte // String: content (valid until the next string read); Num, NonFinite: literal
	Num        Number // Num
}

// ReadToken reads the value at s.pos (after white space) at the given
// nesting depth.
func (s *Scanner) ReadToken(depth int) (Token, bool) {
	s.SkipSpace()
	t := Token{Start: s.pos}
	if s.pos >= len(s.data) {
		return t, s.Fail(s.pos, "Expecting value")
	}
	switch c := s.data[s.pos]; c {
	case '"':
		text, ok := s.readString(true)
		if !ok {
			return t, false
		}
		t.Kind, t.Text = String, text
	case '{', '[':
		t.Kind = Object
		if c == '[' {
			t.Kind = Array
		}
		if !s.SkipValue(depth) {
			return t, false
		}
	case 't':
		if !s.literal("true") {
			return t, false
		}
		t.Kind, t.Truth = Bool, true
	case 'f':
		if !s.literal("false") {
			return t, false
		}
		t.Kind = Bool
	default:
		if c == 'n' && len(s.data)-s.pos >= 4 && string(s.data[s.pos:s.pos+4]) == "null" {
			s.pos += 4
			t.Kind = Null
			break
		}
		if c == '-' || c >= '0' && c <= '9' {
			if n, end, ok, _, _ := LexNumber(s.data, s.pos); ok {
				t.Kind, t.Num, t.Text = Num, n, s.data[s.pos:end]
				s.pos = end
				break
			}
		}
		if l := NonFiniteLen(s.data[s.pos:]); l > 0 {
			t.Kind, t.Text = NonFinite, s.data[s.pos:s.pos+l]
			s.pos += l
			s.sawNonFinite = true
			break
		}
		if c == '-' || c >= '0' && c <= '9' {
			_, _, _, at, reason := LexNumber(s.data, s.pos)
			return t, s.Fail(at, reason)
		}
		return t, s.Fail(s.pos, "Expecting value")
	}
	t.End = s.pos
	return t, true
}

func (s *Scanner) literal(word string) bool {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return s.Fail(s.pos, "Expecting value")
	}
	s.pos += len(word)
	return true
}

// SkipValue validates and skips the value at s.pos (after white space),
// at the given nesting depth.
func (s *Scanner) SkipValue(depth int) bool {
	s.SkipSpace()
	switch s.Peek() {
	case '{':
		for more := s.Open(depth); more; more = s.Next('}') {
			if _, ok := s.ReadKey(); !ok || !s.SkipValue(depth+1) {
				return false
			}
		}
	case '[':
		for more := s.Open(depth); more; more = s.Next(']') {
			if !s.SkipValue(depth + 1) {
				return false
			}
		}
	case '"':
		_, ok := s.readString(false)
		return ok
	default:
		_, ok := s.ReadToken(depth)
		return ok
	}
	return !s.Failed()
}

// AnyValue reads the value at s.pos as a generic Go value that
// encoding/json can encode: maps, slices, strings, bools, nil, int64 for
// integer literals that fit, float64 for other finite numbers, and the
// literal as a string for anything else (overflowing and non-finite
// numbers). A key repeated in one object keeps its last value.
func (s *Scanner) AnyValue(depth int) (any, bool) {
	s.SkipSpace()
	switch s.Peek() {
	case '{':
		m := map[string]any{}
		for more := s.Open(depth); more; more = s.Next('}') {
			key, ok := s.ReadKey()
			if !ok {
				return nil, false
			}
			k := string(key)
			v, ok := s.AnyValue(depth + 1)
			if !ok {
				return nil, false
			}
			m[k] = v
		}
		return m, !s.Failed()
	case '[':
		l := []any{}
		for more := s.Open(depth); more; more = s.Next(']') {
			v, ok := s.AnyValue(depth + 1)
			if !ok {
				return nil, false
			}
			l = append(l, v)
		}
		return l, !s.Failed()
	}
	t, ok := s.ReadToken(depth)
	if !ok {
		return nil, false
	}
	return scalarValue(t), true
}

// scalarValue is the generic value of a scalar Token.
func scalarValue(t Token) any {
	switch t.Kind {
	case Bool:
		return t.Truth
	case String:
		return string(t.Text)
	case Num:
		return numberValue(t.Num, t.Text)
	case NonFinite:
		return string(t.Text)
	}
	return nil
}

func numberValue(n Number, lit []byte) any {
	if isIntegerLiteral(lit) {
		if v, st := n.Int(); st == IntOK {
			return v
		}
	}
	if f, ok := n.Float(lit); ok {
		return f
	}
	return string(lit)
}

func isIntegerLiteral(lit []byte) bool {
	for _, c := range lit {
		if c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// maxEchoBytes bounds the JSON text echoed as a FieldError's Input. Past it
// (a whole body missing its list, say) the input is summarised as a string:
// a decoded tree of a body near the size limit would take many times its
// memory, for an error message no one reads in full.
const maxEchoBytes = 4096

// echo returns the generic value of data[start:end], a value the scanner
// has already validated, for a FieldError's Input.
func echo(data []byte, start, end, maxDepth int) any {
	if end-start > maxEchoBytes {
		cut := start + 256
		for cut > start && !utf8.RuneStart(data[cut]) {
			cut--
		}
		return string(data[start:cut]) + "... (" + strconv.Itoa(end-start) + " bytes, truncated)"
	}
	sub := New(data[start:end], maxDepth)
	v, ok := sub.AnyValue(1)
	if !ok {
		return nil // unreachable: the extent was validated when it was read
	}
	return v
}
