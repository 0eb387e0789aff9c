package model

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The testdata models were trained by the xgboost CLI (1.7.4). Regenerate
// them with
//
//	go test ./model -run XGBoost -update
//
// The small model comes with the CLI's own JSON dump and the CLI's
// predictions for a set of rows, so the tests compare against XGBoost without
// needing it installed. Its features live on grids (eighths and integers)
// whose decimals XGBoost's CSV parser reads exactly, and hist splits on data
// values, so every split threshold is a grid value the golden rows can sit
// on exactly. (Rows one float32 step from a threshold are trainer's tests,
// which write CSV XGBoost reads exactly for any value.)
var update = flag.Bool("update", false, "retrain the testdata models with the xgboost CLI")

const (
	smallModelPath = "testdata/small.json"
	smallDumpPath  = "testdata/small.dump.json"
	smallPredPath  = "testdata/small.pred.csv"
	largeModelPath = "testdata/trees-400x6.bundle.json.gz" // in MarshalJSON's encoding, a third the size
)

// smallFeatures names the small model's features, for dumps.
var smallFeatures = []string{"kv_cache_percentage", "input_token_length", "num_request_waiting"}

func TestMain(m *testing.M) {
	flag.Parse()
	if *update {
		if err := regenerateTestdata(); err != nil {
			fmt.Fprintln(os.Stderr, "regenerate testdata:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

func regenerateTestdata() error {
	dir, err := os.MkdirTemp("", "model-testdata-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	xgb := func(args ...string) error {
		cmd := exec.Command("xgboost", append([]string{"/dev/null"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("xgboost %v: %w\n%s", args, err, out)
		}
		return nil
	}
	write := func(name, text string) error { return os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644) }
	common := []string{"objective=reg:squarederror", "tree_method=hist", "nthread=1", "seed=1"}

	// Small: 3 features on grids, missing values in training so both default
	// directions appear, 8 trees of depth 3.
	rng := rand.New(rand.NewPCG(11, 12))
	var rows [][]float64
	var train strings.Builder
	for range 600 {
		kv := float64(rng.IntN(9)) / 8
		tokens := float64(rng.IntN(2000))
		waiting := float64(rng.IntN(20))
		label := 1 + 2*kv + tokens/500 + waiting*waiting/40 + rng.NormFloat64()*0.1
		if rng.IntN(8) == 0 {
			waiting = math.NaN()
			label += 3
		}
		rows = append(rows, []float64{kv, tokens, waiting})
		fmt.Fprintf(&train, "%g,%s\n", label, csvRow([]float64{kv, tokens, waiting}))
	}
	if err := write("small.csv", train.String()); err != nil {
		return err
	}
	if err := xgb(append(common, "base_score=2.5", "max_depth=3", "eta=0.3", "num_round=8", "min_child_weight=1",
		"data=small.csv?format=csv&label_column=0", "model_out=small.json")...); err != nil {
		return err
	}
	var fmap strings.Builder
	for i, name := range smallFeatures {
		fmt.Fprintf(&fmap, "%d\t%s\tq\n", i, name)
	}
	if err := write("small.fmap", fmap.String()); err != nil {
		return err
	}
	if err := xgb("task=dump", "model_in=small.json", "dump_format=json", "fmap=small.fmap", "name_dump=small.dump.json"); err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(dir, "small.json"))
	if err != nil {
		return err
	}
	small, err := ParseXGBoostJSON(data)
	if err != nil {
		return err
	}
	// Golden rows: training rows, rows on every threshold and one grid step
	// below it, rows with missing values.
	grid := []float64{1.0 / 8, 1, 1}
	golden := rows[:200:200]
	for _, s := range splits(small) {
		if t := float64(s.threshold); math.Mod(t/grid[s.feature], 1) != 0 {
			return fmt.Errorf("threshold %v of feature %d is off its grid", t, s.feature)
		}
		for _, v := range []float64{float64(s.threshold), float64(s.threshold) - grid[s.feature]} {
			r := append([]float64(nil), rows[rng.IntN(len(rows))]...)
			r[s.feature] = v
			golden = append(golden, r)
		}
	}
	for range 50 {
		r := append([]float64(nil), rows[rng.IntN(len(rows))]...)
		r[rng.IntN(len(r))] = math.NaN()
		golden = append(golden, r)
	}
	var test strings.Builder
	for _, r := range golden {
		fmt.Fprintf(&test, "0,%s\n", csvRow(r))
	}
	if err := write("test.csv", test.String()); err != nil {
		return err
	}
	if err := xgb("task=pred", "model_in=small.json", "test:data=test.csv?format=csv&label_column=0", "name_pred=pred.txt"); err != nil {
		return err
	}
	preds, err := os.ReadFile(filepath.Join(dir, "pred.txt"))
	if err != nil {
		return err
	}
	predLines := strings.Fields(string(preds))
	if len(predLines) != len(golden) {
		return fmt.Errorf("%d predictions for %d rows", len(predLines), len(golden))
	}
	var goldenCSV strings.Builder
	goldenCSV.WriteString("xgboost_prediction,kv_cache_percentage,input_token_length,num_request_waiting\n")
	for i, r := range golden {
		fmt.Fprintf(&goldenCSV, "%s,%s\n", predLines[i], csvRow(r))
	}

	// Large: 6 features, 400 trees of depth 6, the trainer's default
	// parameters otherwise; for benchmarks and the live dump comparison.
	var large strings.Builder
	for range 5000 {
		x := []float64{rng.Float64(), float64(rng.IntN(8000)), float64(rng.IntN(30)), rng.Float64() * 1e6, rng.Float64() * 1e-3, rng.NormFloat64() * 50}
		label := 20 + 80*x[0]*x[0] + 0.01*x[1] + 3*x[2]*math.Sqrt(x[2]) + 2e-5*x[3] + 1e4*x[4] + 0.1*math.Abs(x[5]) + rng.NormFloat64()*5
		fmt.Fprintf(&large, "%g,%s\n", label, csvRow(x))
	}
	if err := write("large.csv", large.String()); err != nil {
		return err
	}
	if err := xgb(append(common, "base_score=150", "max_depth=6", "eta=0.05", "num_round=400", "subsample=0.8",
		"colsample_bytree=0.8", "min_child_weight=5", "gamma=0.2", "lambda=0.1", "alpha=0.01",
		"data=large.csv?format=csv&label_column=0", "model_out=large.json")...); err != nil {
		return err
	}
	largeXGB, err := os.ReadFile(filepath.Join(dir, "large.json"))
	if err != nil {
		return err
	}
	largeTrees, err := ParseXGBoostJSON(largeXGB)
	if err != nil {
		return err
	}
	largeJSON, err := json.Marshal(largeTrees)
	if err != nil {
		return err
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zw.Write(largeJSON)
	if err := zw.Close(); err != nil {
		return err
	}

	dump, err := os.ReadFile(filepath.Join(dir, "small.dump.json"))
	if err != nil {
		return err
	}
	for path, content := range map[string][]byte{
		smallModelPath: data,
		smallDumpPath:  dump,
		smallPredPath:  []byte(goldenCSV.String()),
		largeModelPath: gz.Bytes(),
	} {
		if err := os.WriteFile(path, content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// csvRow formats features for XGBoost's CSV reader, NaN as "nan" (missing).
func csvRow(x []float64) string {
	s := make([]string, len(x))
	for i, v := range x {
		s[i] = "nan"
		if !math.IsNaN(v) {
			s[i] = strconv.FormatFloat(v, 'g', -1, 64)
		}
	}
	return strings.Join(s, ",")
}

type split struct {
	feature   int
	threshold float32
}

// splits lists the distinct splits of t, in node order.
func splits(t *Trees) []split {
	seen := map[split]bool{}
	var out []split
	for _, nd := range t.nodes {
		if nd.isLeaf() {
			continue
		}
		s := split{int(nd.feature), nd.cond}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func readTestdata(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	return data
}

func loadSmallModel(t testing.TB) *Trees {
	t.Helper()
	trees, err := ParseXGBoostJSON(readTestdata(t, smallModelPath))
	if err != nil {
		t.Fatalf("%s: %v", smallModelPath, err)
	}
	return trees
}

func loadLargeModel(t testing.TB) *Trees {
	t.Helper()
	var trees Trees
	if err := json.Unmarshal(readTestdata(t, largeModelPath), &trees); err != nil {
		t.Fatalf("%s: %v", largeModelPath, err)
	}
	return &trees
}

// node is one node of a hand-built tree: a leaf if left < 0 (value is the
// leaf value), else a split on feature at value with children left, right.
type node struct {
	left, right int
	feature     int
	value       float64
	defaultLeft bool
}

func leaf(v float64) node { return node{left: -1, right: -1, value: v} }

func splitNode(feature int, cond float64, left, right int, defaultLeft bool) node {
	return node{left: left, right: right, feature: feature, value: cond, defaultLeft: defaultLeft}
}

// fileTree and fileModel mirror XGBoost 1.7's JSON model file, so tests can
// build one and damage it field by field.
type fileTree struct {
	BaseWeights        []float64         `json:"base_weights"`
	Categories         []int64           `json:"categories"`
	CategoriesNodes    []int64           `json:"categories_nodes"`
	CategoriesSegments []int64           `json:"categories_segments"`
	CategoriesSizes    []int64           `json:"categories_sizes"`
	DefaultLeft        []int64           `json:"default_left"`
	ID                 int64             `json:"id"`
	LeftChildren       []int64           `json:"left_children"`
	LossChanges        []float64         `json:"loss_changes"`
	Parents            []int64           `json:"parents"`
	RightChildren      []int64           `json:"right_children"`
	SplitConditions    []float64         `json:"split_conditions"`
	SplitIndices       []int64           `json:"split_indices"`
	SplitType          []int64           `json:"split_type"`
	SumHessian         []float64         `json:"sum_hessian"`
	TreeParam          map[string]string `json:"tree_param"`
}

type fileModel struct {
	Learner struct {
		Attributes      map[string]string `json:"attributes"`
		FeatureNames    []string          `json:"feature_names"`
		FeatureTypes    []string          `json:"feature_types"`
		GradientBooster struct {
			Model struct {
				Param    map[string]string `json:"gbtree_model_param"`
				TreeInfo []int64           `json:"tree_info"`
				Trees    []fileTree        `json:"trees"`
			} `json:"model"`
			Name string `json:"name"`
		} `json:"gradient_booster"`
		LearnerModelParam map[string]string `json:"learner_model_param"`
		Objective         struct {
			Name string `json:"name"`
		} `json:"objective"`
	} `json:"learner"`
	Version []int `json:"version"`
}

func newFileModel(baseScore string, numFeature int, trees ...[]node) *fileModel {
	m := &fileModel{Version: []int{1, 7, 4}}
	l := &m.Learner
	l.LearnerModelParam = map[string]string{"base_score": baseScore, "boost_from_average": "0", "num_class": "0",
		"num_feature": strconv.Itoa(numFeature), "num_target": "1"}
	l.Objective.Name = "reg:squarederror"
	l.GradientBooster.Name = "gbtree"
	gb := &l.GradientBooster.Model
	gb.Param = map[string]string{"num_parallel_tree": "1", "num_trees": strconv.Itoa(len(trees)), "size_leaf_vector": "0"}
	for i, nodes := range trees {
		ft := fileTree{ID: int64(i), TreeParam: map[string]string{"num_deleted": "0", "num_feature": strconv.Itoa(numFeature),
			"num_nodes": strconv.Itoa(len(nodes)), "size_leaf_vector": "0"}}
		ft.Categories, ft.CategoriesNodes, ft.CategoriesSegments, ft.CategoriesSizes = []int64{}, []int64{}, []int64{}, []int64{}
		parents := make([]int64, len(nodes))
		parents[0] = math.MaxInt32
		for j, n := range nodes {
			if n.left >= 0 && n.left < len(nodes) {
				parents[n.left] = int64(j)
			}
			if n.right >= 0 && n.right < len(nodes) {
				parents[n.right] = int64(j)
			}
		}
		for j, n := range nodes {
			dl := int64(0)
			if n.defaultLeft {
				dl = 1
			}
			ft.BaseWeights = append(ft.BaseWeights, 0)
			ft.DefaultLeft = append(ft.DefaultLeft, dl)
			ft.LeftChildren = append(ft.LeftChildren, int64(n.left))
			ft.RightChildren = append(ft.RightChildren, int64(n.right))
			ft.LossChanges = append(ft.LossChanges, 0)
			ft.Parents = append(ft.Parents, parents[j])
			ft.SplitConditions = append(ft.SplitConditions, n.value)
			ft.SplitIndices = append(ft.SplitIndices, int64(n.feature))
			ft.SplitType = append(ft.SplitType, 0)
			ft.SumHessian = append(ft.SumHessian, 1)
		}
		gb.Trees = append(gb.Trees, ft)
		gb.TreeInfo = append(gb.TreeInfo, 0)
	}
	return m
}

func (m *fileModel) json(t testing.TB) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (m *fileModel) parse(t testing.TB) *Trees {
	t.Helper()
	trees, err := ParseXGBoostJSON(m.json(t))
	if err != nil {
		t.Fatal(err)
	}
	return trees
}

func f32below(v float64) float64 { return float64(math.Nextafter32(float32(v), float32(math.Inf(-1)))) }
func f32above(v float64) float64 { return float64(math.Nextafter32(float32(v), float32(math.Inf(1)))) }

// TestPredictSemantics checks XGBoost's rules on hand-built trees whose
// every prediction is worked out by hand. Each case runs on ensembles of 1,
// 4, 5 and 9 copies of its tree, so that both Predict's four-at-a-time walk
// and its one-at-a-time tail take every path; leaves are small integers, so
// k copies sum exactly to k times the leaf.
func TestPredictSemantics(t *testing.T) {
	nan := math.NaN()
	// f0 < 1.5 ? (f1 < 10 ? 1 : 2) : 4, missing f0 goes right, missing f1 left.
	depth2 := []node{
		splitNode(0, 1.5, 1, 2, false),
		splitNode(1, 10, 3, 4, true),
		leaf(4),
		leaf(1),
		leaf(2),
	}
	// 0.1 is not a float32: the threshold is float32(0.1), slightly above it.
	tenth := []node{splitNode(0, 0.1, 1, 2, false), leaf(-1), leaf(1)}
	for _, tc := range []struct {
		name string
		tree []node
		x    []float64
		leaf float64
	}{
		{"left-left", depth2, []float64{1, 5}, 1},
		{"left-right", depth2, []float64{1, 10}, 2},
		{"on the threshold goes right", depth2, []float64{1.5, 0}, 4},
		{"one float32 below goes left", depth2, []float64{f32below(1.5), 0}, 1},
		{"rounds to the threshold in float32, goes right", depth2, []float64{1.5 - 1e-12, 0}, 4},
		{"missing goes the default way (right)", depth2, []float64{nan, 0}, 4},
		{"missing goes the default way (left)", depth2, []float64{0, nan}, 1},
		{"+Inf is a value, not missing", depth2, []float64{math.Inf(1), 0}, 4},
		{"-Inf is a value, not missing", depth2, []float64{math.Inf(-1), math.Inf(-1)}, 1},
		{"extra features are ignored", depth2, []float64{1, 5, 99, nan}, 1},
		// float64 0.1 < float64(float32(0.1)): a float64 comparison would go left.
		{"0.1 rounds to the float32 threshold and goes right", tenth, []float64{0.1, 0}, 1},
		{"one float32 below 0.1 goes left", tenth, []float64{f32below(0.1), 0}, -1},
		{"one float32 above 0.1 goes right", tenth, []float64{f32above(0.1), 0}, 1},
	} {
		for _, copies := range []int{1, 4, 5, 9} {
			t.Run(fmt.Sprintf("%s/%d trees", tc.name, copies), func(t *testing.T) {
				trees := make([][]node, copies)
				for i := range trees {
					trees[i] = tc.tree
				}
				m := newFileModel("5E-1", 2, trees...).parse(t)
				want := 0.5 + float64(copies)*tc.leaf
				if got := m.Predict(tc.x); got != want {
					t.Fatalf("Predict(%v) = %v, want %v", tc.x, got, want)
				}
			})
		}
	}
	t.Run("trees of different depths walked side by side", func(t *testing.T) {
		m := newFileModel("0E0", 2,
			[]node{leaf(1)}, depth2, chain(6), tenth, depth2, []node{leaf(100)},
		).parse(t)
		// Leaf 1; depth2 goes right (4); the chain passes splits 0..3 and
		// stops at split 4's leaf (4); tenth goes right (1); 4 again; 100.
		x := []float64{3.5, 5}
		if got, want := m.Predict(x), 1.0+4+4+1+4+100; got != want {
			t.Fatalf("Predict(%v) = %v, want %v", x, got, want)
		}
	})
}

// TestPredictSumsInFloat32InTreeOrder checks the accumulation: float32,
// starting from the base score, tree by tree. float32 has 24 bits of
// mantissa, so 1e8 + 1 == 1e8 while float64 keeps the 1.
func TestPredictSumsInFloat32InTreeOrder(t *testing.T) {
	stump := func(v float64) []node { return []node{leaf(v)} }
	for _, tc := range []struct {
		name   string
		base   string
		leaves []float64
		want   float64
	}{
		{"small leaf lost against a large sum", "0E0", []float64{1e8, 1, -1e8}, 0},
		{"same leaves, other order", "0E0", []float64{1, 1e8, -1e8}, 0},
		{"order where the small leaf survives", "0E0", []float64{1e8, -1e8, 1}, 1},
		{"base score takes part", "1.6777216E7", []float64{1, 1}, 16777216},
		{"float32 leaf values", "0E0", []float64{0.1, 0.2}, float64(float32(float32(0.1) + float32(0.2)))},
		// Five or more trees go through Predict's four-at-a-time walk.
		{"small leaves lost, side-by-side walk", "0E0", []float64{1e8, 1, 1, 1, -1e8}, 0},
		{"small leaves first, side-by-side walk", "0E0", []float64{1, 1, 1, 1e8, -1e8, 1}, 1},
		{"small leaves last, side-by-side walk", "0E0", []float64{1e8, -1e8, 1, 1, 1, 1, 1}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var trees [][]node
			for _, v := range tc.leaves {
				trees = append(trees, stump(v))
			}
			m := newFileModel(tc.base, 1, trees...).parse(t)
			if got := m.Predict([]float64{0}); got != tc.want {
				t.Fatalf("Predict = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPredictShortInputPanics(t *testing.T) {
	m := newFileModel("0E0", 3, []node{splitNode(2, 1, 1, 2, false), leaf(1), leaf(2)}).parse(t)
	defer func() {
		if recover() == nil {
			t.Fatal("Predict with 2 of 3 features did not panic")
		}
	}()
	m.Predict([]float64{0, 0})
}

func TestPredictDoesNotAllocate(t *testing.T) {
	m := loadLargeModel(t)
	x := []float64{0.5, 4000, 15, 5e5, 5e-4, -3}
	if allocs := testing.AllocsPerRun(100, func() { m.Predict(x) }); allocs != 0 {
		t.Fatalf("Predict allocates %v times per call", allocs)
	}
}

// TestPredictMatchesXGBoostGolden compares Predict with the CLI's own
// predictions for the small model (see regenerateTestdata), bit for bit: the
// CLI prints 9 significant digits, enough to name every float32.
func TestPredictMatchesXGBoostGolden(t *testing.T) {
	m := loadSmallModel(t)
	lines := strings.Split(strings.TrimSpace(string(readTestdata(t, smallPredPath))), "\n")[1:]
	if len(lines) < 100 {
		t.Fatalf("%s has %d rows", smallPredPath, len(lines))
	}
	missing := 0
	var rows []float64
	var wants []float32
	for i, line := range lines {
		fields := strings.Split(line, ",")
		want, err := strconv.ParseFloat(fields[0], 32)
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float64, len(fields)-1)
		for j, s := range fields[1:] {
			if x[j], err = strconv.ParseFloat(s, 64); err != nil {
				t.Fatalf("row %d: %v", i, err)
			}
			if math.IsNaN(x[j]) {
				missing++
			}
		}
		if got := float32(m.Predict(x)); got != float32(want) {
			t.Errorf("row %d %v: Predict %v, xgboost %v", i, x, got, float32(want))
		}
		rows = append(rows, x...)
		wants = append(wants, float32(want))
	}
	if missing == 0 {
		t.Fatal("no golden row has a missing value")
	}
	got := make([]float64, len(wants))
	m.PredictRows(rows, m.NumFeatures(), got)
	for i := range got {
		if float32(got[i]) != wants[i] {
			t.Errorf("row %d: PredictRows %v, xgboost %v", i, got[i], wants[i])
		}
	}
}

// TestPredictRowsIsPredict checks PredictRows against Predict bit for bit
// on the depth-6 model cut to tree counts that leave groups of eight
// short, over rows wider than the model, in blocks full and partial, with
// a NaN here and there.
func TestPredictRowsIsPredict(t *testing.T) {
	large := loadLargeModel(t)
	rng := rand.New(rand.NewPCG(3, 4))
	const width = 8 // two columns past the model's six
	x := make([]float64, 37*width)
	for i := range x {
		x[i] = []float64{rng.Float64(), float64(rng.IntN(8000)), float64(rng.IntN(30)), rng.Float64() * 1e6, rng.Float64() * 1e-3, rng.NormFloat64() * 50, 1, 2}[i%width]
		if rng.IntN(40) == 0 {
			x[i] = math.NaN()
		}
	}
	for _, n := range []int{1, 7, 8, 13, 200} {
		m := firstTrees(large, n)
		for _, rows := range []int{0, 1, 16, 17, 37} {
			got := make([]float64, rows)
			m.PredictRows(x, width, got)
			for r := range got {
				if want := m.Predict(x[r*width : (r+1)*width]); math.Float64bits(got[r]) != math.Float64bits(want) {
					t.Errorf("%d trees, %d rows: row %d: PredictRows %v, Predict %v", n, rows, r, got[r], want)
				}
			}
		}
	}
	out := make([]float64, 37)
	if allocs := testing.AllocsPerRun(10, func() { large.PredictRows(x, width, out) }); allocs != 0 {
		t.Errorf("PredictRows allocates %v times per call", allocs)
	}
}

func TestParseRealModel(t *testing.T) {
	m := loadSmallModel(t)
	if m.NumTrees() != 8 || m.NumFeatures() != 3 || m.MaxDepth() != 3 || m.BaseScore() != 2.5 {
		t.Fatalf("small model: %d trees, %d features, depth %d, base %v; want 8, 3, 3, 2.5",
			m.NumTrees(), m.NumFeatures(), m.MaxDepth(), m.BaseScore())
	}
	defaults := [2]int{}
	for n, nd := range m.nodes {
		if !nd.isLeaf() {
			defaults[b2i(m.defaultLeft[n])]++
		}
	}
	if defaults[0] == 0 || defaults[1] == 0 {
		t.Fatalf("small model default directions (right, left) = %v; want both", defaults)
	}
	l := loadLargeModel(t)
	if l.NumTrees() != 400 || l.NumFeatures() != 6 || l.MaxDepth() != 6 {
		t.Fatalf("large model: %d trees, %d features, depth %d; want 400, 6, 6", l.NumTrees(), l.NumFeatures(), l.MaxDepth())
	}
}

// TestGainSumsLossChangesPerFeature: a tree model's gain per feature is the
// sum of XGBoost's own loss_changes over the splits on that feature, as its
// total_gain importance; a file without them has no gain rather than a
// made-up one.
func TestGainSumsLossChangesPerFeature(t *testing.T) {
	data, err := os.ReadFile(smallModelPath)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Learner struct {
			GradientBooster struct {
				Model struct {
					Trees []struct {
						Left         []int64   `json:"left_children"`
						SplitIndices []int64   `json:"split_indices"`
						LossChanges  []float64 `json:"loss_changes"`
					} `json:"trees"`
				} `json:"model"`
			} `json:"gradient_booster"`
		} `json:"learner"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	want := make([]float64, 3)
	for _, tr := range raw.Learner.GradientBooster.Model.Trees {
		for i, l := range tr.Left {
			if l >= 0 {
				want[tr.SplitIndices[i]] += tr.LossChanges[i]
			}
		}
	}
	got := loadSmallModel(t).Gain()
	if len(got) != 3 {
		t.Fatalf("gain %v, want one per feature", got)
	}
	for f := range want {
		if want[f] <= 0 || math.Abs(got[f]-want[f]) > 1e-9*want[f] {
			t.Errorf("feature %d: gain %v, want %v", f, got[f], want[f])
		}
	}
	file := newFileModel("0.5", 1, []node{splitNode(0, 1, 1, 2, true), leaf(1), leaf(2)})
	file.Learner.GradientBooster.Model.Trees[0].LossChanges = nil
	if g := file.parse(t).Gain(); g != nil {
		t.Errorf("model file without loss_changes: gain %v, want nil", g)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestParseKeepsUnreachableNodes: XGBoost leaves pruned nodes in the array,
// marked with split index 2^32-1. They are not evaluated and do not shift
// the ids of the nodes around them.
func TestParseKeepsUnreachableNodes(t *testing.T) {
	fm := newFileModel("0E0", 1, []node{
		splitNode(0, 1, 1, 2, false),
		leaf(10),
		leaf(20),
		splitNode(0, 5, 4, 5, false), // pruned: nothing points here
		leaf(30),
		leaf(40),
	})
	fm.Learner.GradientBooster.Model.Trees[0].SplitIndices[3] = math.MaxUint32
	fm.Learner.GradientBooster.Model.Trees[0].TreeParam["num_deleted"] = "3"
	m := fm.parse(t)
	if got := m.Predict([]float64{0}); got != 10 {
		t.Fatalf("Predict(0) = %v, want 10", got)
	}
	if got := m.Predict([]float64{7}); got != 20 {
		t.Fatalf("Predict(7) = %v, want 20", got)
	}
	d := m.Dump(nil)[0]
	if d.Yes != 1 || d.No != 2 || len(d.Children) != 2 || d.Children[1].NodeID != 2 {
		t.Fatalf("dump %+v: want children 1 and 2", d)
	}
	roundTrip(t, m)
}

// chain is a tree of the given depth: node 2i splits on f0 < i with leaf
// 2i+1 on its left and node 2i+2 on its right; the last node is leaf -1.
func chain(depth int) []node {
	var nodes []node
	for i := range depth {
		nodes = append(nodes, splitNode(0, float64(i), 2*i+1, 2*i+2, false), leaf(float64(i)))
	}
	return append(nodes, leaf(-1))
}

func TestParseRejects(t *testing.T) {
	valid := func() *fileModel {
		return newFileModel("5E-1", 2,
			[]node{splitNode(0, 1.5, 1, 2, false), splitNode(1, 10, 3, 4, true), leaf(4), leaf(1), leaf(2)},
			[]node{splitNode(1, 3, 1, 2, true), leaf(-1), leaf(1)})
	}
	tree := func(m *fileModel, i int) *fileTree { return &m.Learner.GradientBooster.Model.Trees[i] }
	for _, tc := range []struct {
		name   string
		damage func(m *fileModel)
		raw    string // used instead of the damaged model when set
		want   string
	}{
		{"not JSON", nil, "not json", "invalid character"},
		{"empty object", nil, "{}", "objective"},
		{"truncated", nil, `{"learner":{"learner_model_param":`, "unexpected end"},
		{"objective", func(m *fileModel) { m.Learner.Objective.Name = "reg:logistic" }, "", "objective"},
		{"dart booster", func(m *fileModel) { m.Learner.GradientBooster.Name = "dart" }, "", "booster"},
		{"multi-class", func(m *fileModel) { m.Learner.LearnerModelParam["num_class"] = "3" }, "", "num_class"},
		{"multi-target", func(m *fileModel) { m.Learner.LearnerModelParam["num_target"] = "2" }, "", "num_target"},
		{"parallel trees", func(m *fileModel) { m.Learner.GradientBooster.Model.Param["num_parallel_tree"] = "2" }, "", "num_parallel_tree"},
		{"vector leaves", func(m *fileModel) { m.Learner.GradientBooster.Model.Param["size_leaf_vector"] = "2" }, "", "size_leaf_vector"},
		{"num_trees mismatch", func(m *fileModel) { m.Learner.GradientBooster.Model.Param["num_trees"] = "3" }, "", "num_trees"},
		{"second group", func(m *fileModel) { m.Learner.GradientBooster.Model.TreeInfo[1] = 1 }, "", "output group 1"},
		{"tree_info short", func(m *fileModel) { m.Learner.GradientBooster.Model.TreeInfo = []int64{0} }, "", "tree_info"},
		{"no trees", func(m *fileModel) {
			m.Learner.GradientBooster.Model.Trees = []fileTree{}
			m.Learner.GradientBooster.Model.TreeInfo = []int64{}
			m.Learner.GradientBooster.Model.Param["num_trees"] = "0"
		}, "", "no trees"},
		{"base score NaN", func(m *fileModel) { m.Learner.LearnerModelParam["base_score"] = "NaN" }, "", "base score"},
		{"base score infinite", func(m *fileModel) { m.Learner.LearnerModelParam["base_score"] = "inf" }, "", "base score"},
		{"base score overflows float32", func(m *fileModel) { m.Learner.LearnerModelParam["base_score"] = "1E39" }, "", "base_score"},
		{"base score garbage", func(m *fileModel) { m.Learner.LearnerModelParam["base_score"] = "half" }, "", "base_score"},
		{"no features", func(m *fileModel) { m.Learner.LearnerModelParam["num_feature"] = "0" }, "", "num_feature"},
		{"num_feature missing", func(m *fileModel) { delete(m.Learner.LearnerModelParam, "num_feature") }, "", "num_feature"},
		{"tree ids swapped", func(m *fileModel) { tree(m, 0).ID, tree(m, 1).ID = 1, 0 }, "", "tree 0 has id 1"},
		{"num_nodes mismatch", func(m *fileModel) { tree(m, 1).TreeParam["num_nodes"] = "5" }, "", "num_nodes"},
		{"array length mismatch", func(m *fileModel) { tree(m, 1).SplitConditions = tree(m, 1).SplitConditions[:2] }, "", "split_conditions has 2 entries"},
		{"categorical split", func(m *fileModel) { tree(m, 0).SplitType[1] = 1 }, "", "categorical"},
		{"categories", func(m *fileModel) { tree(m, 0).Categories = []int64{3} }, "", "categorical"},
		{"left child out of range", func(m *fileModel) { tree(m, 1).LeftChildren[0], tree(m, 1).RightChildren[0] = 7, 8 }, "", "children 7, 8"},
		{"negative child", func(m *fileModel) { tree(m, 1).LeftChildren[0] = -2 }, "", "children -2, 2"},
		{"right is not left+1", func(m *fileModel) { tree(m, 0).LeftChildren[0], tree(m, 0).RightChildren[0] = 2, 1 }, "", "children 2, 1"},
		{"last node as left child", func(m *fileModel) { tree(m, 1).LeftChildren[0], tree(m, 1).RightChildren[0] = 2, 3 }, "", "children 2, 3"},
		{"cycle to the root", func(m *fileModel) { tree(m, 0).LeftChildren[1], tree(m, 0).RightChildren[1] = 0, 1 }, "", "reached twice"},
		{"self loop", func(m *fileModel) { tree(m, 0).LeftChildren[2], tree(m, 0).RightChildren[2] = 2, 3 }, "", "reached twice"},
		{"shared subtree", func(m *fileModel) { tree(m, 0).LeftChildren[1], tree(m, 0).RightChildren[1] = 2, 3 }, "", "reached twice"},
		{"leaf with a right child", func(m *fileModel) { tree(m, 1).RightChildren[1] = 2 }, "", "leaf with right child"},
		{"feature out of range", func(m *fileModel) { tree(m, 0).SplitIndices[1] = 2 }, "", "split feature 2 out of range"},
		{"negative feature", func(m *fileModel) { tree(m, 0).SplitIndices[0] = -1 }, "", "split feature -1"},
		{"default_left not 0/1", func(m *fileModel) { tree(m, 0).DefaultLeft[0] = 2 }, "", "default_left 2"},
		{"threshold overflows float32", func(m *fileModel) { tree(m, 0).SplitConditions[0] = 1e39 }, "", "float32"},
		{"leaf overflows float32", func(m *fileModel) { tree(m, 0).SplitConditions[3] = -1e39 }, "", "float32"},
		{"too deep", func(m *fileModel) {
			deep := newFileModel("0E0", 1, chain(MaxTreeDepth+1))
			m.Learner = deep.Learner
		}, "", "deeper than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.raw)
			if tc.raw == "" {
				m := valid()
				tc.damage(m)
				data = m.json(t)
			}
			_, err := ParseXGBoostJSON(data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	t.Run("control: undamaged model parses", func(t *testing.T) { valid().parse(t) })
	t.Run("control: deepest allowed tree parses", func(t *testing.T) {
		m := newFileModel("0E0", 1, chain(MaxTreeDepth)).parse(t)
		if m.MaxDepth() != MaxTreeDepth {
			t.Fatalf("MaxDepth = %d, want %d", m.MaxDepth(), MaxTreeDepth)
		}
		if got := m.Predict([]float64{MaxTreeDepth}); got != -1 {
			t.Fatalf("Predict at the bottom = %v, want -1", got)
		}
	})
}

// roundTrip checks that m survives MarshalJSON/UnmarshalJSON unchanged.
func roundTrip(t *testing.T, m *Trees) {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back Trees
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, &back) {
		t.Fatal("decoded trees differ from the encoded ones")
	}
	again, err := json.Marshal(&back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, again) {
		t.Fatal("re-encoding changed the bytes")
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	t.Run("small real model", func(t *testing.T) { roundTrip(t, loadSmallModel(t)) })
	t.Run("large real model", func(t *testing.T) { roundTrip(t, loadLargeModel(t)) })
	t.Run("awkward float32 values", func(t *testing.T) {
		// Values whose shortest float32 decimals are long, tiny or huge.
		m := newFileModel("1.00000012E0", 1, []node{
			splitNode(0, float64(math.Nextafter32(1, 2)), 1, 2, true),
			leaf(float64(float32(math.SmallestNonzeroFloat32))),
			leaf(float64(float32(math.MaxFloat32))),
		}, []node{leaf(float64(float32(-1.1754944e-38)))}).parse(t)
		roundTrip(t, m)
	})
	t.Run("inside a bundle", func(t *testing.T) {
		type holder struct {
			Trees *Trees `json:"trees"`
		}
		in := holder{loadSmallModel(t)}
		data, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out holder
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(in.Trees, out.Trees) {
			t.Fatal("trees changed inside a bundle")
		}
	})
}

func TestUnmarshalRejects(t *testing.T) {
	base := loadSmallModel(t)
	encode := func(enc *treesJSON) []byte {
		b, err := json.Marshal(enc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	valid := func() *treesJSON {
		var enc treesJSON
		data, err := json.Marshal(base)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &enc); err != nil {
			t.Fatal(err)
		}
		return &enc
	}
	// Node 0 of the small model's first tree is a split with children 1, 2;
	// its first leaf is at index firstLeaf.
	enc0 := valid()
	firstLeaf := slices.Index(enc0.Left, -1)
	size0 := int(enc0.TreeSizes[0])
	for _, tc := range []struct {
		name   string
		damage func(e *treesJSON)
		raw    string
		want   string
	}{
		{"not JSON", nil, "[", "unexpected end"},
		{"empty object", nil, "{}", "num_feature 0"},
		{"no trees", func(e *treesJSON) { e.TreeSizes = nil }, "", "no trees"},
		{"NaN base score", nil, `{"base_score":"NaN"}`, "cannot unmarshal"},
		{"base score overflows", nil, strings.Replace(string(encode(valid())), `"base_score":2.5`, `"base_score":1e39`, 1), "float32"},
		{"value overflows", nil, strings.Replace(string(encode(valid())), `"value":[`, `"value":[-1e39,`, 1), "float32"},
		{"no features", func(e *treesJSON) { e.NumFeature = 0 }, "", "num_feature 0"},
		{"feature count beyond int32", func(e *treesJSON) { e.NumFeature = 1 << 40 }, "", "num_feature"},
		{"sizes sum short", func(e *treesJSON) { e.TreeSizes = e.TreeSizes[:len(e.TreeSizes)-1] }, "", "sum to"},
		{"size past the end", func(e *treesJSON) { e.TreeSizes[len(e.TreeSizes)-1] += 1 }, "", "out of range"},
		{"zero size", func(e *treesJSON) { e.TreeSizes[0] = 0 }, "", "size 0"},
		{"gain of another width", func(e *treesJSON) { e.Gain = e.Gain[:1] }, "", "gain has 1 entries for 3 features"},
		{"negative size", func(e *treesJSON) { e.TreeSizes[0] = -3 }, "", "size -3"},
		{"arrays differ", func(e *treesJSON) { e.Value = e.Value[1:] }, "", "differ in length"},
		{"child out of the tree", func(e *treesJSON) { e.Left[0] = int64(size0) }, "", "children"},
		{"child is the last node", func(e *treesJSON) { e.Left[0] = int64(size0 - 1) }, "", "children"},
		{"cycle to the root", func(e *treesJSON) { e.Left[0] = 0 }, "", "reached twice"},
		{"leaf turned into a loop", func(e *treesJSON) { e.Left[firstLeaf] = 1 }, "", "reached twice"},
		{"negative child", func(e *treesJSON) { e.Left[0] = -5 }, "", "children -5"},
		{"feature out of range", func(e *treesJSON) { e.Feature[0] = 3 }, "", "split feature 3"},
		{"default_left not 0/1", func(e *treesJSON) { e.DefaultLeft[0] = -1 }, "", "default_left -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.raw)
			if tc.raw == "" {
				e := valid()
				tc.damage(e)
				data = encode(e)
			}
			got := *base
			before := got
			err := got.UnmarshalJSON(data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			if !reflect.DeepEqual(got, before) {
				t.Fatal("a failed UnmarshalJSON changed the receiver")
			}
		})
	}
	t.Run("control: undamaged encoding decodes", func(t *testing.T) {
		var m Trees
		if err := m.UnmarshalJSON(encode(valid())); err != nil {
			t.Fatal(err)
		}
	})
}

// firstTrees returns the ensemble of m's first n trees.
func firstTrees(m *Trees, n int) *Trees {
	end := len(m.nodes)
	if n < len(m.roots) {
		end = int(m.roots[n])
	}
	return &Trees{
		baseScore: m.baseScore, numFeature: m.numFeature, maxDepth: m.maxDepth,
		roots: m.roots[:n], depths: m.depths[:n], nodes: m.nodes[:end], defaultLeft: m.defaultLeft[:end],
	}
}

// BenchmarkTreesPredict evaluates the CLI-trained depth-6 model (6
// features) truncated to 100, 200 and 400 trees; one op is one row.
func BenchmarkTreesPredict(b *testing.B) {
	large := loadLargeModel(b)
	rng := rand.New(rand.NewPCG(1, 2))
	rows := make([][]float64, 4096)
	for i := range rows {
		rows[i] = []float64{rng.Float64(), float64(rng.IntN(8000)), float64(rng.IntN(30)), rng.Float64() * 1e6, rng.Float64() * 1e-3, rng.NormFloat64() * 50}
	}
	for _, n := range []int{100, 200, 400} {
		m := firstTrees(large, n)
		b.Run(fmt.Sprintf("trees=%d", n), func(b *testing.B) {
			var sink float64
			i := 0
			for b.Loop() {
				sink += m.Predict(rows[i&(len(rows)-1)])
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i)/float64(n), "ns/tree")
			_ = sink
		})
	}
}

// BenchmarkTreesUnmarshal measures loading the 400-tree model from a bundle.
func BenchmarkTreesUnmarshal(b *testing.B) {
	data, err := json.Marshal(loadLargeModel(b))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		var m Trees
		if err := m.UnmarshalJSON(data); err != nil {
			b.Fatal(err)
		}
	}
}

// The two walks Predict chooses between agree wherever both apply: on rows
// without NaN, for every count of trees around the eight-tree groups.
func TestFiniteAndMissingWalksAgree(t *testing.T) {
	large := loadLargeModel(t)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 203, large.NumTrees()} {
		m := firstTrees(large, n)
		for range 200 {
			x := []float64{rng.Float64(), float64(rng.IntN(8000)), float64(rng.IntN(30)), rng.Float64() * 1e6, rng.Float64() * 1e-3, rng.NormFloat64() * 50}
			if a, b := m.predictFinite(x), m.predictMissing(x); a != b || m.Predict(x) != a {
				t.Fatalf("%d trees, row %v: finite walk %v, missing-value walk %v", n, x, a, b)
			}
		}
	}
}

// A model wider than predictFinite's feature array takes the general walk
// and predicts exactly what the same trees do on a narrow model.
func TestPredictWideModel(t *testing.T) {
	narrow := loadLargeModel(t)
	wide := *narrow
	wide.numFeature = maxFastFeatures + 6
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		x := make([]float64, wide.numFeature)
		x[0], x[1], x[2] = rng.Float64(), float64(rng.IntN(8000)), float64(rng.IntN(30))
		x[3], x[4], x[5] = rng.Float64()*1e6, rng.Float64()*1e-3, rng.NormFloat64()*50
		if got, want := wide.Predict(x), narrow.Predict(x[:narrow.numFeature]); got != want {
			t.Fatalf("x %v: wide model %v, narrow %v", x[:6], got, want)
		}
	}
}

// BenchmarkTreesPredictRows is BenchmarkTreesPredict through PredictRows,
// 16 rows a call, as a pair ranking's rows are; one op is one row.
func BenchmarkTreesPredictRows(b *testing.B) {
	large := loadLargeModel(b)
	rng := rand.New(rand.NewPCG(1, 2))
	const width, batch = 6, 16
	x := make([]float64, 4096*width)
	for r := range 4096 {
		copy(x[r*width:], []float64{rng.Float64(), float64(rng.IntN(8000)), float64(rng.IntN(30)), rng.Float64() * 1e6, rng.Float64() * 1e-3, rng.NormFloat64() * 50})
	}
	out := make([]float64, batch)
	for _, n := range []int{100, 200, 400} {
		m := firstTrees(large, n)
		b.Run(fmt.Sprintf("trees=%d", n), func(b *testing.B) {
			rows := 0
			for b.Loop() {
				lo := rows & 4095
				m.PredictRows(x[lo*width:(lo+batch)*width], width, out)
				rows += batch
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rows)/float64(n), "ns/tree")
		})
	}
}
