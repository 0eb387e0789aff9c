package fit

import (
	"context"
	"fmt"
	"math"

	"github.com/headroomhq/headroom/model"
)

// calibrate summarises the residuals quantiles come from, preferring the
// ones most like the errors the model will make in service: those of earlier
// models on samples that arrived after they were trained (forward in time,
// as the model will be used). Without enough of those, this model's
// residuals on the holdout, pooled, when the holdout is small, with the
// cross-fitted residuals of the training rows (crossFitted): a small
// holdout is one fixed set whose sampling error no retrain averages out
// (Options.MinCalibrationRows), and the cross-fit adds every training
// row's out-of-fold error. In-sample residuals would make every interval
// too narrow.
func calibrate(m *model.TargetModel, holdout Dataset, crossFitted []float64, opts Options, in Inputs) (model.Calibration, error) {
	if forwardEnough(opts, in) {
		return model.NewCalibration(CalibrationForward, forwardResiduals(m, in.Forward))
	}
	if len(crossFitted) == 0 {
		return model.NewCalibration(CalibrationHoldout, logResiduals(m, holdout))
	}
	r := append(logResiduals(m, holdout), crossFitted...)
	return model.NewCalibration(pooledSource(len(holdout.Y)), r)
}

// Calibration sources (model.Calibration.Source).
const (
	CalibrationForward         = "forward"
	CalibrationHoldout         = "holdout"
	CalibrationCrossFit        = "cross-fit"
	CalibrationHoldoutCrossFit = "holdout+cross-fit"
)

func pooledSource(holdoutRows int) string {
	if holdoutRows == 0 {
		return CalibrationCrossFit
	}
	return CalibrationHoldoutCrossFit
}

// holdoutCoverage measures how often holdout rows fall at or below the
// model's q quantile. When the calibration came partly from the holdout
// itself, the answer would be near q by construction, so it is cross-fitted
// instead: calibrated on every other holdout row (and the cross-fitted
// training residuals, as the model's own calibration is), measured on the
// rest, and the other way round. Nil without holdout rows.
func holdoutCoverage(m *model.TargetModel, holdout Dataset, crossFitted []float64, q float64) (*model.QuantileCoverage, error) {
	n := len(holdout.Y)
	if n == 0 {
		return nil, nil
	}
	central := make([]float64, n)
	for i, x := range holdout.X {
		central[i] = m.Predict(x)
	}
	hit := 0
	if (m.Calibration.Source != CalibrationHoldout && m.Calibration.Source != CalibrationHoldoutCrossFit) || n < 2 {
		for i, y := range holdout.Y {
			if y <= m.Quantile(holdout.X[i], central[i], q) {
				hit++
			}
		}
		return &model.QuantileCoverage{Quantile: q, Percent: 100 * float64(hit) / float64(n), Rows: n}, nil
	}
	resid := logResiduals(m, holdout)
	for half := range 2 {
		cal := append([]float64(nil), crossFitted...)
		for i, r := range resid {
			if i%2 != half {
				cal = append(cal, r)
			}
		}
		c, err := model.NewCalibration(m.Calibration.Source, cal)
		if err != nil {
			return nil, err
		}
		c.Adjustment, c.OutOfRange = m.Calibration.Adjustment, m.Calibration.OutOfRange
		for i := half; i < n; i += 2 {
			p := m.Place(holdout.X[i])
			rc, level := c.ServedAt(q, p.OutOfRange)
			if resid[i] <= m.Support.LogResidual(rc, level, p.Reach) {
				hit++
			}
		}
	}
	return &model.QuantileCoverage{Quantile: q, Percent: 100 * float64(hit) / float64(n), Rows: n}, nil
}

// crossFitResiduals returns log(actual / predicted) of each training row as
// predicted by a model fitted without the row's fold, the way m was fitted:
// the line, the trees when m has them, and the shift on the fold's own
// training part; the tree weight is m's. Rows go to fold i % folds. With
// fewer rows than folds each row is its own fold; a single row has nothing
// to hold out, and its residual is taken as 0.
func crossFitResiduals(ctx context.Context, m *model.TargetModel, cfg Options, train Dataset) ([]float64, error) {
	n := len(train.Y)
	folds := cfg.CrossFitFolds
	if folds < 2 {
		folds = 5
	}
	folds = min(folds, n)
	if folds < 2 {
		return []float64{0}, nil
	}
	out := make([]float64, 0, n)
	for f := range folds {
		var in, held Dataset
		for i := range train.Y {
			if i%folds == f {
				held.X, held.Y = append(held.X, train.X[i]), append(held.Y, train.Y[i])
			} else {
				in.X, in.Y = append(in.X, train.X[i]), append(in.Y, train.Y[i])
			}
		}
		fm, err := fitFold(ctx, m, cfg, in)
		if err != nil {
			return nil, fmt.Errorf("cross-fit fold %d: %w", f, err)
		}
		var shift float64
		if !cfg.NoShift {
			shift = shrunkShift(logResiduals(fm, in))
		}
		for i, x := range held.X {
			base, treeLog := fm.Parts(x)
			out = append(out, math.Log(held.Y[i]/fm.Combine(base, treeLog, 1-m.TreeShrink, shift)))
		}
	}
	return out, nil
}

// fitFold fits a model of m's kind on one fold's training part, with m's
// columns, clamps and floor.
func fitFold(ctx context.Context, m *model.TargetModel, cfg Options, in Dataset) (*model.TargetModel, error) {
	lin, err := fitLine(in, cfg.Line, m.BaseFloorMs)
	if err != nil {
		return nil, err
	}
	fm := &model.TargetModel{Kind: model.KindLinear, Columns: m.Columns, Linear: lin, Ranges: m.Ranges,
		BaseFloorMs: m.BaseFloorMs, MinMs: m.MinMs, MaxMs: m.MaxMs}
	if m.Kind != model.KindLinear {
		c := cfg
		c.Kind = m.Kind
		if err := fitTrees(ctx, fm, c, in); err != nil {
			return nil, err
		}
	}
	if err := fm.Prepare(); err != nil {
		return nil, err
	}
	return fm, nil
}
