package xgboost

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/headroomhq/headroom/internal/priority/prioritytest"
	"github.com/headroomhq/headroom/model"
)

// requireCLI returns a runner for the real CLI, or skips the test.
func requireCLI(t testing.TB) CLI {
	t.Helper()
	x := CLI{TempDir: t.TempDir()}
	if _, err := x.Available(); err != nil {
		t.Skipf("skipping: needs the xgboost CLI (apt-get install xgboost): %v", err)
	}
	return x
}

// predictCLI predicts rows X with `xgboost task=pred`. Rows are written as
// writeCSV writes training rows (NaN as "nan", which XGBoost reads as
// missing).
func (x CLI) predictCLI(ctx context.Context, modelJSON []byte, X [][]float64) ([]float32, error) {
	dir, err := os.MkdirTemp(x.TempDir, "xgboost-pred-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := writeCSV(filepath.Join(dir, "test.csv"), X, nil, nil); err != nil {
		return nil, err
	}
	return x.predictCSVFile(ctx, dir, modelJSON, len(X))
}

// predictCSV predicts rows given as CSV text, label column first.
func (x CLI) predictCSV(ctx context.Context, modelJSON []byte, csv string, rows int) ([]float32, error) {
	dir, err := os.MkdirTemp(x.TempDir, "xgboost-pred-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "test.csv"), []byte(csv), 0o600); err != nil {
		return nil, err
	}
	return x.predictCSVFile(ctx, dir, modelJSON, rows)
}

// predictCSVFile predicts dir/test.csv with the given model. The CLI prints
// each prediction with 9 significant digits (std::setprecision of float's
// max_digits10), enough to name every float32 uniquely, so parsing the text
// as float32 recovers XGBoost's prediction exactly and comparisons below are
// bit-exact.
func (x CLI) predictCSVFile(ctx context.Context, dir string, modelJSON []byte, rows int) ([]float32, error) {
	if err := os.WriteFile(filepath.Join(dir, "model.json"), modelJSON, 0o600); err != nil {
		return nil, err
	}
	conf := strings.Join([]string{
		"task = pred",
		"nthread = 1",
		`model_in = "model.json"`,
		`test:data = "test.csv?format=csv&label_column=0"`,
		`name_pred = "pred.txt"`,
	}, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "pred.conf"), []byte(conf), 0o600); err != nil {
		return nil, err
	}
	if err := x.run(ctx, dir, false, DefaultTimeout, "pred.conf"); err != nil {
		return nil, fmt.Errorf("xgboost pred: %w", err)
	}
	out, err := os.ReadFile(filepath.Join(dir, "pred.txt"))
	if err != nil {
		return nil, err
	}
	lines := strings.Fields(string(out))
	if len(lines) != rows {
		return nil, fmt.Errorf("xgboost pred: %d predictions for %d rows", len(lines), rows)
	}
	preds := make([]float32, rows)
	for i, s := range lines {
		v, err := strconv.ParseFloat(s, 32)
		if err != nil {
			return nil, fmt.Errorf("xgboost pred line %d: %w", i+1, err)
		}
		preds[i] = float32(v)
	}
	return preds, nil
}

