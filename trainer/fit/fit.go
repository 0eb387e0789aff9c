// Package fit is Headroom's fitting, pure: it turns rows into models and
// knows nothing of the store, the service or time but the clock a model
// records its training at. A target's model (Model): a robust line
// (Line), trees on its log residual through the xgboost driver, labels
// no outlier can move (labels.go), quantiles calibrated on the errors the
// model will make, bounds that widen outside the training ranges
// (support.go). The KV transfer's bandwidth law (TransferLaw). The
// candidate configurations a target chooses among and how one is chosen
// (Score, Pick). The trainer (package trainer) decides what to fit when
// and publishes the result; the lab's evaluations and the dashboard fit
// and build rows with this package alone.
//
// Options say how to fit and stay the same from one fit to the next;
// Inputs are what one fit is given besides its rows, from the service in
// its time (forward errors, quantile levels, the model in service).
package fit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/xgboost"
)

// Options say how to fit one target's model. DefaultOptions are the
// service's; every default was chosen by measurement with headroom eval
// (docs/ACCURACY.md).
type Options struct {
	Kind    model.Kind   // composition of the model; default model.KindResidual
	XGBoost *xgboost.CLI // nil: linear only
	Params  xgboost.Params
	// Line configures the linear base; its Signs are filled from the
	// schema's directions when SignConstraints is set.
	Line            LineOptions
	SignConstraints bool
	// MinTreeRows is the number of training rows below which the model is
	// linear: boosted trees on a few dozen rows fit their noise.
	MinTreeRows int
	// TreeLabelClip clips the trees' labels, log(actual / line), to their
	// median ± TreeLabelClip robust standard deviations (0: no clipping;
	// KindLogTrees is never clipped).
	// A burst of stalled requests, 50 times slower than usual for no reason
	// a feature shows, otherwise grows leaves that multiply ordinary
	// predictions by 20.
	TreeLabelClip float64
	// MinCalibrationRows is the number of held-out residuals a calibration
	// wants when forward samples are too few: with fewer holdout rows, the
	// training rows' cross-fitted residuals are pooled with them. A quantile
	// estimated from n residuals misses its coverage by about
	// 100·sqrt(q(1−q)/n) points: 4 at q = 0.5 for the 145 rows a small
	// store holds out, 1.6 for the service's full holdout of 1,000.
	MinCalibrationRows int
	// CrossFitFolds is the number of folds of that cross-fit (default 5):
	// each training row is predicted by a model fitted, exactly as this
	// one is, without the row's fold. It costs CrossFitFolds more fits, so
	// only small stores (whose holdout is not full) after a start (before
	// forward samples arrive) pay it.
	CrossFitFolds int
	// MinForwardRows is the number of forward samples (Inputs.Forward)
	// that calibrate the quantiles, correct the shift (ForwardShiftGain)
	// and, from models with trees, choose how much to trust the new
	// model's trees (model.TargetModel.TreeShrink).
	MinForwardRows int
	// ForwardShiftGain is the share of the forward samples' own
	// relative-error shift added to the model's shift (0: none). The
	// training rows' shift centres the model on the past; when latency
	// drifts (load rising through the day), earlier models' forward errors
	// say by how much that centre lags. The new model has trained on those
	// samples already, so it lags less than they did: half the correction
	// was measured best (docs/ACCURACY.md).
	ForwardShiftGain float64
	// NoShift leaves the prediction unscaled: no relative-error shift and
	// no forward correction of it (model.TargetModel.LogShift 0), and the
	// forward samples are taken without their own models' shifts. On some
	// workloads (docs/ACCURACY.md) the shift that is best on the training
	// rows is worse on the rows that follow; self-tuning chooses.
	NoShift bool
	// Support measures how much the bounds widen outside the training
	// ranges (support.go); its zero value leaves them as calibrated.
	Support SupportOptions
}

