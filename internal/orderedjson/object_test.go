package orderedjson

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestObjectKeepsOrder(t *testing.T) {
	o := Object{{"z", 1}, {"a", "x"}, {"m", Object{{"b", nil}, {"a", []int{1}}}}, {`q"uote`, true}}
	got, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"z":1,"a":"x","m":{"b":null,"a":[1]},"q\"uote":true}`; string(got) != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if got, _ := json.Marshal(Object{}); string(got) != "{}" {
		t.Errorf("empty object: %s", got)
	}
	// A value encoding/json refuses fails the object, naming the field.
	if _, err := json.Marshal(Object{{"ok", 1}, {"bad", math.NaN()}}); err == nil || !strings.Contains(err.Error(), "field bad") {
		t.Errorf("NaN value: err %v, want one naming the field", err)
	}
}
