// Package model holds the learned models a bundle carries and evaluates them.
package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// MaxTreeDepth is the deepest tree a Trees accepts (root at depth 0). It is
// far above any depth worth training, and it bounds the work of one tree
// walk, the recursion of Dump and the nesting of the dump's JSON (decoders
// such as Go's encoding/json refuse very deep nesting).
const MaxTreeDepth = 64

// Trees is an XGBoost regression ensemble (objective reg:squarederror, one
// output group, one tree per round), evaluated exactly as XGBoost 1.7's CPU
// predictor does.
//
// The nodes of all trees live in one flat slice; tree i's nodes are
// [roots[i], roots[i+1]), numbered within the tree as XGBoost numbers
// them. Construction validates every tree (see appendTree), so Predict never
// leaves the slice, never loops and never meets a non-finite threshold. A
// Trees is immutable and safe for concurrent use. The zero Trees is not a
// model; get one from ParseXGBoostJSON or UnmarshalJSON.
type Trees struct {
	baseScore  float32
	numFeature int
	maxDepth   int
	roots      []uint32 // absolute index of each tree's root node
	depths     []uint8  // depth of each tree's deepest leaf (≤ MaxTreeDepth)

	// nodes holds every node of every tree; defaultLeft[n] says whether
	// node n sends missing (NaN) values left (false for a leaf), apart
	// because only the walk that meets a NaN reads it.
	nodes       []treeNode
	defaultLeft []bool

	// gain[f] is the loss reduction summed over every split on feature f
	// (XGBoost's "total_gain" importance); nil when the source did not say.
	// It explains the model and plays no part in a prediction.
	gain []float64
}

// treeNode is one node, the fields a step reads side by side.
//
// A split's left child is right−1: XGBoost allocates children in pairs and
// its predictor computes the right child as left+1, so a model where that
// does not hold is refused rather than evaluated differently from XGBoost.
// A step goes to right−1 if x[feature] < cond, to right otherwise.
//
// A leaf is a node that a step does not leave: its cond is −∞, which no
// value lies below, and its right is its own index. A walk can then take
// a fixed number of steps, the depth of the deepest tree it walks, with no
// test for having arrived; a leaf's feature is 0, so the step's read stays
// in range.
type treeNode struct {
	right   uint32  // a split's right child (absolute index); a leaf's own index
	feature uint32  // split feature; 0 for a leaf
	cond    float32 // split condition; −∞ for a leaf
	leaf    float32 // a leaf's value; 0 for a split
}

// isLeaf reports whether n is a leaf: split conditions are finite, a
// leaf's is −∞.
func (n *treeNode) isLeaf() bool { return n.cond < -math.MaxFloat32 }

// Gain returns the loss reduction of the splits on each feature, summed over
// the ensemble (XGBoost's total gain), or nil when the model file did not
// record it.
func (t *Trees) Gain() []float64 { return slices.Clone(t.gain) }

// NumTrees returns the number of trees in the ensemble.
func (t *Trees) NumTrees() int { return len(t.roots) }

// NumFeatures returns the number of features the model was trained on;
// Predict reads x[0:NumFeatures()].
func (t *Trees) NumFeatures() int { return t.numFeature }

// MaxDepth returns the depth of the deepest leaf of any tree (a tree that is
// a single leaf has depth 0).
func (t *Trees) MaxDepth() int { return t.maxDepth }

// BaseScore returns the value every prediction starts from.
func (t *Trees) BaseScore() float32 { return t.baseScore }

// Predict returns the model's prediction for the feature vector x, equal bit
// for bit to XGBoost's: each feature is rounded to float32; at a split the
// walk goes left iff float32(x[f]) < condition, and a NaN feature goes the
// node's default way; leaf values are summed in float32, in tree order,
// starting from the float32 base score (XGBoost fills its float prediction
// buffer with base_score and adds each tree's leaf to it). x must have at
// least NumFeatures() entries. Predict does not allocate.
func (t *Trees) Predict(x []float64) float64 {
	if len(x) < t.numFeature {
		panic("model: Predict: feature vector shorter than the model's feature count")
	}
	// A missing (NaN) feature is rare in service (features come from
	// validated, finite fields), and the walk that need not test for one
	// is several times faster; a NaN anywhere takes the walk that does.
	for _, v := range x[:t.numFeature] {
		if v != v {
			return t.predictMissing(x)
		}
	}
	return t.predictFinite(x)
}