// Inputs are what one fit is given besides its rows and Options: what the
// service has seen since its earlier models, and the quantile it tracks.
type Inputs struct {
	// Quantile is the quantile whose holdout coverage the model records
	// and whose bounds the support widens (a quantile at or below the
	// median measures the widening at model.DefaultQuantile); it must be
	// strictly between 0 and 1.
	Quantile float64
	// Forward is what earlier models predicted for samples that reached the
	// store after they were trained, oldest first (Options.MinForwardRows).
	Forward []ForwardSample
	// Levels is the live tracking's correction of the levels quantiles are
	// served at (trainer.DriftConfig.CoverageGain); the model carries it in
	// its calibration. Nil serves every level as calibrated. It moves no
	// central prediction.
	Levels *model.LevelAdjustment
	// OutOfRangeLevels is the same for rows outside the training ranges
	// (trainer.DriftConfig.OutOfRangeGain), carried as the calibration's
	// OutOfRange. Nil serves them like rows in range.
	OutOfRangeLevels *model.LevelAdjustment
	// Previous is the model in service, whose measured spreads carry over
	// (Options.Support); nil measures SupportOptions.FirstFolds columns.
	Previous *model.TargetModel
	// CarryOnly keeps Previous's spreads and measures nothing when
	// Previous measured any: a first model's trees, which routers wait
	// for, carry what its line measured; so does a fit that also chose its
	// configuration, within the retrain's budget.
	CarryOnly bool
}

func (in Inputs) validate() error {
	if !(in.Quantile > 0 && in.Quantile < 1) {
		return fmt.Errorf("fit: quantile %v, want a value strictly between 0 and 1", in.Quantile)
	}
	return nil
}

// DefaultOptions are the options the service fits with.
func DefaultOptions() Options {
	return Options{
		Kind:   model.KindResidual,
		Params: xgboost.DefaultParams(),
		Line: LineOptions{
			Lambdas:          []float64{0.1, 1, 10, 100, 1000, 10000},
			Folds:            5,
			RobustIterations: 8,
			HuberK:           1,
		},
		SignConstraints:    true,
		MinTreeRows:        100,
		TreeLabelClip:      3,
		MinCalibrationRows: 1000,
		CrossFitFolds:      5,
		MinForwardRows:     50,
		ForwardShiftGain:   0.5,
		Support:            DefaultSupportOptions(),
	}
}

// ForwardSample is one sample as the model in service predicted it before
// it was trained on it: the prediction's parts (model.TargetModel.Parts,
// with the tree part 0 for models without a line to correct) and the
// actual value.
type ForwardSample struct {
	Actual, Base, TreeLog, LogShift float64
}

// Model trains a model for one target on train and measures it on
// holdout. With opts.XGBoost nil, or when the tree fit fails, the model is
// linear and the tree error is returned beside it (the caller decides
// whether a linear model is acceptable).
func Model(ctx context.Context, schema features.Schema, train, holdout Dataset, opts Options, in Inputs) (*model.TargetModel, error) {
	start := time.Now()
	if err := in.validate(); err != nil {
		return nil, err
	}
	if len(train.Y) == 0 {
		return nil, errors.New("no training rows")
	}
	if opts.Kind == "" {
		opts.Kind = model.KindResidual
	}
	if len(opts.Line.Lambdas) == 0 {
		opts.Line = DefaultOptions().Line
	}
	if opts.SignConstraints {
		opts.Line.Signs = schema.Directions()
	}
	if opts.NoShift {
		in.Forward = unshifted(in.Forward)
	}
	// Labels outside the band the training labels themselves vouch for
	// are clipped into it for the fit and left out of its measurement, so
	// that one absurd sample cannot move the model (labels.go).
	band := NewLabelBand(train.Y)
	train, holdout = winsorise(train, band), believable(holdout, band)
	m, treeErr, err := centre(ctx, schema, train, opts, in)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var predHold, linHold []float64
	for _, x := range holdout.X {
		predHold = append(predHold, m.Predict(x))
		linHold = append(linHold, m.PredictLinear(x))
	}
	m.Holdout = model.Measure(predHold, holdout.Y)
	m.HoldoutLinear = model.Measure(linHold, holdout.Y)
	m.HoldoutSamples = len(holdout.Y)
	if err := bounds(ctx, m, train, holdout, opts, in); err != nil {
		return nil, err
	}
	m.TrainedAt = time.Now().UTC()
	m.TrainSeconds = time.Since(start).Seconds()
	return m, treeErr
}

