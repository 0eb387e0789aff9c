package eval

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/trainer/fit"
)

// ModeFloor estimates how low any model's error can go on a trace, given
// the columns of its rows (Floor).
const ModeFloor = "floor"

// Estimators of the floor, as model names in a floor report. Each is
// allowed what no served model has: every other row of the trace, the
// future included.
const (
	// ModelHeadroomHindsight is Headroom's model fitted exactly as
	// configured (line, trees, shift) on every row of the target except a
	// block of the trace, predicting that block: leave one block out.
	ModelHeadroomHindsight = "headroom:hindsight"
	// ModelLinearHindsight is the line of that same fit, alone.
	ModelLinearHindsight = "linear:hindsight"
	// ModelXGBoostLogHindsight is XGBoost on ln(ms) with the reference's
	// hyper-parameters and columns, left one block out the same way.
	ModelXGBoostLogHindsight = "xgboost-log:hindsight"
	// ModelKNN predicts a row by its floorNeighbours nearest rows in the
	// space of the row's raw fields (each scaled by its standard
	// deviation), among every other row of the trace: no model shape at
	// all, only "rows that looked like this one took this long".
	ModelKNN = "knn:all-rows"
	// ModelKNNWindow is the same among the floorWindow rows of the target
	// before and after the row in trace order: what rows near in feature
	// space and near in time say, drift included.
	ModelKNNWindow = "knn:window"
)

// floorNeighbours is k of the neighbour estimators: enough labels for a
// median that one stalled request does not move, few enough to stay among
// rows that look alike on a trace of a couple of thousand rows.
const floorNeighbours = 20

// floorWindow is the neighbour estimator's window, in rows of the target
// on each side.
const floorWindow = 200

// knnColumns are the fields of a row the neighbour estimators measure
// distance in: the row as the router sent it, without derived columns,
// which would count one field several times.
var knnColumns = []string{
	"kv_cache_percentage", "input_token_length", "num_request_waiting", "num_request_running",
	"prefill_tokens_in_flight", "decode_tokens_in_flight", "prefix_cache_score",
	"encoder_input_size", "encoder_matched_size", "pod_type",
}