// PredictRows sets out[r] to Predict(x[r*width:(r+1)*width]), bit for bit,
// for every row r of the row-major matrix x: width must be at least
// NumFeatures() and x at least len(out) rows long. It walks a block of
// rows over each group of trees before the next group, which keeps the
// group's nodes in the nearest cache for every row of the block: a fifth
// faster a row than Predict of one row after another
// (BenchmarkTreesPredictRows). PredictRows does not allocate.
func (t *Trees) PredictRows(x []float64, width int, out []float64) {
	if width < t.numFeature || len(x) < len(out)*width {
		panic("model: PredictRows: rows narrower than the model's feature count, or fewer than out")
	}
	if t.numFeature > maxFastFeatures {
		for r := range out {
			out[r] = t.predictMissing(x[r*width : (r+1)*width])
		}
		return
	}
	var xs [rowBlock][maxFastFeatures]float32
	var sums [rowBlock]float32
	for lo := 0; lo < len(out); lo += rowBlock {
		n := min(rowBlock, len(out)-lo)
		for r := range n {
			roundFeatures(&xs[r], x[(lo+r)*width:(lo+r)*width+t.numFeature])
			sums[r] = t.baseScore
		}
		t.walkFinite(xs[:n], sums[:n])
		for r := range n {
			row := x[(lo+r)*width : (lo+r+1)*width]
			out[lo+r] = float64(sums[r])
			if slices.ContainsFunc(row[:t.numFeature], math.IsNaN) {
				out[lo+r] = t.predictMissing(row) // rare; the block's walk of it is discarded
			}
		}
	}
}

// rowBlock is how many rows PredictRows walks over a group of trees
// together: sixteen groups of eight trees of depth 6 fill a core's L1.
const rowBlock = 16

// predictFinite is Predict for x without NaN: walkFinite for one row.
func (t *Trees) predictFinite(x []float64) float64 {
	if t.numFeature > maxFastFeatures {
		return t.predictMissing(x) // its test for a NaN never fires
	}
	var xs [1][maxFastFeatures]float32
	roundFeatures(&xs[0], x[:t.numFeature])
	sums := [1]float32{t.baseScore}
	t.walkFinite(xs[:], sums[:])
	return float64(sums[0])
}

// roundFeatures rounds each feature to float32 once, not at every split
// that reads it; the mask in stepFinite keeps every read inside xs without
// a bounds check (feature < numFeature ≤ maxFastFeatures).
func roundFeatures(xs *[maxFastFeatures]float32, x []float64) {
	for j, v := range x {
		xs[j] = float32(v)
	}
}

