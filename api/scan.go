package api

import (
	"encoding/binary"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner reads one JSON text from memory. It exists because the prediction
// hot path decodes tens to thousands of flat rows per request and
// encoding/json's reflection, interface boxing and per-value allocations
// cost more than the prediction itself.
//
// It accepts RFC 8259 JSON, plus the non-finite spellings of nonFiniteLen
// as number-like tokens so that they fail validation with a field-level
// error instead of failing the whole body. It refuses what encoding/json
// lets through: invalid UTF-8 in strings and nesting deeper than maxDepth.
//
// After the first syntax error every method fails fast, and errPos/errMsg
// describe that first error.
type scanner struct {
	data     []byte
	pos      int
	maxDepth int
	errPos   int
	errMsg   string
	buf      []byte // unescaped string content; valid until the next string read

	sawNonFinite bool // a non-finite token was read: the data is not strict JSON
}

func newScanner(data []byte, maxDepth int) scanner {
	return scanner{data: data, maxDepth: maxDepth}
}

// fail records the first syntax error, at pos, and returns false.
func (s *scanner) fail(pos int, msg string) bool {
	if s.errMsg == "" {
		s.errPos, s.errMsg = pos, msg
	}
	return false
}

func (s *scanner) failed() bool { return s.errMsg != "" }

func (s *scanner) skipSpace() {
	// Bodies written by encoders have no white space: one comparison
	// settles the common case.
	for s.pos < len(s.data) && s.data[s.pos] <= ' ' && isSpace(s.data[s.pos]) {
		s.pos++
	}
}

// peek returns the next byte, or 0 at the end of the data.
func (s *scanner) peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// finish checks that only white space follows the top-level value.
func (s *scanner) finish() bool {
	s.skipSpace()
	if s.pos != len(s.data) {
		return s.fail(s.pos, "Extra data")
	}
	return true
}

// Object and array traversal. A loop over an object reads
//
//	more := s.openObject(depth)
//	for more {
//		key := s.readKey()   // the key, then the ':'
//		... read or skip the value ...
//		more = s.nextMember('}')
//	}
//
// and every step reports failure through s.failed(), so callers only test
// once per member.

// open consumes an opening bracket at s.pos, checks the nesting depth and
// reports whether the container has any element.
func (s *scanner) open(depth int) bool {
	if depth > s.maxDepth {
		return s.fail(s.pos, "Maximum nesting depth exceeded")
	}
	close := byte('}')
	if s.data[s.pos] == '[' {
		close = ']'
	}
	s.pos++
	s.skipSpace()
	if s.peek() == close {
		s.pos++
		return false
	}
	return true
}

// readKey reads an object key and the colon after it. The key is only
// valid until the next string read.
func (s *scanner) readKey() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, s.fail(s.pos, "Expecting property name enclosed in double quotes")
	}
	key, ok := s.readString(true)
	if !ok {
		return nil, false
	}
	s.skipSpace()
	if s.peek() != ':' {
		return nil, s.fail(s.pos, "Expecting ':' delimiter")
	}
	s.pos++
	return key, true
}