// syntheticRows makes rows shaped like the service's features: fractions,
// wide and narrow integers (narrow ones tie a lot, so hist cuts land exactly
// on data values), large values with fractions, tiny values and signed
// values, with a nonlinear noisy label.
func syntheticRows(rng *rand.Rand, n int) (X [][]float64, y []float64) {
	for range n {
		kv := rng.Float64()
		tokens := float64(rng.IntN(8000))
		waiting := float64(rng.IntN(30))
		inflight := rng.Float64() * 1e6
		tiny := rng.Float64() * 1e-3
		signed := rng.NormFloat64() * 50
		X = append(X, []float64{kv, tokens, waiting, inflight, tiny, signed})
		y = append(y, 20+80*kv*kv+0.01*tokens+3*waiting*math.Sqrt(waiting)+2e-5*inflight+1e4*tiny+0.1*math.Abs(signed)+rng.NormFloat64()*5)
	}
	return X, y
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// splitPoints lists every (feature, threshold) the model splits on.
func splitPoints(trees *model.Trees) map[[2]float64]bool {
	points := map[[2]float64]bool{}
	var walk func(n *model.DumpNode)
	walk = func(n *model.DumpNode) {
		if n.Children == nil {
			return
		}
		f, _ := strconv.Atoi(n.Split)
		points[[2]float64{float64(f), float64(n.SplitCondition)}] = true
		walk(&n.Children[0])
		walk(&n.Children[1])
	}
	for _, root := range trees.Dump(nil) {
		walk(&root)
	}
	return points
}

// TestTrainMatchesXGBoostPredictions trains real models with the CLI and
// checks that Trees.Predict equals `xgboost task=pred` bit for bit, on the
// training rows, on rows placed exactly on every split threshold and on its
// float32 neighbours, and on rows with missing values.
func TestTrainMatchesXGBoostPredictions(t *testing.T) {
	if testing.Short() {
		t.Skip("trains xgboost on up to 4,000 rows twice and predicts with the CLI; skipped with -short")
	}
	x := requireCLI(t)
	ctx := context.Background()
	deep := Params{Rounds: 60, MaxDepth: 8, Eta: 0.3, Subsample: 1, ColsampleBytree: 1, MinChildWeight: 1, Seed: 7}
	defaults := DefaultParams()
	defaults.Rounds = 100
	for _, tc := range []struct {
		name string
		p    Params
		rows int
	}{
		{"defaults-100-trees", defaults, 4000},
		{"deep-unsampled", deep, 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.rows)))
			X, y := syntheticRows(rng, tc.rows)
			base := mean(y)
			trees, raw, err := x.train(ctx, X, y, nil, base, tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if trees.NumTrees() != tc.p.Rounds || trees.NumFeatures() != len(X[0]) ||
				trees.BaseScore() != float32(base) || trees.MaxDepth() > tc.p.MaxDepth || trees.MaxDepth() < 2 {
				t.Fatalf("model: %d trees, %d features, base %v, depth %d; want %d, %d, %v, depth in [2, %d]",
					trees.NumTrees(), trees.NumFeatures(), trees.BaseScore(), trees.MaxDepth(),
					tc.p.Rounds, len(X[0]), float32(base), tc.p.MaxDepth)
			}

			rows := append([][]float64(nil), X...)
			type probe struct{ at, below int } // row indices: on the threshold, one float32 below it
			var probes []probe
			points := slices.SortedFunc(maps.Keys(splitPoints(trees)), func(a, b [2]float64) int {
				return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
			})
			for _, pt := range points {
				f, thr := int(pt[0]), float32(pt[1])
				row := X[rng.IntN(len(X))]
				for _, v := range []float32{thr, math.Nextafter32(thr, float32(math.Inf(-1))), math.Nextafter32(thr, float32(math.Inf(1)))} {
					r := append([]float64(nil), row...)
					r[f] = float64(v)
					rows = append(rows, r)
				}
				probes = append(probes, probe{len(rows) - 3, len(rows) - 2})
			}
			for range 500 {
				r := append([]float64(nil), X[rng.IntN(len(X))]...)
				for j := range r {
					if rng.IntN(3) == 0 {
						r[j] = math.NaN()
					}
				}
				rows = append(rows, r)
			}
			for _, r := range rows {
				for _, v := range r {
					if _, exact := exactDecimal(float32(v)); !exact {
						t.Fatalf("value %v has no text XGBoost reads exactly; the comparison would be meaningless", v)
					}
				}
			}

			want, err := x.predictCLI(ctx, raw, rows)
			if err != nil {
				t.Fatal(err)
			}
			bad := 0
			for i, r := range rows {
				got := float32(trees.Predict(r))
				if math.Float32bits(got) != math.Float32bits(want[i]) {
					if bad++; bad <= 5 {
						t.Errorf("row %d %v: Predict %v (%#x), xgboost %v (%#x)", i, r, got, math.Float32bits(got), want[i], math.Float32bits(want[i]))
					}
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d rows differ", bad, len(rows))
			}
			// The threshold rows must exercise the boundary: a value on the
			// threshold goes right, one float32 below goes left, and that
			// changes some predictions.
			moved := 0
			for _, p := range probes {
				if want[p.at] != want[p.below] {
					moved++
				}
			}
			if len(probes) == 0 || moved == 0 {
				t.Fatalf("%d split thresholds, %d where the float32 just below predicts differently", len(probes), moved)
			}
			t.Logf("%d rows equal (%d split thresholds, %d decisive)", len(rows), len(probes), moved)
		})
	}
}