// walkFinite adds to sums[r] the leaf row xs[r] reaches in each tree, in
// tree order, for rows without NaN: predictMissing's walk, without its
// missing-value test, for several trees and rows at once.
//
// A walk is a chain of dependent loads, so the CPU idles on each one.
// Walking eight trees side by side gives it eight independent chains:
// about 2.5 times faster than one at a time, and a fifth faster than four
// (BenchmarkTreesPredict). Each group of eight takes as many steps as its
// deepest tree is deep; a tree that reaches its leaf first stays there (a
// step does not leave a leaf), and leaving out the test for every tree
// having arrived saves a fifth of the walk. Each group is walked for
// every row before the next group.
func (t *Trees) walkFinite(xs [][maxFastFeatures]float32, sums []float32) {
	nodes := t.nodes
	roots, depths := t.roots, t.depths[:len(t.roots)]
	sums = sums[:len(xs)]
	i := 0
	for ; i+8 <= len(roots); i += 8 {
		depth := groupDepth(depths[i : i+8])
		for r := range xs {
			x := &xs[r]
			a, b, c, d := roots[i], roots[i+1], roots[i+2], roots[i+3]
			e, f, g, h := roots[i+4], roots[i+5], roots[i+6], roots[i+7]
			for range depth {
				a = stepFinite(&nodes[a], x)
				b = stepFinite(&nodes[b], x)
				c = stepFinite(&nodes[c], x)
				d = stepFinite(&nodes[d], x)
				e = stepFinite(&nodes[e], x)
				f = stepFinite(&nodes[f], x)
				g = stepFinite(&nodes[g], x)
				h = stepFinite(&nodes[h], x)
			}
			sum := sums[r]
			sum += nodes[a].leaf
			sum += nodes[b].leaf
			sum += nodes[c].leaf
			sum += nodes[d].leaf
			sum += nodes[e].leaf
			sum += nodes[f].leaf
			sum += nodes[g].leaf
			sum += nodes[h].leaf
			sums[r] = sum
		}
	}
	for ; i < len(roots); i++ {
		for r := range xs {
			n := roots[i]
			for range depths[i] {
				n = stepFinite(&nodes[n], &xs[r])
			}
			sums[r] += nodes[n].leaf
		}
	}
}

// predictMissing is Predict for x with a NaN, or for a model wider than
// walkFinite takes: each tree walked on its own, each step testing for a
// missing value. Rows' features are never NaN (features.Schema.Build), so
// this walk is for XGBoost's semantics on any input, not for speed.
func (t *Trees) predictMissing(x []float64) float64 {
	sum := t.baseScore
	for i, n := range t.roots {
		for range t.depths[i] {
			n = step(t.nodes, t.defaultLeft, x, n)
		}
		sum += t.nodes[n].leaf
	}
	return float64(sum)
}

// groupDepth is the depth of the deepest of eight trees.
func groupDepth(d []uint8) uint8 {
	return max(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7])
}

// maxFastFeatures is the most features predictFinite's walk takes (a power
// of two: it masks feature indexes); models are far narrower.
const maxFastFeatures = 64

// stepFinite returns the node after nd: its left child if the row's
// feature lies below the condition, else its right, and nd's own index if
// it is a leaf (treeNode). Which way a row goes is a coin toss to the
// branch predictor, so the choice is made without jumps (the compiler
// emits SETcc).
func stepFinite(nd *treeNode, xs *[maxFastFeatures]float32) uint32 {
	var left uint32
	if xs[nd.feature&(maxFastFeatures-1)] < nd.cond {
		left = 1
	}
	return nd.right - left
}

// step is stepFinite for node n where x[feature] may be NaN, which XGBoost
// treats as missing: it goes the node's default way (a leaf's is right, so
// that it stays). NaN is rare, so its test may branch.
func step(nodes []treeNode, defaultLeft []bool, x []float64, n uint32) uint32 {
	nd := &nodes[n]
	v := float32(x[nd.feature])
	var left uint32
	if v < nd.cond || v != v && defaultLeft[n] {
		left = 1
	}
	return nd.right - left
}

// xgbModel is the part of XGBoost 1.7's JSON model file that matters here.
// Fields it does not name are ignored.
type xgbModel struct {
	Learner struct {
		LearnerModelParam struct {
			BaseScore  string `json:"base_score"`
			NumClass   string `json:"num_class"`
			NumFeature string `json:"num_feature"`
			NumTarget  string `json:"num_target"`
		} `json:"learner_model_param"`
		Objective struct {
			Name string `json:"name"`
		} `json:"objective"`
		GradientBooster struct {
			Name  string `json:"name"`
			Model struct {
				Param struct {
					NumParallelTree string `json:"num_parallel_tree"`
					NumTrees        string `json:"num_trees"`
					SizeLeafVector  string `json:"size_leaf_vector"`
				} `json:"gbtree_model_param"`
				TreeInfo []int64   `json:"tree_info"`
				Trees    []xgbTree `json:"trees"`
			} `json:"model"`
		} `json:"gradient_booster"`
	} `json:"learner"`
}

