package trainer

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

// FitConfig says how to fit one target's model. DefaultFitConfig is the
// service's; every default was chosen by measurement with headroom eval
// (docs/ACCURACY.md).
type FitConfig struct {
	Kind    model.Kind   // composition of the model; default model.KindResidual
	XGBoost *xgboost.CLI // nil: linear only
	Params  xgboost.Params
	// Line configures the linear base; its Signs are filled from the
	// schema's directions when SignConstraints is set.
	Line            LineConfig
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
	// Forward is what earlier models predicted for samples that reached the
	// store after they were trained, oldest first; the trainer sets it per
	// fit. With MinForwardRows of them the quantiles are calibrated on
	// them, they correct the shift (ForwardShiftGain), and with
	// MinForwardRows from models with trees they choose how much to trust
	// the new model's trees (model.TargetModel.TreeShrink).
	Forward        []ForwardSample
	MinForwardRows int
	// ForwardShiftGain is the share of the forward samples' own
	// relative-error shift added to the model's shift (0: none). The
	// training rows' shift centres the model on the past; when latency
	// drifts (load rising through the day), earlier models' forward errors
	// say by how much that centre lags. The new model has trained on those
	// samples already, so it lags less than they did: half the correction
	// was measured best (docs/ACCURACY.md).
	ForwardShiftGain float64
	// CoverageQuantile is the quantile whose holdout coverage the model
	// records (default 0.9).
	CoverageQuantile float64
	// NoShift leaves the prediction unscaled: no relative-error shift and
	// no forward correction of it (model.TargetModel.LogShift 0), and the
	// forward samples are taken without their own models' shifts. On some
	// workloads (docs/ACCURACY.md) the shift that is best on the training
	// rows is worse on the rows that follow; self-tuning chooses.
	NoShift bool
	// Support measures how much the bounds widen outside the training
	// ranges (support.go); its zero value leaves them as calibrated.
	Support SupportConfig
	// Levels is the live tracking's correction of the levels quantiles are
	// served at (DriftConfig.CoverageGain), set by the trainer per fit; the
	// model carries it in its calibration. Nil serves every level as
	// calibrated. It moves no central prediction.
	Levels *model.LevelAdjustment
	// OutOfRangeLevels is the same for rows outside the training ranges
	// (DriftConfig.OutOfRangeGain), carried as the calibration's
	// OutOfRange. Nil serves them like rows in range.
	OutOfRangeLevels *model.LevelAdjustment
}

