// Package modeltest builds models for tests and benchmarks of the packages
// that serve them, as net/http/httptest does for handlers.
package modeltest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
)

// CompleteTrees returns numTrees complete trees of the given depth over the
// schema's features, decoded from the bundle encoding. Every walk goes to the
// full depth, the slowest case for a model of that depth, and each split's
// threshold is the feature's value in a random one of rows, so walks branch
// as unpredictably as on real data. Leaves are small, as log-space residual
// trees' are.
func CompleteTrees(r *rand.Rand, s features.Schema, rows []features.Row, numTrees, depth int) (*model.Trees, error) {
	if len(rows) == 0 || depth < 0 || numTrees < 1 {
		return nil, fmt.Errorf("complete trees: %d rows, %d trees of depth %d", len(rows), numTrees, depth)
	}
	type treesJSON struct {
		BaseScore   float32   `json:"base_score"`
		NumFeature  int       `json:"num_feature"`
		TreeSizes   []int     `json:"tree_sizes"`
		Left        []int     `json:"left"`
		Feature     []int     `json:"feature"`
		Value       []float32 `json:"value"`
		DefaultLeft []int     `json:"default_left"`
	}
	nodes, internal := 1<<(depth+1)-1, 1<<depth-1
	enc := treesJSON{NumFeature: s.Len()}
	var x []float64
	for range numTrees {
		enc.TreeSizes = append(enc.TreeSizes, nodes)
		for k := range nodes {
			if k >= internal {
				enc.Left, enc.Feature = append(enc.Left, -1), append(enc.Feature, 0)
				enc.Value, enc.DefaultLeft = append(enc.Value, float32(r.NormFloat64()*0.01)), append(enc.DefaultLeft, 0)
				continue
			}
			f := r.IntN(s.Len())
			x = s.Build(&rows[r.IntN(len(rows))], x[:0])
			// Heap order: the right child is left+1.
			enc.Left, enc.Feature = append(enc.Left, 2*k+1), append(enc.Feature, f)
			enc.Value, enc.DefaultLeft = append(enc.Value, float32(x[f])), append(enc.DefaultLeft, 1)
		}
	}
	data, err := json.Marshal(enc)
	if err != nil {
		return nil, fmt.Errorf("complete trees: %w", err)
	}
	t := new(model.Trees)
	if err := t.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("complete trees: %w", err)
	}
	return t, nil
}