type xgbTree struct {
	ID                 int64     `json:"id"`
	LeftChildren       []int64   `json:"left_children"`
	RightChildren      []int64   `json:"right_children"`
	SplitIndices       []int64   `json:"split_indices"`
	SplitConditions    []float32 `json:"split_conditions"`
	DefaultLeft        []int64   `json:"default_left"`
	SplitType          []int64   `json:"split_type"`
	Categories         []int64   `json:"categories"`
	CategoriesNodes    []int64   `json:"categories_nodes"`
	CategoriesSegments []int64   `json:"categories_segments"`
	CategoriesSizes    []int64   `json:"categories_sizes"`
	LossChanges        []float64 `json:"loss_changes"`
	TreeParam          struct {
		NumNodes       string `json:"num_nodes"`
		SizeLeafVector string `json:"size_leaf_vector"`
	} `json:"tree_param"`
}

// ParseXGBoostJSON reads a model file written by XGBoost 1.7 (model_out=….json
// or save_model("….json")). It accepts only what Predict evaluates exactly: a
// gbtree booster with objective reg:squarederror, one output group, one tree
// per round, numerical splits, and well-formed trees.
func ParseXGBoostJSON(data []byte) (*Trees, error) {
	var m xgbModel
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("parse xgboost model: %w", err)
	}
	l := &m.Learner
	if name := l.Objective.Name; name != "reg:squarederror" {
		return nil, fmt.Errorf("parse xgboost model: objective %q, want reg:squarederror", name)
	}
	if name := l.GradientBooster.Name; name != "gbtree" {
		return nil, fmt.Errorf("parse xgboost model: booster %q, want gbtree", name)
	}
	p := &l.LearnerModelParam
	if n, err := intParam(p.NumClass, "0"); err != nil || n < 0 || n > 1 {
		return nil, fmt.Errorf("parse xgboost model: num_class %q: want one output group", p.NumClass)
	}
	if n, err := intParam(p.NumTarget, "1"); err != nil || n != 1 {
		return nil, fmt.Errorf("parse xgboost model: num_target %q: want one target", p.NumTarget)
	}
	numFeature, err := intParam(p.NumFeature, "")
	if err != nil {
		return nil, fmt.Errorf("parse xgboost model: num_feature: %w", err)
	}
	base, err := strconv.ParseFloat(p.BaseScore, 32)
	if err != nil {
		return nil, fmt.Errorf("parse xgboost model: base_score %q: %w", p.BaseScore, err)
	}
	gb := &l.GradientBooster.Model
	if n, err := intParam(gb.Param.NumParallelTree, "1"); err != nil || n != 1 {
		return nil, fmt.Errorf("parse xgboost model: num_parallel_tree %q: want 1", gb.Param.NumParallelTree)
	}
	if n, err := intParam(gb.Param.SizeLeafVector, "0"); err != nil || n != 0 {
		return nil, fmt.Errorf("parse xgboost model: size_leaf_vector %q: vector leaves are not supported", gb.Param.SizeLeafVector)
	}
	if n, err := intParam(gb.Param.NumTrees, ""); err != nil || n != int64(len(gb.Trees)) {
		return nil, fmt.Errorf("parse xgboost model: num_trees %q but %d trees", gb.Param.NumTrees, len(gb.Trees))
	}
	if len(gb.TreeInfo) != len(gb.Trees) {
		return nil, fmt.Errorf("parse xgboost model: tree_info has %d entries for %d trees", len(gb.TreeInfo), len(gb.Trees))
	}
	for i, g := range gb.TreeInfo {
		if g != 0 {
			return nil, fmt.Errorf("parse xgboost model: tree %d belongs to output group %d: want one group", i, g)
		}
	}
	t, err := newTrees(float32(base), numFeature, len(gb.Trees))
	if err != nil {
		return nil, fmt.Errorf("parse xgboost model: %w", err)
	}
	gain := make([]float64, t.numFeature)
	for i := range gb.Trees {
		// XGBoost places each tree by its id, not by its position in the
		// array, and sums trees in that order; a file whose ids are not the
		// positions would be summed differently or crash XGBoost.
		if id := gb.Trees[i].ID; id != int64(i) {
			return nil, fmt.Errorf("parse xgboost model: tree %d has id %d", i, id)
		}
		base := len(t.nodes)
		if err := t.appendXGBTree(&gb.Trees[i]); err != nil {
			return nil, fmt.Errorf("parse xgboost model: tree %d: %w", i, err)
		}
		// Gain of the splits the root reaches (appendTree turned the
		// others into leaves).
		changes := gb.Trees[i].LossChanges
		if gain != nil && len(changes) != len(t.nodes)-base {
			gain = nil // not recorded: say nothing rather than part of it
		}
		for j := base; gain != nil && j < len(t.nodes); j++ {
			if c := changes[j-base]; !t.nodes[j].isLeaf() && !math.IsNaN(c) && !math.IsInf(c, 0) {
				gain[t.nodes[j].feature] += c
			}
		}
	}
	t.gain = gain
	return t, nil
}