// DefaultFitConfig is the configuration the service runs with.
func DefaultFitConfig() FitConfig {
	return FitConfig{
		Kind:   model.KindResidual,
		Params: xgboost.DefaultParams(),
		Line: LineConfig{
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
		CoverageQuantile:   0.9,
		Support:            DefaultSupportConfig(),
	}
}

// ForwardSample is one sample as the model in service predicted it before
// it was trained on it: the prediction's parts (model.TargetModel.Parts,
// with the tree part 0 for models without a line to correct) and the
// actual value.
type ForwardSample struct {
	Actual, Base, TreeLog, LogShift float64
}

// Dataset is the rows of one target, built with one schema.
type Dataset struct {
	X [][]float64
	Y []float64
}

// BuildDataset turns labelled samples into feature rows for target t. Samples
// without a label for t are skipped.
func BuildDataset(schema features.Schema, t features.Target, samples []features.Sample) Dataset {
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
	if len(cfg.Line.Lambdas) == 0 {
		cfg.Line = DefaultFitConfig().Line
	}
	if cfg.SignConstraints {
		cfg.Line.Signs = schema.Directions()
	}
	if cfg.NoShift {
		cfg.Forward = unshifted(cfg.Forward)
	}
	// Labels outside the band the training labels themselves vouch for
	// are clipped into it for the fit and left out of its measurement, so
	// that one absurd sample cannot move the model (labels.go).
	band := labelBand(train.Y)
	train, holdout = winsorise(train, band), believable(holdout, band)
	m := &model.TargetModel{
		Kind:           model.KindLinear,
		Columns:        append([]string(nil), schema.Names()...),
		Ranges:         ranges(schema.Len(), train.X),
		TrainSamples:   len(train.Y),
		HoldoutSamples: len(holdout.Y),
	}
	lo, hi := minMax(train.Y)
	m.BaseFloorMs = math.Max(lo/2, MinLatencyMs)
	m.MinMs = math.Max(lo/10, MinLatencyMs)
	m.MaxMs = math.Max(hi*100, m.MinMs)

	lin, err := fitLine(train, cfg.Line, m.BaseFloorMs)
	if err != nil {
		return nil, err
	}
	// The Go work between the xgboost runs (which stop on ctx by
	// themselves) checks ctx at each step, so a shutdown does not wait for
	// a fit on a starved background thread to finish.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.Linear = lin
	var treeErr error
	if cfg.XGBoost != nil && cfg.Kind != model.KindLinear && len(train.Y) >= cfg.MinTreeRows {
		treeErr = fitTrees(ctx, m, cfg, train)
	}
	if err := m.Prepare(); err != nil {
		return nil, fmt.Errorf("fitted model is inconsistent: %w", err)
	}
	if m.Kind == model.KindResidual {
		m.TreeShrink = treeShrink(cfg.Forward, cfg.MinForwardRows)
	}
	// Bounded as Prepare requires; a shift near the bound means the model
	// is far off, and the calibration says so.
	var shift float64
	if !cfg.NoShift {
		shift = relativeErrorShift(logResiduals(m, train))
	}
	if forwardEnough(cfg) && cfg.ForwardShiftGain > 0 && !cfg.NoShift {
		shift += cfg.ForwardShiftGain * relativeErrorShift(forwardResiduals(m, cfg.Forward))
	}
	m.LogShift = math.Max(-5, math.Min(5, shift))

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
	// Without enough forward samples, the calibration pools a small
	// holdout with cross-fitted residuals of the training rows.
	var crossFitted []float64
	if !forwardEnough(cfg) && len(holdout.Y) < cfg.MinCalibrationRows {
		if crossFitted, err = crossFitResiduals(ctx, m, cfg, train); err != nil {
			return nil, fmt.Errorf("calibrate: %w", err)
		}
	}
	if m.Calibration, err = calibrate(m, holdout, crossFitted, cfg); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	if m.Support, err = estimateSupport(ctx, m, cfg, train); err != nil {
		return nil, fmt.Errorf("widening outside the support: %w", err)
	}
	// After the support: its extrapolation spreads are measured against
	// the calibration's own in-range spread, which the correction of a lag
	// in time does not change.
	m.Calibration.Adjustment = cfg.Levels
	m.Calibration.OutOfRange = cfg.OutOfRangeLevels
	q := cfg.CoverageQuantile
	if !(q > 0 && q < 1) {
		q = 0.9
	}
	if m.HoldoutCoverage, err = holdoutCoverage(m, holdout, crossFitted, q); err != nil {
		return nil, fmt.Errorf("holdout coverage: %w", err)
	}
	m.TrainedAt = time.Now().UTC()
	m.TrainSeconds = time.Since(start).Seconds()
	return m, treeErr
}

// fitLine fits the linear base minimising squared relative error (weights
// 1/y²): routers act on ratios between endpoints, and raw squared error
// would let a few multi-second outliers set the slope for every ordinary
// request. Labels below the band's low quantile weigh as that quantile
// does (LabelBand.relativeWeight).
func fitLine(train Dataset, cfg LineConfig, floor float64) (*model.Linear, error) {
	band := labelBand(train.Y)
	weights := make([]float64, len(train.Y))
	for i, y := range train.Y {
		weights[i] = band.relativeWeight(y)
	}
	lin, _, err := FitLine(train.X, train.Y, weights, cfg, floor)
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

// forwardEnough reports whether cfg has enough forward samples to
// calibrate on and to correct the shift with.
func forwardEnough(cfg FitConfig) bool {
	return len(cfg.Forward) >= max(cfg.MinForwardRows, 1)
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

// calibrate summarises the residuals quantiles come from, preferring the
// ones most like the errors the model will make in service: those of earlier
// models on samples that arrived after they were trained (forward in time,
// as the model will be used). Without enough of those, this model's
// residuals on the holdout, pooled, when the holdout is small, with the
// cross-fitted residuals of the training rows (crossFitted): a small
// holdout is one fixed set whose sampling error no retrain averages out
// (FitConfig.MinCalibrationRows), and the cross-fit adds every training
// row's out-of-fold error. In-sample residuals would make every interval
// too narrow.
func calibrate(m *model.TargetModel, holdout Dataset, crossFitted []float64, cfg FitConfig) (model.Calibration, error) {
	if forwardEnough(cfg) {
		return model.NewCalibration(CalibrationForward, forwardResiduals(m, cfg.Forward))
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
func crossFitResiduals(ctx context.Context, m *model.TargetModel, cfg FitConfig, train Dataset) ([]float64, error) {
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
			shift = relativeErrorShift(logResiduals(fm, in))
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
func fitFold(ctx context.Context, m *model.TargetModel, cfg FitConfig, in Dataset) (*model.TargetModel, error) {
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

func medianOf(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
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
	// Only residuals of the line are clipped: log milliseconds themselves
	// have legitimate tails (long prompts) that clipping would cut off.
	if cfg.TreeLabelClip > 0 && cfg.Kind == model.KindResidual {
		med := medianOf(labels)
		dev := make([]float64, len(labels))
		for i, l := range labels {
			dev[i] = math.Abs(l - med)
		}
		if scale := 1.4826 * medianOf(dev); scale > 0 {
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
