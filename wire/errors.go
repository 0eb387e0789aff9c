package wire

import (
	"fmt"
	"strconv"
	"strings"
)

// FieldError is one element of a 422 response's "detail" array, shaped like
// the pydantic v2 errors the reference servers return (docs/PROTOCOL.md §2.2): Type and
// Msg use pydantic's codes and wording where pydantic has one.
//
// Input is always encodable by encoding/json and never holds NaN or an
// infinity: numbers that are not finite float64 values are echoed as the
// string of their literal ("NaN", "1e400"). It is a copy, never a view of
// the body. Inputs over maxEchoBytes of JSON are summarised as a string.
type FieldError struct {
	Type  string         `json:"type"`
	Loc   []any          `json:"loc"`
	Msg   string         `json:"msg"`
	Input any            `json:"input"`
	Ctx   map[string]any `json:"ctx,omitempty"`
}

// Rejection reports one training entry that failed validation while the rest
// of its request was accepted (docs/PROTOCOL.md §5.1: per-entry validation).
type Rejection struct {
	Index  int          `json:"index"`
	Detail string       `json:"detail"`           // one line naming the first failing field
	Errors []FieldError `json:"errors,omitempty"` // nil past Limits.MaxErrors rejections
}

// problemCode is one way a value can fail validation. Decoders pass problems
// around by value and build a FieldError only when one is reported, so the
// valid path allocates nothing.
type problemCode uint8

const (
	noProblem problemCode = iota
	probMissing
	probIntType
	probIntParsing
	probIntFromFloat
	probFloatType
	probFloatParsing
	probFiniteNumber
	probGreaterEqual
	probLessEqual
	probStringType
	probBoolType
	probBoolParsing
	probDatetimeType
	probDatetimeParsing
	probModelType
	probListType
	probDuplicateKey
	probStringTooLong
	probStringTooShort
	probLessThan
)

// problem is a validation failure before it knows where it happened.
type problem struct {
	code     problemCode
	bound    float64 // probGreaterEqual, probLessEqual, probLessThan; probStringTooLong: the length (0: MaxPodTypeLen)
	intBound bool    // bound belongs to an integer field: shown without a fraction in ctx
	reason   string  // probDatetimeParsing: what is wrong; probDuplicateKey: the key; probLessThan: why
}

func ge(bound float64, integer bool) problem {
	return problem{code: probGreaterEqual, bound: bound, intBound: integer}
}

func le(bound float64, integer bool) problem {
	return problem{code: probLessEqual, bound: bound, intBound: integer}
}

// fieldError places p at loc with the offending input.
func (p problem) fieldError(loc []any, input any) FieldError {
	e := FieldError{Loc: loc, Input: input}
	switch p.code {
	case probMissing:
		e.Type, e.Msg = "missing", "Field required"
	case probIntType:
		e.Type, e.Msg = "int_type", "Input should be a valid integer"
	case probIntParsing:
		e.Type, e.Msg = "int_parsing", "Input should be a valid integer, unable to parse string as an integer"
	case probIntFromFloat:
		e.Type, e.Msg = "int_from_float", "Input should be a valid integer, got a number with a fractional part"
	case probFloatType:
		e.Type, e.Msg = "float_type", "Input should be a valid number"
	case probFloatParsing:
		e.Type, e.Msg = "float_parsing", "Input should be a valid number, unable to parse string as a number"
	case probFiniteNumber:
		e.Type, e.Msg = "finite_number", "Input should be a finite number"
	case probGreaterEqual:
		e.Type, e.Msg = "greater_than_equal", "Input should be greater than or equal to "+formatBound(p.bound)
		e.Ctx = map[string]any{"ge": p.ctxBound()}
	case probLessEqual:
		e.Type, e.Msg = "less_than_equal", "Input should be less than or equal to "+formatBound(p.bound)
		e.Ctx = map[string]any{"le": p.ctxBound()}
	case probStringType:
		e.Type, e.Msg = "string_type", "Input should be a valid string"
	case probBoolType:
		e.Type, e.Msg = "bool_type", "Input should be a valid boolean"
	case probBoolParsing:
		e.Type, e.Msg = "bool_parsing", "Input should be a valid boolean, unable to interpret input"
	case probDatetimeType:
		e.Type, e.Msg = "datetime_type", "Input should be a valid datetime"
	case probDatetimeParsing:
		e.Type, e.Msg = "datetime_parsing", "Input should be a valid datetime, "+p.reason
		e.Ctx = map[string]any{"error": p.reason}
	case probModelType:
		e.Type, e.Msg = "model_attributes_type", "Input should be a valid dictionary or object to extract fields from"
	case probListType:
		e.Type, e.Msg = "list_type", "Input should be a valid list"
	case probStringTooLong:
		max := MaxPodTypeLen
		if p.bound > 0 {
			max = int(p.bound)
		}
		e.Type, e.Msg = "string_too_long", "String should have at most "+strconv.Itoa(max)+" characters"
		e.Ctx = map[string]any{"max_length": max}
		// Not the whole input: a 10 MB string echoed back is the problem
		// again, in the answer.
		if in, ok := input.(string); ok && len(in) > 2*max {
			e.Input = fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(in[:max], ""), len(in))
		}
	case probStringTooShort:
		e.Type, e.Msg = "string_too_short", "String should have at least 1 character"
		e.Ctx = map[string]any{"min_length": 1}
	case probLessThan:
		e.Type, e.Msg = "less_than", "Input should be less than "+formatBound(p.bound)
		if p.reason != "" {
			e.Msg += " (" + p.reason + ")"
		}
		e.Ctx = map[string]any{"lt": p.bound}
	case probDuplicateKey:
		// Not a pydantic error: pydantic keeps the last duplicate, which
		// silently picks one of two conflicting values. Refusing is safer.
		e.Type, e.Msg = "duplicate_key", "Key "+strconv.Quote(p.reason)+" appears more than once in this object"
		e.Ctx = map[string]any{"key": p.reason}
	default:
		e.Type, e.Msg = "value_error", "Invalid value"
	}
	return e
}

