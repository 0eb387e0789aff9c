package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestDumpHandBuilt(t *testing.T) {
	m := newFileModel("5E-1", 2,
		[]node{splitNode(0, 1.5, 1, 2, false), splitNode(1, 0.1, 3, 4, true), leaf(4), leaf(1), leaf(-2.25)},
		[]node{leaf(0.5)},
	).parse(t)
	got, err := json.Marshal(m.Dump([]string{"kv"}))
	if err != nil {
		t.Fatal(err)
	}
	// Feature 1 has no name: it is named by its index, as the CLI does.
	want := `[{"nodeid":0,"depth":0,"split":"kv","split_condition":1.5,"yes":1,"no":2,"missing":2,"children":[` +
		`{"nodeid":1,"depth":1,"split":"1","split_condition":0.1,"yes":3,"no":4,"missing":3,"children":[` +
		`{"nodeid":3,"leaf":1},{"nodeid":4,"leaf":-2.25}]},` +
		`{"nodeid":2,"leaf":4}]},` +
		`{"nodeid":0,"leaf":0.5}]`
	if string(got) != want {
		t.Fatalf("dump\n got %s\nwant %s", got, want)
	}
}

func TestDumpNodeMarshalErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    DumpNode
		want string
	}{
		{"NaN leaf", DumpNode{Leaf: float32(math.NaN())}, "not a JSON number"},
		{"infinite split", DumpNode{SplitCondition: float32(math.Inf(1)), Children: []DumpNode{{}, {}}}, "not a JSON number"},
		{"one child", DumpNode{Children: []DumpNode{{}}}, "two children"},
		{"bad grandchild", DumpNode{Children: []DumpNode{{}, {Leaf: float32(math.Inf(-1))}}}, "not a JSON number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := json.Marshal(tc.n); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	if b, err := json.Marshal(DumpNode{Split: "a\"b\u2028", Children: []DumpNode{{}, {}}}); err != nil || !json.Valid(b) {
		t.Fatalf("awkward feature name: %s, %v", b, err)
	}
}

// TestDumpMatchesXGBoost compares Dump with the CLI's own JSON dump of the
// small model: the committed one, and, when the CLI is installed, a fresh
// one with and without feature names.
func TestDumpMatchesXGBoost(t *testing.T) {
	m := loadSmallModel(t)
	t.Run("committed dump", func(t *testing.T) {
		compareDump(t, m.Dump(smallFeatures), readTestdata(t, smallDumpPath))
	})
	t.Run("live CLI", func(t *testing.T) {
		if _, err := exec.LookPath("xgboost"); err != nil {
			t.Skipf("skipping: needs the xgboost CLI (apt-get install xgboost): %v", err)
		}
		dir := t.TempDir()
		var fmap strings.Builder
		for i, name := range smallFeatures {
			fmt.Fprintf(&fmap, "%d\t%s\tq\n", i, name)
		}
		if err := os.WriteFile(filepath.Join(dir, "fmap"), []byte(fmap.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		modelPath, err := filepath.Abs(smallModelPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name  string
			names []string
			args  []string
		}{
			{"with feature map", smallFeatures, []string{"fmap=fmap"}},
			{"without feature map", nil, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				args := append([]string{"/dev/null", "task=dump", "model_in=" + modelPath, "dump_format=json", "name_dump=dump.json"}, tc.args...)
				cmd := exec.Command("xgboost", args...)
				cmd.Dir = dir
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("xgboost dump: %v\n%s", err, out)
				}
				want, err := os.ReadFile(filepath.Join(dir, "dump.json"))
				if err != nil {
					t.Fatal(err)
				}
				compareDump(t, m.Dump(tc.names), want)
			})
		}
	})
}

// compareDump decodes both dumps as a router would (generic JSON) and
// requires the same trees: same keys, same integers, and numbers that are the
// same float32 (the CLI prints 9 significant digits, Dump the shortest
// decimal; both name the float32 exactly).
func compareDump(t *testing.T, got []DumpNode, want []byte) {
	t.Helper()
	gotJSON, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	decode := func(b []byte) any {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	g, w := decode(gotJSON), decode(want)
	if n := len(w.([]any)); n == 0 || n != len(got) {
		t.Fatalf("dump has %d trees, CLI %d", len(got), n)
	}
	if diff := dumpDiff("", g, w); diff != "" {
		t.Fatal(diff)
	}
}

func dumpDiff(path string, got, want any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: got %T, want an object", path, got)
		}
		gk, wk := slices.Sorted(maps.Keys(g)), slices.Sorted(maps.Keys(w))
		if !reflect.DeepEqual(gk, wk) {
			return fmt.Sprintf("%s: keys %v, want %v", path, gk, wk)
		}
		for _, k := range wk {
			if d := dumpDiff(path+"."+k, g[k], w[k]); d != "" {
				return d
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: got %v, want %d elements", path, got, len(w))
		}
		for i := range w {
			if d := dumpDiff(fmt.Sprintf("%s[%d]", path, i), g[i], w[i]); d != "" {
				return d
			}
		}
	case json.Number:
		g, ok := got.(json.Number)
		if !ok {
			return fmt.Sprintf("%s: got %v, want the number %s", path, got, w)
		}
		gv, err1 := strconv.ParseFloat(string(g), 32)
		wv, err2 := strconv.ParseFloat(string(w), 32)
		if err1 != nil || err2 != nil || float32(gv) != float32(wv) {
			return fmt.Sprintf("%s: got %s, want %s", path, g, w)
		}
	default:
		if !reflect.DeepEqual(got, want) {
			return fmt.Sprintf("%s: got %v, want %v", path, got, want)
		}
	}
	return ""
}
