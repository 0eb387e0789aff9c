package xgboost

import (
	"fmt"
	"math"

	"github.com/headroomhq/headroom/model"
)

// Params are the boosting parameters of one training run, in
// XGBoost's terms.
type Params struct {
	Rounds          int     // boosting rounds (num_round), one tree each
	MaxDepth        int     // max_depth
	Eta             float64 // learning rate
	Subsample       float64 // fraction of rows sampled per tree
	ColsampleBytree float64 // fraction of columns sampled per tree
	MinChildWeight  float64 // min_child_weight
	Gamma           float64 // min_split_loss
	Lambda          float64 // L2 regularisation (reg_lambda)
	Alpha           float64 // L1 regularisation (reg_alpha)
	Seed            int64   // random seed, for reproducible sampling
}

// DefaultParams returns the parameters the trainer starts from,
// each measured with headroom eval (docs/ACCURACY.md). Depth 3 rather than
// 4: the trees correct a line in log space, and deeper ones fitted more of
// the noise on both targets, in random splits and in prequential replay.
func DefaultParams() Params {
	return Params{
		Rounds:          200,
		MaxDepth:        3,
		Eta:             0.05,
		Subsample:       0.8,
		ColsampleBytree: 0.8,
		MinChildWeight:  5,
		Gamma:           0,
		Lambda:          30,
		Alpha:           0.01,
	}
}

// Validate reports the first parameter XGBoost would refuse or that would
// produce a model package model refuses.
func (p Params) Validate() error {
	if p.Rounds < 1 {
		return fmt.Errorf("xgboost params: rounds %d, want at least 1", p.Rounds)
	}
	if p.MaxDepth < 1 || p.MaxDepth > model.MaxTreeDepth {
		return fmt.Errorf("xgboost params: max depth %d out of range [1, %d]", p.MaxDepth, model.MaxTreeDepth)
	}
	for _, r := range [...]struct {
		name    string
		v       float64
		min     float64
		minOpen bool // v must exceed min
		max     float64
	}{
		{"eta", p.Eta, 0, true, 1},
		{"subsample", p.Subsample, 0, true, 1},
		{"colsample_bytree", p.ColsampleBytree, 0, true, 1},
		{"min_child_weight", p.MinChildWeight, 0, false, math.MaxFloat32},
		{"gamma", p.Gamma, 0, false, math.MaxFloat32},
		{"lambda", p.Lambda, 0, false, math.MaxFloat32},
		{"alpha", p.Alpha, 0, false, math.MaxFloat32},
	} {
		low := r.v < r.min || (r.minOpen && r.v == r.min)
		if math.IsNaN(r.v) || low || r.v > r.max {
			lb := "["
			if r.minOpen {
				lb = "("
			}
			return fmt.Errorf("xgboost params: %s %v out of range %s%v, %v]", r.name, r.v, lb, r.min, r.max)
		}
	}
	return nil
}