// intParam parses one of the decimal strings XGBoost writes its parameters
// as. An absent parameter (older writers) takes the value def; def "" makes
// it required.
func intParam(s, def string) (int64, error) {
	if s == "" {
		if def == "" {
			return 0, errors.New("missing")
		}
		s = def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", s)
	}
	return n, nil
}

// newTrees starts an empty ensemble and checks the model-wide values.
func newTrees(baseScore float32, numFeature int64, numTrees int) (*Trees, error) {
	if !finite32(baseScore) {
		return nil, fmt.Errorf("base score %v is not finite", baseScore)
	}
	if numFeature < 1 || numFeature > math.MaxInt32 {
		return nil, fmt.Errorf("num_feature %d out of range [1, %d]", numFeature, math.MaxInt32)
	}
	if numTrees < 1 {
		return nil, errors.New("model has no trees")
	}
	return &Trees{baseScore: baseScore, numFeature: int(numFeature), roots: make([]uint32, 0, numTrees)}, nil
}

func (t *Trees) appendXGBTree(x *xgbTree) error {
	n := len(x.LeftChildren)
	if nn, err := intParam(x.TreeParam.NumNodes, ""); err != nil || nn != int64(n) {
		return fmt.Errorf("num_nodes %q but %d nodes", x.TreeParam.NumNodes, n)
	}
	if s, err := intParam(x.TreeParam.SizeLeafVector, "0"); err != nil || s != 0 {
		return fmt.Errorf("size_leaf_vector %q: vector leaves are not supported", x.TreeParam.SizeLeafVector)
	}
	for _, a := range [...]struct {
		name string
		len  int
	}{
		{"right_children", len(x.RightChildren)},
		{"split_indices", len(x.SplitIndices)},
		{"split_conditions", len(x.SplitConditions)},
		{"default_left", len(x.DefaultLeft)},
	} {
		if a.len != n {
			return fmt.Errorf("%s has %d entries for %d nodes", a.name, a.len, n)
		}
	}
	// split_type may be absent in files from before categorical support;
	// present, it must say "numerical" everywhere.
	if len(x.SplitType) != 0 && len(x.SplitType) != n {
		return fmt.Errorf("split_type has %d entries for %d nodes", len(x.SplitType), n)
	}
	for i, st := range x.SplitType {
		if st != 0 {
			return fmt.Errorf("node %d: categorical split (split_type %d) is not supported", i, st)
		}
	}
	if len(x.Categories)+len(x.CategoriesNodes)+len(x.CategoriesSegments)+len(x.CategoriesSizes) != 0 {
		return errors.New("categorical splits are not supported")
	}
	tr := rawTree{
		left:        x.LeftChildren,
		right:       x.RightChildren,
		feature:     x.SplitIndices,
		value:       x.SplitConditions,
		defaultLeft: x.DefaultLeft,
	}
	return t.appendTree(&tr)
}

