package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/store"
)

// FitConfig says how to fit one target's model.
type FitConfig struct {
	Kind    model.Kind // composition of the model; default model.KindResidual
	XGBoost *XGBoost   // nil: linear only
	Params  XGBoostParams
	// RidgeLambda is the ridge penalty on standardised features.
	RidgeLambda float64
	// MinCalibrationRows is the number of holdout rows below which the
	// calibration falls back to in-sample residuals.
	MinCalibrationRows int
}

// DefaultFitConfig is the configuration the service runs with.
func DefaultFitConfig() FitConfig {
	return FitConfig{Kind: model.KindResidual, Params: DefaultXGBoostParams(), RidgeLambda: 1, MinCalibrationRows: 30}
}

// Dataset is the rows of one target, built with one schema.
type Dataset struct {
	X [][]float64
	Y []float64
}

// BuildDataset turns labelled samples into feature rows for target t. Samples
// without a label for t are skipped.
func BuildDataset(schema features.Schema, t features.Target, samples []store.Sample) Dataset {
	d := Dataset{X: make([][]float64, 0, len(samples)), Y: make([]float64, 0, len(samples))}
	// One backing array for every row: a full store is 20,000 rows per target.
	p := schema.Len()
	flat := make([]float64, len(samples)*p)
	for i := range samples {
		y, ok := samples[i].Label(t)
		if !ok {
			continue
		}
		row := flat[len(d.Y)*p : (len(d.Y)+1)*p : (len(d.Y)+1)*p]
		d.X = append(d.X, schema.Build(&samples[i].Row, row))
		d.Y = append(d.Y, y)
	}
	return d
}

// Fit trains a model for one target on train and measures it on holdout.
// With cfg.XGBoost nil, or when the tree fit fails, the model is linear and
// the tree error is returned beside it (the caller decides whether a linear
// model is acceptable).
func Fit(ctx context.Context, schema features.Schema, train, holdout Dataset, cfg FitConfig) (*model.TargetModel, error) {
	start := time.Now()
	if len(train.Y) == 0 {
		return nil, errors.New("no training rows")
	}
	if cfg.Kind == "" {
		cfg.Kind = model.KindResidual
	}
	m := &model.TargetModel{
		Kind:           model.KindLinear,
		Columns:        append([]string(nil), schema.Names()...),
		Ranges:         ranges(schema.Len(), train.X),
		TrainSamples:   len(train.Y),
		HoldoutSamples: len(holdout.Y),
	}
	lo, hi := minMax(train.Y)
	m.BaseFloorMs = math.Max(lo/2, 1e-3)
	m.MinMs = math.Max(lo/10, 1e-3)
	m.MaxMs = math.Max(hi*100, m.MinMs)

	// The line minimises squared relative error (weights 1/y²): routers act
	// on ratios between endpoints, and raw squared error would let a few
	// multi-second outliers set the slope for every ordinary request.
	weights := make([]float64, len(train.Y))
	for i, y := range train.Y {
		weights[i] = 1 / (y * y)
	}
	lin, err := FitRidge(train.X, train.Y, weights, cfg.RidgeLambda)
	if err != nil {
		return nil, fmt.Errorf("fit linear model: %w", err)
	}
	m.Linear = lin

	var treeErr error
	if cfg.XGBoost != nil && cfg.Kind != model.KindLinear {
		treeErr = fitTrees(ctx, m, cfg, train)
	}
	if err := m.Prepare(); err != nil {
		return nil, fmt.Errorf("fitted model is inconsistent: %w", err)
	}

	// Holdout figures and calibration.
	var predHold, linHold []float64
	for _, x := range holdout.X {
		predHold = append(predHold, m.Predict(x))
		linHold = append(linHold, m.PredictLinear(x))
	}
	m.Holdout = model.Measure(predHold, holdout.Y)
	m.HoldoutLinear = model.Measure(linHold, holdout.Y)
	calX, calY, source := holdout.X, holdout.Y, "holdout"
	if len(holdout.Y) < cfg.MinCalibrationRows {
		calX, calY, source = train.X, train.Y, "train"
	}
	resid := make([]float64, len(calY))
	for i, x := range calX {
		resid[i] = math.Log(calY[i] / m.Predict(x))
	}
	if m.Calibration, err = model.NewCalibration(source, resid); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	m.TrainedAt = time.Now().UTC()
	m.TrainSeconds = time.Since(start).Seconds()
	return m, treeErr
}

// fitTrees trains the tree part and switches m to cfg.Kind on success.
func fitTrees(ctx context.Context, m *model.TargetModel, cfg FitConfig, train Dataset) error {
	labels := make([]float64, len(train.Y))
	for i, y := range train.Y {
		switch cfg.Kind {
		case model.KindResidual:
			labels[i] = math.Log(y / math.Max(m.Linear.Predict(train.X[i]), m.BaseFloorMs))
		default:
			labels[i] = math.Log(y)
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

func ranges(p int, X [][]float64) []model.Range {
	r := make([]model.Range, p)
	for j := range r {
		r[j] = model.Range{Min: math.Inf(1), Max: math.Inf(-1)}
	}
	for _, x := range X {
		for j, v := range x {
			r[j].Min = math.Min(r[j].Min, v)
			r[j].Max = math.Max(r[j].Max, v)
		}
	}
	return r
}

func minMax(v []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		lo = math.Min(lo, x)
		hi = math.Max(hi, x)
	}
	return lo, hi
}
