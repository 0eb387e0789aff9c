package plugins

import (
	"errors"
	"fmt"
	"strconv"
)

// The matrix answer is read on the scheduling path of every request: a
// 16 × 16 answer is 4 KB of numbers, which encoding/json's reflection took
// 0.17 ms of CPU to decode (BenchmarkSchedulingOverhead's profile), the
// largest part of the plugins' own cost. decodeAnswer reads exactly the
// fields the plugins use and skips the rest, each matrix into one backing
// array, and the numbers Headroom writes (integers, milliseconds to the
// microsecond) without strconv (number).

// decodeAnswer decodes a /predict/pairs matrix answer into a, expecting nP
// prefill and nD decode candidates (the sizes only presize its slices: an
// answer of another shape decodes as it is).
func decodeAnswer(data []byte, nP, nD int, a *pairsAnswer) error {
	s := scanner{data: data}
	err := s.object(func(key []byte) error {
		switch string(key) {
		case "split":
			v, err := s.boolean()
			a.Split = v
			return err
		case "kv_transfer_model":
			v, err := s.boolean()
			a.KVTransferModel = v
			return err
		case "matrix":
			return s.object(func(key []byte) error { return s.matrixField(key, nP, nD, a) })
		}
		return s.skip()
	})
	if err != nil {
		return fmt.Errorf("pairs answer at byte %d: %w", s.pos, err)
	}
	return nil
}

func (s *scanner) matrixField(key []byte, nP, nD int, a *pairsAnswer) error {
	m := &a.Matrix
	var err error
	switch string(key) {
	case "rank":
		var cells []float64
		var rows []int
		if cells, rows, err = s.numberRows(-1, nP*nD, nD); err == nil {
			flat := make([]int, len(cells))
			for n, v := range cells {
				flat[n] = int(v)
			}
			m.Rank = split(flat, rows)
		}
	case "ttft_ms":
		var cells []float64
		var rows []int
		if cells, rows, err = s.numberRows(0, nP*nD, nD); err == nil {
			m.TTFTMs = split(cells, rows)
		}
	case "no_split_rank":
		var v []float64
		if v, err = s.numbers(nil, 0, nD); err == nil {
			m.NoSplitRank = make([]int, len(v))
			for n, x := range v {
				m.NoSplitRank[n] = int(x)
			}
		}
	case "no_split_ttft_ms":
		m.NoSplitTTFTMs, err = s.numbers(nil, 0, nD)
	case "tpot_ms":
		m.TPOTMs, err = s.numbers(nil, 0, nD)
	case "prefill_extrapolated":
		m.PrefillExtrapolated, err = s.booleans(nP)
	case "decode_extrapolated":
		m.DecodeExtrapolated, err = s.booleans(nD)
	default:
		err = s.skip()
	}
	return err
}

// numberRows reads an array of arrays of numbers (null as null) into one
// slice of cells, presized for cells cells, and the end of each row in it.
func (s *scanner) numberRows(null float64, cells, rows int) (flat []float64, ends []int, err error) {
	flat, ends = make([]float64, 0, cells), make([]int, 0, rows)
	err = s.array(func() error {
		var err error
		flat, err = s.numbers(flat, null, 0)
		ends = append(ends, len(flat))
		return err
	})
	return flat, ends, err
}

// split cuts flat into rows ending at ends; each row's capacity ends with
// it, so that appending to one never writes into the next.
func split[T any](flat []T, ends []int) [][]T {
	out := make([][]T, len(ends))
	start := 0
	for n, end := range ends {
		out[n] = flat[start:end:end]
		start = end
	}
	return out
}

// numbers appends an array of numbers to dst (null as null), presizing a
// new slice for n; nil for an empty array.
func (s *scanner) numbers(dst []float64, null float64, n int) ([]float64, error) {
	if dst == nil && n > 0 {
		dst = make([]float64, 0, n)
	}
	err := s.array(func() error {
		v, isNull, err := s.number()
		if isNull {
			v = null
		}
		dst = append(dst, v)
		return err
	})
	if len(dst) == 0 {
		dst = nil
	}
	return dst, err
}