// rawTree is one tree as read from a file, with node ids local to the tree
// and nothing checked yet. right is nil when the source stores only left
// children (the bundle encoding), meaning right = left+1.
type rawTree struct {
	left, right []int64
	feature     []int64
	value       []float32
	defaultLeft []int64
}

// appendTree validates one tree and appends it to t. Every node reachable
// from the root must be a leaf (left = right = -1, finite value) or a split
// on a feature below numFeature with a finite condition, a 0/1 default
// direction and children left, left+1 inside the tree; no node may be
// reached twice (which rules out cycles and shared subtrees) and no leaf may
// lie deeper than MaxTreeDepth. Nodes the root cannot reach (XGBoost leaves
// pruned nodes in place) are stored as zero leaves so that node ids still
// match XGBoost's, and are never evaluated.
func (t *Trees) appendTree(tr *rawTree) error {
	n := len(tr.left)
	if n < 1 {
		return errors.New("tree has no nodes")
	}
	if int64(len(t.nodes))+int64(n) > math.MaxInt32 {
		return errors.New("too many nodes")
	}
	base := uint32(len(t.nodes))
	reached := make([]bool, n)
	depth := make([]int, n)
	stack := []int{0}
	reached[0] = true
	maxDepth := 0
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		l := tr.left[i]
		r := l + 1
		if tr.right != nil {
			r = tr.right[i]
		}
		v := tr.value[i]
		if !finite32(v) {
			return fmt.Errorf("node %d: value %v is not finite", i, v)
		}
		if l == -1 {
			if r != -1 && tr.right != nil {
				return fmt.Errorf("node %d: leaf with right child %d", i, r)
			}
			maxDepth = max(maxDepth, depth[i])
			continue
		}
		if l < 0 || l >= int64(n) || r != l+1 || r >= int64(n) {
			return fmt.Errorf("node %d: children %d, %d: want k, k+1 with 0 < k < %d", i, l, r, n-1)
		}
		if f := tr.feature[i]; f < 0 || f >= int64(t.numFeature) {
			return fmt.Errorf("node %d: split feature %d out of range [0, %d)", i, f, t.numFeature)
		}
		if d := tr.defaultLeft[i]; d != 0 && d != 1 {
			return fmt.Errorf("node %d: default_left %d is not 0 or 1", i, d)
		}
		if depth[i] >= MaxTreeDepth {
			return fmt.Errorf("node %d: tree deeper than %d", i, MaxTreeDepth)
		}
		for _, c := range [2]int64{l, r} {
			if reached[c] {
				return fmt.Errorf("node %d: child %d is reached twice (cycle or shared node)", i, c)
			}
			reached[c] = true
			depth[c] = depth[i] + 1
			stack = append(stack, int(c))
		}
	}
	t.roots = append(t.roots, base)
	t.depths = append(t.depths, uint8(maxDepth))
	for i := range n {
		if !reached[i] || tr.left[i] == -1 {
			v := tr.value[i]
			if !reached[i] {
				v = 0
			}
			t.nodes = append(t.nodes, treeNode{right: base + uint32(i), cond: float32(math.Inf(-1)), leaf: v})
			t.defaultLeft = append(t.defaultLeft, false)
			continue
		}
		t.nodes = append(t.nodes, treeNode{right: base + uint32(tr.left[i]) + 1, feature: uint32(tr.feature[i]), cond: tr.value[i]})
		t.defaultLeft = append(t.defaultLeft, tr.defaultLeft[i] == 1)
	}
	t.maxDepth = max(t.maxDepth, maxDepth)
	return nil
}

func finite32(v float32) bool {
	return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0)
}