// next consumes the separator after a member or element: it returns true
// after a comma, false after the closing bracket or on a syntax error.
func (s *scanner) next(close byte) bool {
	s.skipSpace()
	switch s.peek() {
	case ',':
		s.pos++
		s.skipSpace()
		return true
	case close:
		s.pos++
		return false
	}
	return s.fail(s.pos, "Expecting ',' delimiter")
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
func (s *scanner) readString(keep bool) ([]byte, bool) {
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

func (s *scanner) readStringSlow(start, i int, keep bool) ([]byte, bool) {
	data := s.data
	out := s.buf[:0]
	unescaped := false // out holds the content so far
	for {
		if i >= len(data) {
			return nil, s.fail(start-1, "Unterminated string starting at")
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
			return nil, s.fail(i, "Invalid control character at")
		case c < utf8.RuneSelf:
			if unescaped {
				out = append(out, c)
			}
			i++
		default:
			r, n := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && n == 1 {
				return nil, s.fail(i, "Invalid UTF-8 in string")
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
func (s *scanner) unescape(i int) (rune, int, bool) {
	data := s.data
	if i+1 >= len(data) {
		return 0, 0, s.fail(i, "Invalid \\escape")
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
			return 0, 0, s.fail(i, "Invalid \\uXXXX escape")
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
	return 0, 0, s.fail(i, "Invalid \\escape")
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

// tokenKind is the JSON type of a value read by readToken.
type tokenKind uint8

const (
	tokNull tokenKind = iota
	tokBool
	tokNumber
	tokNonFinite
	tokString
	tokObject
	tokArray
)

// token is one value. Containers are skipped (validated, not built): no
// field of the schema is a container, so they are only ever type errors.
type token struct {
	kind       tokenKind
	truth      bool   // tokBool
	start, end int    // the value's extent in the data, for echoing it in errors
	text       []byte // tokString: content (valid until the next string read); tokNumber, tokNonFinite: literal
	num        numLit // tokNumber
}

// readToken reads the value at s.pos (after white space) at the given
// nesting depth.
func (s *scanner) readToken(depth int) (token, bool) {
	s.skipSpace()
	t := token{start: s.pos}
	if s.pos >= len(s.data) {
		return t, s.fail(s.pos, "Expecting value")
	}
	switch c := s.data[s.pos]; c {
	case '"':
		text, ok := s.readString(true)
		if !ok {
			return t, false
		}
		t.kind, t.text = tokString, text
	case '{', '[':
		t.kind = tokObject
		if c == '[' {
			t.kind = tokArray
		}
		if !s.skipValue(depth) {
			return t, false
		}
	case 't':
		if !s.literal("true") {
			return t, false
		}
		t.kind, t.truth = tokBool, true
	case 'f':
		if !s.literal("false") {
			return t, false
		}
		t.kind = tokBool
	default:
		if c == 'n' && len(s.data)-s.pos >= 4 && string(s.data[s.pos:s.pos+4]) == "null" {
			s.pos += 4
			t.kind = tokNull
			break
		}
		if c == '-' || c >= '0' && c <= '9' {
			if n, end, ok, _, _ := lexNumber(s.data, s.pos); ok {
				t.kind, t.num, t.text = tokNumber, n, s.data[s.pos:end]
				s.pos = end
				break
			}
		}
		if l := nonFiniteLen(s.data[s.pos:]); l > 0 {
			t.kind, t.text = tokNonFinite, s.data[s.pos:s.pos+l]
			s.pos += l
			s.sawNonFinite = true
			break
		}
		if c == '-' || c >= '0' && c <= '9' {
			_, _, _, at, reason := lexNumber(s.data, s.pos)
			return t, s.fail(at, reason)
		}
		return t, s.fail(s.pos, "Expecting value")
	}
	t.end = s.pos
	return t, true
}

func (s *scanner) literal(word string) bool {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return s.fail(s.pos, "Expecting value")
	}
	s.pos += len(word)
	return true
}

// skipValue validates and skips the value at s.pos (after white space),
// at the given nesting depth.
func (s *scanner) skipValue(depth int) bool {
	s.skipSpace()
	switch s.peek() {
	case '{':
		for more := s.open(depth); more; more = s.next('}') {
			if _, ok := s.readKey(); !ok || !s.skipValue(depth+1) {
				return false
			}
		}
	case '[':
		for more := s.open(depth); more; more = s.next(']') {
			if !s.skipValue(depth + 1) {
				return false
			}
		}
	case '"':
		_, ok := s.readString(false)
		return ok
	default:
		_, ok := s.readToken(depth)
		return ok
	}
	return !s.failed()
}

// anyValue reads the value at s.pos as a generic Go value that
// encoding/json can encode: maps, slices, strings, bools, nil, int64 for
// integer literals that fit, float64 for other finite numbers, and the
// literal as a string for anything else (overflowing and non-finite
// numbers). A key repeated in one object keeps its last value.
func (s *scanner) anyValue(depth int) (any, bool) {
	s.skipSpace()
	switch s.peek() {
	case '{':
		m := map[string]any{}
		for more := s.open(depth); more; more = s.next('}') {
			key, ok := s.readKey()
			if !ok {
				return nil, false
			}
			k := string(key)
			v, ok := s.anyValue(depth + 1)
			if !ok {
				return nil, false
			}
			m[k] = v
		}
		return m, !s.failed()
	case '[':
		l := []any{}
		for more := s.open(depth); more; more = s.next(']') {
			v, ok := s.anyValue(depth + 1)
			if !ok {
				return nil, false
			}
			l = append(l, v)
		}
		return l, !s.failed()
	}
	t, ok := s.readToken(depth)
	if !ok {
		return nil, false
	}
	return scalarValue(t), true
}

// scalarValue is the generic value of a scalar token.
func scalarValue(t token) any {
	switch t.kind {
	case tokBool:
		return t.truth
	case tokString:
		return string(t.text)
	case tokNumber:
		return numberValue(t.num, t.text)
	case tokNonFinite:
		return string(t.text)
	}
	return nil
}

func numberValue(n numLit, lit []byte) any {
	if isIntegerLiteral(lit) {
		if v, st := n.toInt(); st == intOK {
			return v
		}
	}
	if f, ok := n.toFloat(lit); ok {
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
	sub := newScanner(data[start:end], maxDepth)
	v, ok := sub.anyValue(1)
	if !ok {
		return nil // unreachable: the extent was validated when it was read
	}
	return v
}
