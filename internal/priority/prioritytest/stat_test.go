package prioritytest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestNiceness(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, stat string
		want       int
		ok         bool
	}{
		{"plain", "42 (xgboost) S 1 42 42 0 -1 4194560 100 0 0 0 5 1 0 0 30 10 1 0 100 1000 10 1 1\n", 10, true},
		{"spaces and parens in the name", "42 (a (b) c) R 1 42 42 0 -1 4194560 100 0 0 0 5 1 0 0 39 19 1 0\n", 19, true},
		{"negative", "7 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 10 -10 1 0\n", -10, true},
		{"truncated", "7 (x) S 1 7\n", 0, false},
		{"no name", "garbage", 0, false},
	} {
		path := filepath.Join(dir, "stat")
		if err := os.WriteFile(path, []byte(tc.stat), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := Niceness(path)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: Niceness = %d, %v; want %d, ok %v", tc.name, got, err, tc.want, tc.ok)
		}
	}
	if _, err := Niceness(filepath.Join(dir, "missing")); err == nil {
		t.Error("no error for a missing file")
	}
}
