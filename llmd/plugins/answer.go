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
// fields the plugins use and skips the rest.

// decodeAnswer decodes a /predict/pairs matrix answer into a.
func decodeAnswer(data []byte, a *pairsAnswer) error {
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
			return s.object(func(key []byte) error { return s.matrixField(key, a) })
		}
		return s.skip()
	})
	if err != nil {
		return fmt.Errorf("pairs answer at byte %d: %w", s.pos, err)
	}
	return nil
}

func (s *scanner) matrixField(key []byte, a *pairsAnswer) error {
	m := &a.Matrix
	switch string(key) {
	case "rank":
		return s.rows(func() error {
			var row []int
			err := s.array(func() error {
				v, null, err := s.number()
				if null {
					v = -1
				}
				row = append(row, int(v))
				return err
			})
			m.Rank = append(m.Rank, row)
			return err
		})
	case "ttft_ms":
		return s.rows(func() error {
			var row []float64
			err := s.array(func() error {
				v, _, err := s.number()
				row = append(row, v)
				return err
			})
			m.TTFTMs = append(m.TTFTMs, row)
			return err
		})
	case "no_split_rank":
		return s.array(func() error {
			v, _, err := s.number()
			m.NoSplitRank = append(m.NoSplitRank, int(v))
			return err
		})
	case "no_split_ttft_ms", "tpot_ms":
		out := &m.NoSplitTTFTMs
		if string(key) == "tpot_ms" {
			out = &m.TPOTMs
		}
		return s.array(func() error {
			v, _, err := s.number()
			*out = append(*out, v)
			return err
		})
	case "prefill_extrapolated", "decode_extrapolated":
		out := &m.PrefillExtrapolated
		if string(key) == "decode_extrapolated" {
			out = &m.DecodeExtrapolated
		}
		return s.array(func() error {
			v, err := s.boolean()
			*out = append(*out, v)
			return err
		})
	}
	return s.skip()
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

// rows is an array of arrays.
func (s *scanner) rows(row func() error) error { return s.array(row) }

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

// number reads a number, or null.
func (s *scanner) number() (v float64, null bool, err error) {
	s.space()
	if s.literal("null") {
		return 0, true, nil
	}
	start := s.pos
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		if c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			s.pos++
			continue
		}
		break
	}
	v, err = strconv.ParseFloat(string(s.data[start:s.pos]), 64)
	if err != nil {
		return 0, false, errSyntax
	}
	return v, false, nil
}

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
