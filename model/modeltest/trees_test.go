package modeltest

import (
	"math/rand/v2"
	"testing"

	"github.com/headroomhq/headroom/features"
)

func TestCompleteTrees(t *testing.T) {
	s := features.MustSchema(features.DefaultTTFTColumns...)
	rows := []features.Row{{InputTokenLength: 100, NumRequestRunning: 3}, {InputTokenLength: 900, KVCachePercentage: 0.5}}
	for _, depth := range []int{0, 3, 6} {
		tr, err := CompleteTrees(rand.New(rand.NewPCG(1, 2)), s, rows, 7, depth)
		if err != nil {
			t.Fatal(err)
		}
		if tr.NumTrees() != 7 || tr.MaxDepth() != depth || tr.NumFeatures() != s.Len() {
			t.Errorf("depth %d: %d trees of depth %d over %d features; want 7 of %d over %d",
				depth, tr.NumTrees(), tr.MaxDepth(), tr.NumFeatures(), depth, s.Len())
		}
	}
	for _, bad := range []struct {
		rows         []features.Row
		trees, depth int
	}{{nil, 1, 1}, {rows, 0, 1}, {rows, 1, -1}} {
		if _, err := CompleteTrees(rand.New(rand.NewPCG(1, 2)), s, bad.rows, bad.trees, bad.depth); err == nil {
			t.Errorf("%d rows, %d trees of depth %d: no error", len(bad.rows), bad.trees, bad.depth)
		}
	}
}
