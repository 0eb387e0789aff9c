package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// DumpNode is one node of XGBoost's JSON tree dump (xgboost task=dump
// dump_format=json, Booster.get_dump(dump_format="json")), the format llm-d's
// router fetches from GET /model/{ttft,tpot}/xgb/json. A node is a leaf iff
// Children is nil.
type DumpNode struct {
	NodeID int // the node's id within its tree, as XGBoost numbers it

	// Leaf nodes.
	Leaf float32

	// Split nodes: go to Yes (the left child) iff feature Split < SplitCondition;
	// a missing value goes to Missing.
	Depth          int
	Split          string
	SplitCondition float32
	Yes, No        int
	Missing        int
	Children       []DumpNode // [yes, no]
}

// Dump returns the trees in XGBoost's JSON dump format, one root per tree.
// Splits name their feature featureNames[f]; a feature without a name is
// named by its index, as the xgboost CLI does without a feature map. The dump
// carries no base score, like XGBoost's.
func (t *Trees) Dump(featureNames []string) []DumpNode {
	out := make([]DumpNode, len(t.roots))
	for i, root := range t.roots {
		out[i] = t.dumpNode(root, root, 0, featureNames)
	}
	return out
}

func (t *Trees) dumpNode(root, n uint32, depth int, names []string) DumpNode {
	id := int(n - root)
	nd := &t.nodes[n]
	if nd.isLeaf() {
		return DumpNode{NodeID: id, Leaf: nd.leaf, Children: nil}
	}
	f := int(nd.feature)
	name := strconv.Itoa(f)
	if f < len(names) {
		name = names[f]
	}
	l := nd.right - 1
	yes, no := int(l-root), int(l+1-root)
	missing := no
	if t.defaultLeft[n] {
		missing = yes
	}
	return DumpNode{
		NodeID:         id,
		Depth:          depth,
		Split:          name,
		SplitCondition: nd.cond,
		Yes:            yes,
		No:             no,
		Missing:        missing,
		Children: []DumpNode{
			t.dumpNode(root, l, depth+1, names),
			t.dumpNode(root, l+1, depth+1, names),
		},
	}
}

// MarshalJSON writes the node with XGBoost's keys in XGBoost's order. Numbers
// are the shortest decimals that parse back to the same float32 (XGBoost
// prints 9 significant digits; both denote the same float32).
func (n DumpNode) MarshalJSON() ([]byte, error) {
	return n.appendJSON(nil)
}

func (n *DumpNode) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"nodeid":`...)
	b = strconv.AppendInt(b, int64(n.NodeID), 10)
	if n.Children == nil {
		b = append(b, `,"leaf":`...)
		b, err := appendFloat32(b, n.Leaf)
		if err != nil {
			return nil, err
		}
		return append(b, '}'), nil
	}
	if len(n.Children) != 2 {
		return nil, errors.New("dump node: a split node needs exactly two children")
	}
	b = append(b, `,"depth":`...)
	b = strconv.AppendInt(b, int64(n.Depth), 10)
	name, err := json.Marshal(n.Split)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"split":`...)
	b = append(b, name...)
	b = append(b, `,"split_condition":`...)
	if b, err = appendFloat32(b, n.SplitCondition); err != nil {
		return nil, err
	}
	b = append(b, `,"yes":`...)
	b = strconv.AppendInt(b, int64(n.Yes), 10)
	b = append(b, `,"no":`...)
	b = strconv.AppendInt(b, int64(n.No), 10)
	b = append(b, `,"missing":`...)
	b = strconv.AppendInt(b, int64(n.Missing), 10)
	b = append(b, `,"children":[`...)
	for i := range n.Children {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = n.Children[i].appendJSON(b); err != nil {
			return nil, err
		}
	}
	return append(b, "]}"...), nil
}

// appendFloat32 writes v as a JSON number. JSON cannot spell NaN or an
// infinity; Trees never holds one, but a hand-built DumpNode might.
func appendFloat32(b []byte, v float32) ([]byte, error) {
	if !finite32(v) {
		return nil, fmt.Errorf("dump node: %v is not a JSON number", v)
	}
	return strconv.AppendFloat(b, float64(v), 'g', -1, 32), nil
}