// stumpTree is one XGBoost 1.7 JSON tree: feature < cond ? left : right,
// missing values going left iff defaultLeft.
func stumpTree(id, feature int, cond, left, right float32, defaultLeft bool, numFeature int) string {
	dl := 0
	if defaultLeft {
		dl = 1
	}
	return fmt.Sprintf(`{"base_weights":[0E0,0E0,0E0],"categories":[],"categories_nodes":[],"categories_segments":[],`+
		`"categories_sizes":[],"default_left":[%d,0,0],"id":%d,"left_children":[1,-1,-1],"loss_changes":[0E0,0E0,0E0],`+
		`"parents":[2147483647,0,0],"right_children":[2,-1,-1],"split_conditions":[%s,%s,%s],"split_indices":[%d,0,0],`+
		`"split_type":[0,0,0],"sum_hessian":[1E0,1E0,1E0],"tree_param":{"num_deleted":"0","num_feature":"%d",`+
		`"num_nodes":"3","size_leaf_vector":"0"}}`,
		dl, id, jsonFloat(cond), jsonFloat(left), jsonFloat(right), feature, numFeature)
}

// xgbModelJSON wraps trees in an XGBoost 1.7 JSON model file.
func xgbModelJSON(base float32, numFeature int, trees []string) []byte {
	info := strings.TrimSuffix(strings.Repeat("0,", len(trees)), ",")
	return fmt.Appendf(nil, `{"learner":{"attributes":{},"feature_names":[],"feature_types":[],"gradient_booster":{"model":{`+
		`"gbtree_model_param":{"num_parallel_tree":"1","num_trees":"%d","size_leaf_vector":"0"},"tree_info":[%s],"trees":[%s]},`+
		`"name":"gbtree"},"learner_model_param":{"base_score":"%s","boost_from_average":"0","num_class":"0","num_feature":"%d",`+
		`"num_target":"1"},"objective":{"name":"reg:squarederror","reg_loss_param":{"scale_pos_weight":"1"}}},"version":[1,7,4]}`,
		len(trees), info, strings.Join(trees, ","), jsonFloat(base), numFeature)
}

// jsonFloat writes a float32 as XGBoost does: its JSON reader insists on an
// exponent or a point in a float.
func jsonFloat(v float32) string { return strconv.FormatFloat(float64(v), 'E', -1, 32) }