// booleans reads an array of booleans, presized for n; nil for an empty
// array.
func (s *scanner) booleans(n int) ([]bool, error) {
	out := make([]bool, 0, n)
	err := s.array(func() error {
		v, err := s.boolean()
		out = append(out, v)
		return err
	})
	if len(out) == 0 {
		out = nil
	}
	return out, err
}

// scanner reads JSON as Headroom writes it (no comments, no
// byte-order mark); anything else is an error, never a wrong value.
type scanner struct {
	data []byte
	pos  int
}

var errSyntax = errors.New("not the JSON expected")

func (s *scanner) space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	s.space()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return errSyntax
	}
	s.pos++
	return nil
}

// object calls member for each key, positioned at its value.
func (s *scanner) object(member func(key []byte) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return errSyntax
		}
	}
}

// array calls elem for each element, positioned at it.
func (s *scanner) array(elem func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return errSyntax
		}
	}
}

// str reads a string without escapes (keys are plain); one with escapes is
// returned raw, which only skip uses.
func (s *scanner) str() ([]byte, error) {
	if err := s.expect('"'); err != nil {
		return nil, err
	}
	start := s.pos
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case '"':
			s.pos++
			return s.data[start : s.pos-1], nil
		case '\\':
			s.pos++
		}
		s.pos++
	}
	return nil, errSyntax
}

// number reads a number, or null. A decimal of at most 15 digits and 22
// after the point, as Headroom writes every number, is its digits as an
// integer over a power of ten: both exact in a float64, so the one
// division is correctly rounded, the value strconv.ParseFloat returns
// (which takes the same path for it); any other number is parsed by
// strconv.
func (s *scanner) number() (v float64, null bool, err error) {
	s.space()
	if s.literal("null") {
		return 0, true, nil
	}
	start, i := s.pos, s.pos
	neg := i < len(s.data) && s.data[i] == '-'
	if neg {
		i++
	}
	var mantissa uint64
	digits, frac, point := 0, 0, false
scan:
	for ; i < len(s.data); i++ {
		switch c := s.data[i]; {
		case c >= '0' && c <= '9':
			mantissa = mantissa*10 + uint64(c-'0')
			digits++
			if point {
				frac++
			}
		case c == '.' && !point:
			point = true
		case c == 'e' || c == 'E' || c == '+' || c == '-' || c == '.':
			digits = 0 // not a plain decimal: strconv's
			break scan
		default:
			break scan
		}
	}
	if digits > 0 && digits <= 15 && frac <= 22 && (!point || frac > 0) {
		v = float64(mantissa)
		if frac > 0 {
			v /= pow10[frac]
		}
		if neg {
			v = -v
		}
		s.pos = i
		return v, false, nil
	}
	for s.pos = start; s.pos < len(s.data); s.pos++ {
		c := s.data[s.pos]
		if !(c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
			break
		}
	}
	v, err = strconv.ParseFloat(string(s.data[start:s.pos]), 64)
	if err != nil {
		return 0, false, errSyntax
	}
	return v, false, nil
}

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [23]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
	1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

func (s *scanner) boolean() (bool, error) {
	s.space()
	switch {
	case s.literal("true"):
		return true, nil
	case s.literal("false"):
		return false, nil
	}
	return false, errSyntax
}

func (s *scanner) literal(word string) bool {
	if len(s.data)-s.pos >= len(word) && string(s.data[s.pos:s.pos+len(word)]) == word {
		s.pos += len(word)
		return true
	}
	return false
}

// skip passes over one value of any kind.
func (s *scanner) skip() error {
	switch c := s.peek(); {
	case c == '{':
		return s.object(func([]byte) error { return s.skip() })
	case c == '[':
		return s.array(s.skip)
	case c == '"':
		_, err := s.str()
		return err
	case c == 't' || c == 'f':
		_, err := s.boolean()
		return err
	default:
		_, _, err := s.number()
		return err
	}
}