// treesJSON is the bundle encoding of Trees: the flat node arrays with node
// ids local to each tree, so an encoded tree reads like XGBoost's own. Go's
// encoding/json writes a float32 as the shortest decimal that parses back to
// the same float32, so values round-trip exactly.
type treesJSON struct {
	BaseScore   float32   `json:"base_score"`
	NumFeature  int64     `json:"num_feature"`
	TreeSizes   []int64   `json:"tree_sizes"`     // nodes per tree, in tree order
	Left        []int64   `json:"left"`           // left child within the tree; -1 for a leaf; the right child is left+1
	Feature     []int64   `json:"feature"`        // split feature; 0 for a leaf
	Value       []float32 `json:"value"`          // split condition or leaf value
	DefaultLeft []int64   `json:"default_left"`   // 1 if missing values go left
	Gain        []float64 `json:"gain,omitempty"` // total split gain per feature; absent when unknown
}

// MarshalJSON encodes the ensemble compactly for a model bundle.
func (t *Trees) MarshalJSON() ([]byte, error) {
	if len(t.roots) == 0 {
		return nil, errors.New("marshal trees: empty model")
	}
	n := len(t.nodes)
	enc := treesJSON{
		BaseScore:   t.baseScore,
		NumFeature:  int64(t.numFeature),
		TreeSizes:   make([]int64, len(t.roots)),
		Left:        make([]int64, n),
		Feature:     make([]int64, n),
		Value:       make([]float32, n),
		DefaultLeft: make([]int64, n),
		Gain:        t.gain,
	}
	for i, root := range t.roots {
		end := uint32(n)
		if i+1 < len(t.roots) {
			end = t.roots[i+1]
		}
		enc.TreeSizes[i] = int64(end - root)
		for j := root; j < end; j++ {
			nd := &t.nodes[j]
			enc.Left[j], enc.Value[j] = -1, nd.leaf
			if !nd.isLeaf() {
				enc.Left[j], enc.Value[j] = int64(nd.right-1-root), nd.cond
			}
			enc.Feature[j] = int64(nd.feature)
			if t.defaultLeft[j] {
				enc.DefaultLeft[j] = 1
			}
		}
	}
	return json.Marshal(enc)
}

// UnmarshalJSON decodes what MarshalJSON wrote, validating it exactly as
// ParseXGBoostJSON validates a model file, so a damaged or tampered bundle is
// refused rather than evaluated. On error t is unchanged.
func (t *Trees) UnmarshalJSON(data []byte) error {
	var enc treesJSON
	if err := json.Unmarshal(data, &enc); err != nil {
		return fmt.Errorf("unmarshal trees: %w", err)
	}
	nt, err := newTrees(enc.BaseScore, enc.NumFeature, len(enc.TreeSizes))
	if err != nil {
		return fmt.Errorf("unmarshal trees: %w", err)
	}
	n := len(enc.Left)
	if len(enc.Feature) != n || len(enc.Value) != n || len(enc.DefaultLeft) != n {
		return fmt.Errorf("unmarshal trees: node arrays differ in length (left %d, feature %d, value %d, default_left %d)",
			n, len(enc.Feature), len(enc.Value), len(enc.DefaultLeft))
	}
	start := 0
	for i, size := range enc.TreeSizes {
		if size < 1 || size > int64(n-start) {
			return fmt.Errorf("unmarshal trees: tree %d: size %d out of range [1, %d]", i, size, n-start)
		}
		end := start + int(size)
		tr := rawTree{
			left:        enc.Left[start:end],
			feature:     enc.Feature[start:end],
			value:       enc.Value[start:end],
			defaultLeft: enc.DefaultLeft[start:end],
		}
		if err := nt.appendTree(&tr); err != nil {
			return fmt.Errorf("unmarshal trees: tree %d: %w", i, err)
		}
		start = end
	}
	if start != n {
		return fmt.Errorf("unmarshal trees: tree sizes sum to %d but there are %d nodes", start, n)
	}
	if enc.Gain != nil {
		if len(enc.Gain) != nt.numFeature {
			return fmt.Errorf("unmarshal trees: gain has %d entries for %d features", len(enc.Gain), nt.numFeature)
		}
		for f, g := range enc.Gain {
			if math.IsNaN(g) || math.IsInf(g, 0) {
				return fmt.Errorf("unmarshal trees: gain of feature %d is not finite", f)
			}
		}
		nt.gain = enc.Gain
	}
	*t = *nt
	return nil
}