func TestTrainRejectsBadInput(t *testing.T) {
	// The binary does not exist: any error other than the expected one
	// means validation let the input through.
	x := CLI{Binary: filepath.Join(t.TempDir(), "no-xgboost"), TempDir: t.TempDir()}
	good := [][]float64{{1, 2}, {3, 4}}
	p := DefaultParams()
	for _, tc := range []struct {
		name string
		X    [][]float64
		y    []float64
		base float64
		p    func(*Params)
		want string
	}{
		{"no rows", nil, nil, 0, nil, "no rows"},
		{"no features", [][]float64{{}, {}}, []float64{1, 2}, 0, nil, "no features"},
		{"ragged", [][]float64{{1, 2}, {3}}, []float64{1, 2}, 0, nil, "row 1 has 1 features"},
		{"label count", good, []float64{1}, 0, nil, "1 labels for 2 rows"},
		{"nan feature", [][]float64{{1, math.NaN()}, {3, 4}}, []float64{1, 2}, 0, nil, "row 0 feature 1"},
		{"inf label", good, []float64{1, math.Inf(1)}, 0, nil, "label 1"},
		{"float32 overflow", [][]float64{{1, 2}, {1e39, 4}}, []float64{1, 2}, 0, nil, "row 1 feature 0"},
		{"nan base", good, []float64{1, 2}, math.NaN(), nil, "base score"},
		{"bad params", good, []float64{1, 2}, 0, func(p *Params) { p.Eta = 0 }, "eta"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := p
			if tc.p != nil {
				tc.p(&p)
			}
			_, err := x.Train(context.Background(), tc.X, tc.y, tc.base, p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// fakeCLI writes an executable shell script standing in for xgboost.
func fakeCLI(t *testing.T, body string) CLI {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake-xgboost")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return CLI{Binary: path, TempDir: t.TempDir(), Timeout: 10 * time.Second}
}

func requireEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("%s holds %d entries after the run; want the run directory removed", dir, len(entries))
	}
}

// TestTrainWritesConfigAndData checks the inputs handed to the CLI, with a
// fake that copies them out.
func TestTrainWritesConfigAndData(t *testing.T) {
	out := t.TempDir()
	x := fakeCLI(t, fmt.Sprintf(`cp "$1" %q/conf && cp train.dmatrix %q/matrix && exit 1`, out, out))
	X := [][]float64{{1330937.8, 0.1}, {7, -2.5}}
	y := []float64{12.345, 4.6888983e-04}
	p := Params{Rounds: 200, MaxDepth: 6, Eta: 0.05, Subsample: 0.8, ColsampleBytree: 0.8,
		MinChildWeight: 5, Gamma: 0.2, Lambda: 0.1, Alpha: 0.01, Seed: -3}
	if _, err := x.Train(context.Background(), X, y, 0.1, p); err == nil || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("err = %v, want the fake's exit status", err)
	}
	requireEmptyDir(t, x.TempDir)
	conf, err := os.ReadFile(filepath.Join(out, "conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"objective = reg:squarederror", "tree_method = hist", "nthread = 1", "booster = gbtree",
		"base_score = 0.1", "num_round = 200", "max_depth = 6", "eta = 0.05", "subsample = 0.8",
		"colsample_bytree = 0.8", "min_child_weight = 5", "gamma = 0.2", "lambda = 0.1", "alpha = 0.01",
		"seed = -3", `data = "train.dmatrix"`, `model_out = "model.json"`,
	} {
		if !strings.Contains("\n"+string(conf), "\n"+line+"\n") {
			t.Errorf("config lacks line %q:\n%s", line, conf)
		}
	}
	matrix, err := os.ReadFile(filepath.Join(out, "matrix"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := readMatrix(matrix)
	if err != nil {
		t.Fatal(err)
	}
	for i, row := range X {
		for j, v := range row {
			if got.X[i][j] != float32(v) {
				t.Errorf("matrix row %d column %d is %v, want %v", i, j, got.X[i][j], float32(v))
			}
		}
		if got.y[i] != float32(y[i]) {
			t.Errorf("matrix label %d is %v, want %v", i, got.y[i], float32(y[i]))
		}
	}
	if len(got.X) != len(X) || got.weights != nil {
		t.Errorf("matrix has %d rows and weights %v, want %d rows and none", len(got.X), got.weights, len(X))
	}
}

func TestTrainFailures(t *testing.T) {
	X := [][]float64{{1, 2}, {3, 4}}
	y := []float64{1, 2}
	p := DefaultParams()
	p.Rounds = 2
	stump0, stump1 := stumpTree(0, 0, 2, 1, 2, false, 2), stumpTree(1, 0, 2, 1, 2, false, 2)
	for _, tc := range []struct {
		name   string
		script string
		want   []string
	}{
		{"exit status", `echo "loading data" ; echo "[12:00:00] fatal: disk on fire" >&2; exit 3`,
			[]string{"exit status 3", "disk on fire"}},
		{"stack trace dropped", `printf 'Check failed: bad thing\nStack trace:\n  [bt] (0) xgboost(+0x1)\n' >&2; exit 1`,
			[]string{"Check failed: bad thing"}},
		{"killed by signal", `kill -9 $$`, []string{"signal: killed"}},
		{"no model written", `exit 0`, []string{"read model"}},
		{"garbage model", `echo 'not a model' > model.json`, []string{"parse xgboost model"}},
		{"truncated model", `printf '{"learner":{' > model.json`, []string{"parse xgboost model"}},
		{"wrong tree count", fmt.Sprintf(`echo '%s' > model.json`, xgbModelJSON(0, 2, []string{stump0})),
			[]string{"1 trees for 2 rounds"}},
		{"wrong feature count", fmt.Sprintf(`echo '%s' > model.json`, xgbModelJSON(0, 3, []string{stump0, stump1})),
			[]string{"3 features, data has 2"}},
		{"wrong base score", fmt.Sprintf(`echo '%s' > model.json`, xgbModelJSON(0.5, 2, []string{stump0, stump1})),
			[]string{"base score 0.5, asked for 1.5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := fakeCLI(t, tc.script)
			_, err := x.Train(context.Background(), X, y, 1.5, p)
			if err == nil {
				t.Fatal("Train succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want it to mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "[bt]") {
				t.Errorf("err carries a native stack trace: %v", err)
			}
			requireEmptyDir(t, x.TempDir)
		})
	}
	t.Run("control: a well-formed model is accepted", func(t *testing.T) {
		x := fakeCLI(t, fmt.Sprintf(`echo '%s' > model.json`, xgbModelJSON(1.5, 2, []string{stump0, stump1})))
		trees, err := x.Train(context.Background(), X, y, 1.5, p)
		if err != nil {
			t.Fatal(err)
		}
		if got := trees.Predict([]float64{3, 0}); got != 1.5+2+2 {
			t.Fatalf("Predict = %v, want 5.5", got)
		}
	})
}

func TestMissingBinary(t *testing.T) {
	x := CLI{Binary: filepath.Join(t.TempDir(), "no-such-xgboost"), TempDir: t.TempDir()}
	if _, err := x.Available(); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("Available: err = %v, want not found", err)
	}
	_, err := x.Train(context.Background(), [][]float64{{1}}, []float64{1}, 0, DefaultParams())
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("Train: err = %v, want not found", err)
	}
	requireEmptyDir(t, x.TempDir)
}

// processGone reports whether pid has exited (a zombie counts: it runs
// nothing, and in a container nobody may reap it).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return os.IsNotExist(err)
	}
	// Fields after the parenthesised command: the first is the state.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 {
		return strings.HasPrefix(string(stat[i+1:]), " Z")
	}
	return false
}