// Floor estimates the irreducible error of each target on a trace: how
// low MAPE can go for any function of a row's columns. Each estimator sees
// every other row of the trace, later ones included, so it is an oracle no
// served model can match; where even they stay far above a target figure,
// no model of these columns reaches it. Rows are scored as a prequential
// walk retraining every `every` rows scores them (from row `every` on),
// so the figures sit beside Prequential's on the same rows; the hindsight
// fits leave out one such block of `every` rows at a time. With no targets
// given, both per-pod targets are estimated.
func Floor(ctx context.Context, samples []features.Sample, opts Options, every int, targets ...features.Target) (*Report, error) {
	start := time.Now()
	opts = opts.withDefaults()
	if every < 1 {
		return nil, fmt.Errorf("floor: blocks of %d rows, want at least 1", every)
	}
	if _, err := opts.XGBoost.Available(); err != nil {
		return nil, err
	}
	if len(targets) == 0 {
		targets = features.PodTargets[:]
	}
	rep := &Report{Mode: ModeFloor, Scheme: opts.Store.Scheme.String(), Quantile: opts.Quantile, Every: every}
	tl := newTally(floorEstimators...)
	for _, t := range targets {
		if err := floorTarget(ctx, samples, opts, every, t, tl); err != nil {
			return nil, fmt.Errorf("floor %s: %w", t, err)
		}
	}
	rep.Results = tl.results()
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// floorEstimators are the models of a floor report, in table order.
var floorEstimators = []string{ModelHeadroomHindsight, ModelLinearHindsight, ModelXGBoostLogHindsight, ModelKNN, ModelKNNWindow}

// FloorFigure is one target's floor beside Headroom's prequential error:
// the lowest MAPE any floor estimator reached on the rows the prequential
// walk scored, and Headroom's MAPE over it.
type FloorFigure struct {
	Target string `json:"target"`
	// Model is the estimator that reached the floor, MAPE its figure.
	Model string  `json:"model"`
	MAPE  float64 `json:"mape"`
	// Headroom is Headroom's prequential MAPE, Ratio Headroom over MAPE:
	// how far the service, which learns only from rows that came before,
	// lies above what hindsight reaches.
	Headroom float64 `json:"headroom_mape"`
	Ratio    float64 `json:"ratio"`
}

// Lowest returns the floor of target t in a floor report: its estimator
// with the lowest MAPE; false when the report has none for t.
func (r *Report) Lowest(t features.Target) (Result, bool) {
	var best Result
	found := false
	for _, name := range floorEstimators {
		if e := r.Find(t, name); e != nil && e.Rows > 0 && (!found || e.MAPE < best.MAPE) {
			best, found = *e, true
		}
	}
	return best, found
}

// BesideFloor sets r.Floors from floor, a floor report of the same trace
// in blocks of the prequential cadence: per target Headroom scored, its
// floor and Headroom's MAPE over it. It refuses reports of other modes or
// cadences, whose rows would not be the same.
func (r *Report) BesideFloor(floor *Report) error {
	if r.Mode != ModePrequential || floor.Mode != ModeFloor {
		return fmt.Errorf("floor beside %s: want a prequential report and a floor report, have %s", r.Mode, floor.Mode)
	}
	if r.Every != floor.Every {
		return fmt.Errorf("floor beside prequential: floor in blocks of %d rows, prequential retrains every %d", floor.Every, r.Every)
	}
	r.Floors = nil
	for _, t := range features.PodTargets {
		h := r.Find(t, ModelHeadroom)
		f, ok := floor.Lowest(t)
		if h == nil || h.Rows == 0 || !ok || f.MAPE <= 0 {
			continue
		}
		r.Floors = append(r.Floors, FloorFigure{Target: t.String(), Model: f.Model, MAPE: f.MAPE,
			Headroom: h.MAPE, Ratio: h.MAPE / f.MAPE})
	}
	return nil
}

// labelled is one row of a target: its trace position, row and label.
type labelled struct {
	at  int
	row features.Row
	y   float64
}

func floorTarget(ctx context.Context, samples []features.Sample, opts Options, every int, t features.Target, tl *tally) error {
	var rows []labelled
	for i := range samples {
		if y, ok := samples[i].Label(t); ok {
			rows = append(rows, labelled{at: i, row: samples[i].Row, y: y})
		}
	}
	if len(rows) < 20 {
		return fmt.Errorf("%d labelled rows, want at least 20", len(rows))
	}
	scored := func(r labelled) bool { return r.at >= every }

	xs, ys := make([]features.Row, len(rows)), make([]float64, len(rows))
	for i, r := range rows {
		xs[i], ys[i] = r.row, r.y
	}
	knn := Neighbours(xs, ys, WithinRows(len(rows), len(rows)))
	win := Neighbours(xs, ys, WithinRows(len(rows), floorWindow))
	for i, r := range rows {
		if scored(r) {
			tl.scores(t, ModelKNN).add(knn[i], r.y)
			tl.scores(t, ModelKNNWindow).add(win[i], r.y)
		}
	}

	cfg := opts.Fit
	if cfg.Kind == "" {
		cfg = fit.DefaultOptions()
	}
	xgb := opts.XGBoost
	cfg.XGBoost = &xgb
	// Only the central prediction is scored: the training rows stand in
	// for the holdout, which only the quantiles read (a block may hold no
	// believable label at all), and there is no cross-fitted calibration
	// and no widening out of range.
	cfg.MinCalibrationRows = 0
	cfg.Support = fit.SupportOptions{}
	schema, err := features.NewSchema(headroomColumns(opts, t))
	if err != nil {
		return err
	}
	ref := referenceSchema(t)
	for lo := every; lo < len(samples); lo += every {
		var in, out []features.Sample
		for _, r := range rows {
			s := features.Sample{Row: r.row}
			setLabel(&s, t, r.y)
			if r.at >= lo && r.at < lo+every {
				out = append(out, s)
			} else {
				in = append(in, s)
			}
		}
		if len(out) == 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		train, test := fit.BuildDataset(schema, t, in), fit.BuildDataset(schema, t, out)
		m, err := fit.Model(ctx, schema, train, train, cfg, fit.Inputs{Quantile: opts.Quantile})
		if err != nil {
			return fmt.Errorf("hindsight fit leaving out rows %d-%d: %w", lo, lo+every-1, err)
		}
		refTrain, refTest := fit.BuildDataset(ref, t, in), fit.BuildDataset(ref, t, out)
		logTrees, err := ReferenceLogTrees(ctx, opts.XGBoost, refTrain.X, refTrain.Y)
		if err != nil {
			return fmt.Errorf("hindsight baseline leaving out rows %d-%d: %w", lo, lo+every-1, err)
		}
		for i, y := range test.Y {
			tl.scores(t, ModelHeadroomHindsight).add(m.Predict(test.X[i]), y)
			tl.scores(t, ModelLinearHindsight).add(m.PredictLinear(test.X[i]), y)
			tl.scores(t, ModelXGBoostLogHindsight).add(math.Exp(logTrees.Predict(refTest.X[i])), y)
		}
	}
	return nil
}

func headroomColumns(opts Options, t features.Target) []string {
	if cols, ok := opts.Columns[t]; ok {
		return cols
	}
	return features.DefaultColumns(t)
}

func setLabel(s *features.Sample, t features.Target, y float64) {
	if t == features.TPOT {
		s.ActualTPOTMs = y
	} else {
		s.ActualTTFTMs = y
	}
}

// Neighbours predicts rows[i] by the relative-error median of the labels
// of its floorNeighbours nearest candidates (in knnColumns, each scaled by
// its standard deviation over all of rows; a constant column does not
// count). candidates(i, offer) offers, by index, the rows rows[i] may be
// predicted from; a row offered none is predicted NaN. Ties keep the row
// offered first, so the result is deterministic.
func Neighbours(rows []features.Row, labels []float64, candidates func(i int, offer func(j int))) []float64 {
	schema := features.MustSchema(knnColumns...)
	p := schema.Len()
	x := make([][]float64, len(rows))
	for i := range rows {
		x[i] = schema.Build(&rows[i], nil)
	}
	scale := make([]float64, p)
	for j := range p {
		var sum, sq float64
		for i := range x {
			sum += x[i][j]
			sq += x[i][j] * x[i][j]
		}
		n := float64(len(x))
		if v := sq/n - (sum/n)*(sum/n); v > 1e-12 {
			scale[j] = 1 / math.Sqrt(v)
		}
	}
	type near struct {
		d float64
		y float64
	}
	out := make([]float64, len(rows))
	best := make([]near, 0, floorNeighbours+1)
	nearest := make([]float64, 0, floorNeighbours)
	for i := range rows {
		best = best[:0]
		candidates(i, func(j int) {
			var d float64
			for c := range p {
				e := (x[i][c] - x[j][c]) * scale[c]
				d += e * e
			}
			if len(best) == floorNeighbours && d >= best[len(best)-1].d {
				return
			}
			// Insertion into the short sorted list of the nearest so far.
			k := sort.Search(len(best), func(k int) bool { return best[k].d > d })
			best = append(best, near{})
			copy(best[k+1:], best[k:])
			best[k] = near{d, labels[j]}
			if len(best) > floorNeighbours {
				best = best[:floorNeighbours]
			}
		})
		nearest = nearest[:0]
		for _, b := range best {
			nearest = append(nearest, b.y)
		}
		out[i] = relativeErrorMedian(nearest)
	}
	return out
}

// WithinRows offers Neighbours every other of n rows at most window
// positions away, earlier ones first.
func WithinRows(n, window int) func(i int, offer func(j int)) {
	return func(i int, offer func(j int)) {
		for j := max(0, i-window); j < min(n, i+window+1); j++ {
			if j != i {
				offer(j)
			}
		}
	}
}

// relativeErrorMedian is the constant prediction with the least mean
// relative error over positive labels: their median weighted by 1/y.
func relativeErrorMedian(y []float64) float64 {
	v := append([]float64(nil), y...)
	sort.Float64s(v)
	var total float64
	for _, y := range v {
		total += 1 / y
	}
	var acc float64
	for _, y := range v {
		acc += 1 / y
		if acc >= total/2 {
			return y
		}
	}
	return math.NaN()
}
