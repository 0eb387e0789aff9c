package fit

import (
	"context"
	"fmt"
	"math"

	"github.com/headroomhq/headroom/model"
)

// fitTrees trains the tree part and switches m to cfg.Kind on success.
func fitTrees(ctx context.Context, m *model.TargetModel, cfg Options, train Dataset) error {
	labels := make([]float64, len(train.Y))
	for i, y := range train.Y {
		switch cfg.Kind {
		case model.KindResidual:
			labels[i] = math.Log(y / math.Max(m.Linear.Predict(train.X[i]), m.BaseFloorMs))
		default:
			labels[i] = math.Log(y)
		}
	}
	// Only residuals of the line are clipped: log milliseconds themselves
	// have legitimate tails (long prompts) that clipping would cut off.
	if cfg.TreeLabelClip > 0 && cfg.Kind == model.KindResidual {
		med := Median(labels)
		dev := make([]float64, len(labels))
		for i, l := range labels {
			dev[i] = math.Abs(l - med)
		}
		if scale := 1.4826 * Median(dev); scale > 0 {
			lo, hi := med-cfg.TreeLabelClip*scale, med+cfg.TreeLabelClip*scale
			for i, l := range labels {
				labels[i] = math.Min(math.Max(l, lo), hi)
			}
		}
	}
	var mean float64
	for _, l := range labels {
		mean += l
	}
	mean /= float64(len(labels))
	trees, err := cfg.XGBoost.Train(ctx, train.X, labels, mean, cfg.Params)
	if err != nil {
		return fmt.Errorf("fit trees: %w", err)
	}
	m.Kind = cfg.Kind
	m.Trees = trees
	return nil
}