// TestTrainTimeout runs a fake that starts a child and hangs; Train must
// return promptly with a timeout error and leave neither process running.
func TestTrainTimeout(t *testing.T) {
	pids := t.TempDir()
	for _, tc := range []struct {
		name    string
		cancel  bool // cancel the caller's context instead of timing out
		timeout time.Duration
		want    string
	}{
		{"timeout", false, 300 * time.Millisecond, "timed out after 300ms"},
		{"caller cancels", true, 10 * time.Second, "interrupted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(pids, tc.name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			x := fakeCLI(t, fmt.Sprintf(`sleep 30 & echo $! > %q/child; echo $$ > %q/self; wait`, dir, dir))
			x.Timeout = tc.timeout
			ctx := context.Background()
			if tc.cancel {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(300*time.Millisecond, cancel)
			}
			start := time.Now()
			_, err := x.Train(ctx, [][]float64{{1}}, []float64{1}, 0, DefaultParams())
			elapsed := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			if tc.cancel && !errors.Is(err, context.Canceled) {
				t.Errorf("err = %v, want it to wrap context.Canceled", err)
			}
			if elapsed > 5*time.Second {
				t.Errorf("Train returned after %v", elapsed)
			}
			for _, name := range []string{"self", "child"} {
				b, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatalf("the fake did not record its %s pid: %v", name, err)
				}
				pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
				if err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(2 * time.Second)
				for !processGone(pid) {
					if time.Now().After(deadline) {
						t.Fatalf("%s process %d still running after Train returned", name, pid)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			requireEmptyDir(t, x.TempDir)
		})
	}
}

// TestTrainIdleFallsBackWhenStarved: an idle-class run that has not
// finished within IdleGrace (here, one that never would) is killed and run
// again at Nice, outside the idle class, and Starved is told; one that ends
// in time, even with an error, is not run again.
func TestTrainIdleFallsBackWhenStarved(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the idle scheduling class is Linux's")
	}
	for _, tc := range []struct {
		name     string
		hang     bool // the first run never ends
		wantRuns int
		// grace is the trainer's IdleGrace. A run in the idle class gets
		// next to no core while anything else wants one (on CI's two
		// cores, the tests beside it), so each grace leaves even such a
		// run time to record itself: the run that ends in time one that
		// a loaded machine cannot exhaust (it ends the test as soon as
		// the run ends), the starved one a few seconds, which it waits
		// out whatever the load (it hangs).
		grace time.Duration
	}{
		{"starved", true, 2, 3 * time.Second},
		{"ends in time", false, 1, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			// Each run records its pid and scheduling policy (field 41 of
			// its stat; 5 is SCHED_IDLE), waiting a moment for the trainer
			// to lower it, then the first hangs or fails and the second fails.
			hang := ""
			if tc.hang {
				hang = `[ "$n" = 0 ] && exec sleep 30`
			}
			x := fakeCLI(t, fmt.Sprintf(`n=$(ls %[1]q | grep -c pid)
echo $$ > %[1]q/pid$n
for i in $(seq 50); do p=$(awk '{print $41}' /proc/$$/stat); [ "$p" = 5 ] && break; [ "$n" = 1 ] && break; sleep 0.1; done
echo $p > %[1]q/policy$n
%s
echo "run $n failed" >&2; exit 3`, dir, hang))
			x.Idle, x.IdleGrace = true, tc.grace
			starved := 0
			x.Starved = func() { starved++ }
			start := time.Now()
			_, err := x.Train(context.Background(), [][]float64{{1}}, []float64{1}, 0, DefaultParams())
			want := fmt.Sprintf("run %d failed", tc.wantRuns-1)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "exit status 3") {
				t.Fatalf("err = %v, want the last run's failure %q", err, want)
			}
			if starved != tc.wantRuns-1 {
				t.Errorf("Starved called %d times, want %d", starved, tc.wantRuns-1)
			}
			if tc.hang && time.Since(start) < x.IdleGrace {
				t.Errorf("ran again after %v, before the %v grace", time.Since(start), x.IdleGrace)
			}
			policies := make([]string, 0, 2)
			for n := range 3 {
				b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("policy%d", n)))
				if err != nil {
					break
				}
				policies = append(policies, strings.TrimSpace(string(b)))
			}
			if len(policies) != tc.wantRuns || policies[0] != "5" || (tc.wantRuns == 2 && policies[1] == "5") {
				t.Errorf("runs' scheduling policies %v; want %d runs, the first idle (5), the second not", policies, tc.wantRuns)
			}
			b, err := os.ReadFile(filepath.Join(dir, "pid0"))
			if err != nil {
				t.Fatal(err)
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			for deadline := time.Now().Add(5 * time.Second); !processGone(pid); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the starved run %d still running", pid)
				}
			}
			requireEmptyDir(t, x.TempDir)
		})
	}
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 64}
	for i := range 100 {
		fmt.Fprintf(b, "line %d\n", i)
	}
	b.Write([]byte("Stack trace:\n  [bt] (0) frame\nlast words\n"))
	got := b.suffix()
	if !strings.HasSuffix(got, "line 99 | last words") || strings.Contains(got, "line 1 ") || strings.Contains(got, "[bt]") {
		t.Fatalf("suffix = %q", got)
	}
	if len(got) > 64+len(": ") {
		t.Fatalf("suffix keeps %d bytes, more than the last 64 written", len(got))
	}
	if got := (&tailBuffer{max: 64}).suffix(); got != " (no output)" {
		t.Fatalf("empty suffix = %q", got)
	}
}