// centre fits the model's central prediction on train: its clamps, its
// line, its trees (treeErr when they failed: the model is then a line), the
// tree weight and the shift.
func centre(ctx context.Context, schema features.Schema, train Dataset, opts Options, in Inputs) (m *model.TargetModel, treeErr, err error) {
	m = &model.TargetModel{
		Kind:         model.KindLinear,
		Columns:      append([]string(nil), schema.Names()...),
		Ranges:       ranges(schema.Len(), train.X),
		TrainSamples: len(train.Y),
	}
	lo, hi := minMax(train.Y)
	m.BaseFloorMs = math.Max(lo/2, MinLatencyMs)
	m.MinMs = math.Max(lo/10, MinLatencyMs)
	m.MaxMs = math.Max(hi*100, m.MinMs)

	if m.Linear, err = fitLine(train, opts.Line, m.BaseFloorMs); err != nil {
		return nil, nil, err
	}
	// The Go work between the xgboost runs (which stop on ctx by
	// themselves) checks ctx at each step, so a shutdown does not wait for
	// a fit on a starved background thread to finish.
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if opts.XGBoost != nil && opts.Kind != model.KindLinear && len(train.Y) >= opts.MinTreeRows {
		treeErr = fitTrees(ctx, m, opts, train)
	}
	if err := m.Prepare(); err != nil {
		return nil, nil, fmt.Errorf("fitted model is inconsistent: %w", err)
	}
	if m.Kind == model.KindResidual {
		m.TreeShrink = treeShrink(in.Forward, opts.MinForwardRows)
	}
	// Bounded as Prepare requires; a shift near the bound means the model
	// is far off, and the calibration says so.
	var shift float64
	if !opts.NoShift {
		shift = shrunkShift(logResiduals(m, train))
	}
	if forwardEnough(opts, in) && opts.ForwardShiftGain > 0 && !opts.NoShift {
		shift += opts.ForwardShiftGain * shrunkShift(forwardResiduals(m, in.Forward))
	}
	m.LogShift = math.Max(-5, math.Min(5, shift))
	return m, treeErr, nil
}

// bounds calibrates m's quantiles, measures how they widen outside the
// training ranges, and measures their coverage on the holdout.
func bounds(ctx context.Context, m *model.TargetModel, train, holdout Dataset, opts Options, in Inputs) error {
	// Without enough forward samples, the calibration pools a small
	// holdout with cross-fitted residuals of the training rows.
	var crossFitted []float64
	var err error
	if !forwardEnough(opts, in) && len(holdout.Y) < opts.MinCalibrationRows {
		if crossFitted, err = crossFitResiduals(ctx, m, opts, train); err != nil {
			return fmt.Errorf("calibrate: %w", err)
		}
	}
	if m.Calibration, err = calibrate(m, holdout, crossFitted, opts, in); err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	if m.Support, err = estimateSupport(ctx, m, opts, in, train); err != nil {
		return fmt.Errorf("widening outside the support: %w", err)
	}
	// After the support: its extrapolation spreads are measured against
	// the calibration's own in-range spread, which the correction of a lag
	// in time does not change.
	m.Calibration.Adjustment = in.Levels
	m.Calibration.OutOfRange = in.OutOfRangeLevels
	if m.HoldoutCoverage, err = holdoutCoverage(m, holdout, crossFitted, in.Quantile); err != nil {
		return fmt.Errorf("holdout coverage: %w", err)
	}
	return nil
}

// fitLine fits the linear base minimising squared relative error (weights
// 1/y²): routers act on ratios between endpoints, and raw squared error
// would let a few multi-second outliers set the slope for every ordinary
// request. Labels below the band's low quantile weigh as that quantile
// does (LabelBand.relativeWeight).
func fitLine(train Dataset, cfg LineOptions, floor float64) (*model.Linear, error) {
	band := NewLabelBand(train.Y)
	weights := make([]float64, len(train.Y))
	for i, y := range train.Y {
		weights[i] = band.relativeWeight(y)
	}
	lin, _, err := Line(train.X, train.Y, weights, cfg, floor)
	if err != nil {
		return nil, fmt.Errorf("fit linear model: %w", err)
	}
	return lin, nil
}

