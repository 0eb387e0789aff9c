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
		if med, scale := robustSpread(labels); scale > 0 {
			lo, hi := med-cfg.TreeLabelClip*scale, med+cfg.TreeLabelClip*scale
			for i, l := range labels {
				labels[i] = math.Min(math.Max(l, lo), hi)
			}
		}
	}
	var trees *model.Trees
	var err error
	if cfg.Kind == model.KindResidual {
		w, base := relativeErrorWeights(labels)
		trees, err = cfg.XGBoost.TrainWeighted(ctx, train.X, labels, w, base, cfg.Params)
	} else {
		trees, err = cfg.XGBoost.Train(ctx, train.X, labels, mean(labels), cfg.Params)
	}
	if err != nil {
		return fmt.Errorf("fit trees: %w", err)
	}
	m.Kind = cfg.Kind
	m.Trees = trees
	return nil
}

// relativeErrorWeights returns the weights the trees on the line's log
// residuals l_i = log(actual / line) are fitted with, exp(−l_i) scaled to a
// mean of 1, and the weighted mean of the labels to boost from. Squared
// error on l makes a leaf the mean of its rows' residuals: the geometric
// mean of actual / line. The factor with the least relative error, the
// served objective, is lower where the rows spread widely: under a
// log-normal spread σ² about μ it is exp(μ − σ²) (the 1/actual-weighted
// median), and the weights exp(−l), relative error's 1/actual read against
// the line, tilt each leaf's mean from μ to exactly μ − σ². Where rows
// agree (σ of 0.1) that is 1% and the shift takes it; where they do not
// (short prompts beside a long one in flight on a loaded pod, whose TTFT
// spans a factor of 20 at one row's columns) the plain mean stands far
// above it (docs/ACCURACY.md, Loaded pods). The labels are clipped
// (Options.TreeLabelClip) before, which bounds the weights.
func relativeErrorWeights(labels []float64) (w []float64, base float64) {
	m := mean(labels)
	w = make([]float64, len(labels))
	var sum float64
	for i, l := range labels {
		// Centred on the mean so that exp neither overflows nor underflows.
		w[i] = math.Exp(-(l - m))
		sum += w[i]
	}
	for i := range w {
		w[i] *= float64(len(w)) / sum
		base += w[i] * labels[i]
	}
	return w, base / float64(len(w))
}

func mean(v []float64) float64 {
	var sum float64
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}