// xgboost runs at the niceness asked for, so serving on the same cores
// comes first; with Nice 0 it keeps the trainer's.
func TestTrainRunsNiced(t *testing.T) {
	// The child starts with the niceness of the thread that forks it: this
	// goroutine's, kept on one thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	own, err := prioritytest.Niceness("/proc/thread-self/stat")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, nice := range []int{0, 7, 19} {
		want := max(own, nice) // lowering niceness needs privileges
		if os.Geteuid() == 0 && nice > 0 {
			want = nice
		}
		out := filepath.Join(t.TempDir(), "stat")
		// The script waits (5 s at most) for the trainer to renice it, which
		// happens just after it starts, then reports its niceness.
		x := fakeCLI(t, fmt.Sprintf(`for i in $(seq 50); do [ "$(cut -d')' -f2 /proc/$$/stat | cut -d' ' -f18)" = %d ] && break; sleep 0.1; done
cat /proc/$$/stat > %q; exit 1`, want, out))
		x.Nice = nice
		if _, err := x.Train(context.Background(), [][]float64{{1}, {2}}, []float64{1, 2}, 1, DefaultParams()); err == nil {
			t.Fatal("fake xgboost succeeded")
		}
		got, err := prioritytest.Niceness(out)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("Nice %d (trainer at %d): xgboost ran at niceness %d, want %d", nice, own, got, want)
		}
	}
}