// logResiduals returns log(actual / predicted) of m on the rows of d.
func logResiduals(m *model.TargetModel, d Dataset) []float64 {
	r := make([]float64, len(d.Y))
	for i, x := range d.X {
		r[i] = math.Log(d.Y[i] / m.Predict(x))
	}
	return r
}

// treeWeights are the tree weights treeShrink chooses among.
var treeWeights = [...]float64{0, 0.25, 0.5, 0.75, 1}

// treeShrink chooses how much of the trees' correction to keep: the weight
// with which earlier models would have had the lowest relative error on
// samples that arrived after they were trained. Trees are trusted fully
// until minRows such samples from models with trees say otherwise.
func treeShrink(forward []ForwardSample, minRows int) float64 {
	n := 0
	for _, f := range forward {
		if f.TreeLog != 0 {
			n++
		}
	}
	if n < minRows || n == 0 {
		return 0
	}
	best, bestErr := 1.0, math.Inf(1)
	// Heaviest weight first, so that a tie keeps the trees.
	for i := len(treeWeights) - 1; i >= 0; i-- {
		w := treeWeights[i]
		var sum float64
		for _, f := range forward {
			if f.TreeLog != 0 {
				sum += math.Abs(f.Base*math.Exp(w*f.TreeLog+f.LogShift)-f.Actual) / f.Actual
			}
		}
		if sum < bestErr {
			best, bestErr = w, sum
		}
	}
	return 1 - best
}

// unshifted returns forward samples as models without a shift would have
// predicted them.
func unshifted(forward []ForwardSample) []ForwardSample {
	out := make([]ForwardSample, len(forward))
	for i, f := range forward {
		f.LogShift = 0
		out[i] = f
	}
	return out
}

// forwardEnough reports whether in has enough forward samples to
// calibrate on and to correct the shift with.
func forwardEnough(opts Options, in Inputs) bool {
	return len(in.Forward) >= max(opts.MinForwardRows, 1)
}

// forwardResiduals returns log(actual / predicted) of forward samples as
// they would have been predicted with m's tree weight (and their own
// model's shift).
func forwardResiduals(m *model.TargetModel, forward []ForwardSample) []float64 {
	r := make([]float64, len(forward))
	for i, f := range forward {
		r[i] = math.Log(f.Actual / m.Combine(f.Base, f.TreeLog, 1-m.TreeShrink, f.LogShift))
	}
	return r
}

// shrunkShift is the relative-error shift a model is given from log
// residuals r: relativeErrorShift shrunk toward 0 by its own noise. A
// median of n residuals moves by about 1.25 robust standard deviations /
// √n from one sample of rows to the next, so a shift within that of 0 is
// mostly the training rows' noise, which the model would carry into every
// prediction. The factor max(0, 1 − se²/δ²) (positive-part James–Stein
// shrinkage of one value) removes a shift within one standard error of 0
// and leaves one many standard errors from it nearly as it is.
func shrunkShift(r []float64) float64 {
	delta := relativeErrorShift(r)
	if delta == 0 {
		return 0
	}
	_, sd := robustSpread(r)
	se := medianEfficiency * sd / math.Sqrt(float64(len(r)))
	return delta * math.Max(0, 1-se*se/(delta*delta))
}

// medianEfficiency is the standard error of a median of normal data in
// standard errors of their mean: √(π/2).
const medianEfficiency = 1.2533141373155003

// relativeErrorShift returns the δ minimising Σ |1 − exp(δ − r_i)| over
// log residuals r_i = log(y_i / p_i): the constant factor exp(δ) by which
// scaling every prediction minimises the mean absolute relative error on
// those rows. Σ |y_i − p_i e^δ| / y_i = Σ w_i |ρ_i − e^δ| with ρ_i = e^{r_i}
// and w_i = 1/ρ_i, so e^δ is the w-weighted median of the ρ_i.
func relativeErrorShift(r []float64) float64 {
	if len(r) == 0 {
		return 0
	}
	s := append([]float64(nil), r...)
	sort.Float64s(s)
	var total float64
	for _, v := range s {
		total += math.Exp(-v)
	}
	var acc float64
	for _, v := range s {
		acc += math.Exp(-v)
		if acc >= total/2 {
			return v
		}
	}
	return s[len(s)-1]
}