func (p problem) ctxBound() any {
	if p.intBound {
		return int64(p.bound)
	}
	return p.bound
}

func formatBound(b float64) string { return strconv.FormatFloat(b, 'f', -1, 64) }

// jsonInvalid is the single error reported for a body that is not JSON, in
// the reference's shape. offset is a byte offset into the body (the
// reference reports a character offset; they differ only after non-ASCII).
func jsonInvalid(offset int, reason string) FieldError {
	return FieldError{
		Type:  "json_invalid",
		Loc:   []any{"body", offset},
		Msg:   "JSON decode error",
		Input: map[string]any{},
		Ctx:   map[string]any{"error": reason},
	}
}

// listLengthError reports a list outside [1, max]. The list itself is not
// echoed as input when too long: it can be megabytes of rows.
func listLengthError(loc []any, n, max int) FieldError {
	if n < 1 {
		return FieldError{
			Type:  "too_short",
			Loc:   loc,
			Msg:   "List should have at least 1 item after validation, not 0",
			Input: []any{},
			Ctx:   map[string]any{"field_type": "List", "min_length": 1, "actual_length": n},
		}
	}
	return FieldError{
		Type:  "too_long",
		Loc:   loc,
		Msg:   "List should have at most " + strconv.Itoa(max) + " items after validation, not " + strconv.Itoa(n),
		Input: nil,
		Ctx:   map[string]any{"field_type": "List", "max_length": max, "actual_length": n},
	}
}

// missingBody is what FastAPI answers for an absent required body.
func missingBody() FieldError {
	return FieldError{Type: "missing", Loc: []any{"body"}, Msg: "Field required", Input: nil}
}

// locBase is the part of a loc above a field: ["body"], ["body", i] (a bare
// array) or ["body", list, i]. It is kept unexpanded until an error needs it.
type locBase struct {
	list  string // "requests" or "entries"; "" at the top level
	index int    // position in the list; -1 outside a list
}

var topLevel = locBase{index: -1}

// loc returns the loc of the object itself, or of one of its fields when
// field is not empty.
func (b locBase) loc(field string) []any {
	loc := make([]any, 1, 4)
	loc[0] = "body"
	if b.list != "" {
		loc = append(loc, b.list)
	}
	if b.index >= 0 {
		loc = append(loc, b.index)
	}
	if field != "" {
		loc = append(loc, field)
	}
	return loc
}

// Describe renders the first of errs as one line, e.g.
// "entries[3].actual_ttft_ms: Input should be a finite number (and 1 more
// error)", for logs and error values.
func Describe(errs []FieldError) string { return describe(errs, len(errs)) }

// describe is Describe when errs holds the first of total errors.
func describe(errs []FieldError, total int) string {
	if len(errs) == 0 {
		return ""
	}
	var b strings.Builder
	if e := errs[0]; e.Type == "json_invalid" {
		// loc is ["body", offset]; the reason is in ctx.
		fmt.Fprintf(&b, "%s at byte %v: %v", e.Msg, e.Loc[len(e.Loc)-1], e.Ctx["error"])
	} else {
		b.WriteString(locPath(e.Loc))
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	if total > 1 {
		b.WriteString(" (and ")
		b.WriteString(strconv.Itoa(total - 1))
		if total == 2 {
			b.WriteString(" more error)")
		} else {
			b.WriteString(" more errors)")
		}
	}
	return b.String()
}

// locPath renders a loc as a path without its leading "body":
// ["body","entries",3,"x"] → "entries[3].x", ["body",2] → "[2]".
func locPath(loc []any) string {
	if len(loc) > 0 && loc[0] == "body" {
		loc = loc[1:]
	}
	if len(loc) == 0 {
		return "body"
	}
	var b strings.Builder
	for i, part := range loc {
		switch v := part.(type) {
		case int:
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(v))
			b.WriteByte(']')
		case string:
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(v)
		}
	}
	return b.String()
}
