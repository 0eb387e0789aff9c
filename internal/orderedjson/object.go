// Package orderedjson writes JSON objects whose keys keep the order they
// are given in, for reports meant to be read in a table's order:
// encoding/json sorts map keys and writes struct fields in declaration
// order only.
package orderedjson

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Field is one member of an Object.
type Field struct {
	Key   string
	Value any // anything encoding/json encodes
}

// Object is a JSON object of its fields, in order.
type Object []Field

// MarshalJSON implements json.Marshaler.
func (o Object) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := json.Marshal(f.Key)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(f.Value)
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", f.Key, err)
		}
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