// With Idle, xgboost runs in the idle scheduling class (policy 5 in
// /proc/PID/stat, field 41); without, in the trainer's (0, normal).
func TestTrainRunsIdle(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the idle scheduling class is Linux's")
	}
	for _, tt := range []struct {
		idle   bool
		policy string
	}{{false, "0"}, {true, "5"}} {
		out := filepath.Join(t.TempDir(), "policy")
		// The script waits (5 s at most) for the trainer to move it, which
		// happens just after it starts, then reports its policy.
		x := fakeCLI(t, fmt.Sprintf(`for i in $(seq 50); do p=$(cut -d')' -f2 /proc/$$/stat | cut -d' ' -f40); [ "$p" = %s ] && break; sleep 0.1; done
echo "$p" > %q; exit 1`, tt.policy, out))
		x.Idle = tt.idle
		if _, err := x.Train(context.Background(), [][]float64{{1}, {2}}, []float64{1, 2}, 1, DefaultParams()); err == nil {
			t.Fatal("fake xgboost succeeded")
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if p := strings.TrimSpace(string(got)); p != tt.policy {
			t.Errorf("Idle %v: xgboost ran with scheduling policy %s, want %s", tt.idle, p, tt.policy)
		}
	}
}

// TrainWeighted hands XGBoost one weight per row: a single leaf fitted by
// squared error is the weighted mean of its labels, and a split weighs
// each row's hessian as its weight. Without the weights read, the leaf
// would be the plain mean.
func TestTrainWeightedWeighsRows(t *testing.T) {
	x := requireCLI(t)
	ctx := context.Background()
	p := Params{Rounds: 1, MaxDepth: 1, Eta: 1, Subsample: 1, ColsampleBytree: 1, MinChildWeight: 0, Seed: 1}
	X := [][]float64{{1, 5}, {1, 5}, {1, 5}, {1, 5}}
	y := []float64{0, 0, 0, 1}
	for _, tc := range []struct {
		name    string
		weights []float64
		want    float64
	}{
		{"equal", []float64{1, 1, 1, 1}, 0.25},
		{"the last row three times", []float64{1, 1, 1, 3}, 0.5},
		{"the last row alone", []float64{0, 0, 0, 2}, 1},
	} {
		trees, err := x.TrainWeighted(ctx, X, y, tc.weights, 0, p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := trees.Predict([]float64{1, 5}); math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("%s: leaf %v, want the weighted mean %v", tc.name, got, tc.want)
		}
	}
	for _, bad := range [][]float64{{1, 1, 1}, {1, 1, -1, 1}, {0, 0, 0, 0}, {1, math.NaN(), 1, 1}} {
		if _, err := x.TrainWeighted(ctx, X, y, bad, 0, p); err == nil {
			t.Errorf("weights %v: no error", bad)
		}
	}
}
