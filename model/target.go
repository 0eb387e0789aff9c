package model

import (
	"fmt"
	"math"
	"time"

	"github.com/headroomhq/headroom/features"
)

// Kind says how a target's prediction is composed from its parts.
type Kind string

const (
	// KindLinear predicts with the linear model alone (no trees yet, or the
	// xgboost binary is missing).
	KindLinear Kind = "linear"
	// KindLogTrees predicts exp(trees(x)): boosted trees on log milliseconds.
	KindLogTrees Kind = "log-trees"
	// KindResidual predicts base(x) · exp(trees(x)), where base is the linear
	// model and the trees learned log(y / base(x)). In range the trees correct
	// the line; out of range the trees repeat their edge correction and the
	// line carries the trend.
	KindResidual Kind = "linear+log-trees"
)

// QuantileCoverage is the share of rows at or below a quantile prediction.
type QuantileCoverage struct {
	Quantile float64 `json:"quantile"`
	Percent  float64 `json:"percent"`
	Rows     int     `json:"rows"`
}

// Range is the span of one feature over the training rows.
type Range struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// TargetModel predicts one target. It is immutable once built; Prepare must
// be called (Decode does) before Predict.
type TargetModel struct {
	Kind    Kind     `json:"kind"`
	Columns []string `json:"columns"`
	Linear  *Linear  `json:"linear"`
	Trees   *Trees   `json:"trees,omitempty"`
	// BaseFloorMs bounds the linear base from below so that log(base) is
	// defined and a line that dips under zero off its data cannot predict 0.
	BaseFloorMs float64 `json:"base_floor_ms"`
	// MinMs and MaxMs clamp the final prediction: a floor so a router never sees
	// an endpoint as instantaneous, a ceiling far above anything observed so a
	// wild extrapolation stays a finite, comparable number.
	// TreeShrink in [0, 1] scales the trees' log correction by
	// 1 − TreeShrink: 0 trusts the trees fully, 1 ignores them. The trainer
	// sets it from how much the trees helped, or hurt, on samples that
	// arrived after earlier models were trained: trees can learn
	// correlations that hold within the data they saw and not after it.
	TreeShrink float64 `json:"tree_shrink,omitempty"`
	// LogShift scales every central prediction by exp(LogShift), chosen so
	// the prediction minimises relative error on the training rows (least
	// squares fits a mean, which a long tail of stalled requests drags up),
	// then moved part of the way the newest samples' errors point
	// (fit.Options.ForwardShiftGain in package trainer/fit) when latency drifts.
	LogShift    float64     `json:"log_shift,omitempty"`
	MinMs       float64     `json:"min_ms"`
	MaxMs       float64     `json:"max_ms"`
	Ranges      []Range     `json:"ranges"`
	Calibration Calibration `json:"calibration"`
	// Support widens the calibrated quantiles for rows outside Ranges;
	// nil (bundles from earlier trainers) leaves them as calibrated.
	Support *Support `json:"support,omitempty"`

	// Holdout figures of this model and of its linear part alone.
	Holdout       Quality `json:"holdout"`
	HoldoutLinear Quality `json:"holdout_linear"`
	// HoldoutCoverage is how often the holdout's actual values were at or
	// below the calibrated quantile prediction, measured on rows the
	// calibration did not come from.
	HoldoutCoverage *QuantileCoverage `json:"holdout_coverage,omitempty"`

	TrainSamples    int       `json:"train_samples"`
	HoldoutSamples  int       `json:"holdout_samples"`
	TrainedAt       time.Time `json:"trained_at"`
	StoreGeneration uint64    `json:"store_generation"`
	TrainSeconds    float64   `json:"train_seconds"`
	// Selection is how this model's configuration was chosen among the
	// trainer's candidates; nil when it was not (self-tuning off, or too
	// few rows to score candidates on).
	Selection *Selection `json:"selection,omitempty"`

	schema features.Schema
}

// Prepare compiles the column list and checks every part against it, so
// that Predict can neither panic nor read past a feature vector. It is
// idempotent.
func (m *TargetModel) Prepare() error {
	schema, err := features.NewSchema(m.Columns)
	if err != nil {
		return err
	}
	n := schema.Len()
	switch m.Kind {
	case KindLinear:
	case KindLogTrees, KindResidual:
		if m.Trees == nil {
			return fmt.Errorf("model kind %s without trees", m.Kind)
		}
		if m.Trees.NumFeatures() > n {
			return fmt.Errorf("trees read %d features, schema has %d", m.Trees.NumFeatures(), n)
		}
	default:
		return fmt.Errorf("unknown model kind %q", m.Kind)
	}
	if m.Linear == nil {
		return fmt.Errorf("model without a linear part")
	}
	if err := m.Linear.Validate(n); err != nil {
		return err
	}
	if len(m.Ranges) != n {
		return fmt.Errorf("%d feature ranges for %d columns", len(m.Ranges), n)
	}
	if !finite(m.BaseFloorMs) || m.BaseFloorMs <= 0 || !finite(m.MinMs) || m.MinMs <= 0 ||
		!finite(m.MaxMs) || m.MaxMs < m.MinMs {
		return fmt.Errorf("bad clamps: base floor %v, min %v, max %v", m.BaseFloorMs, m.MinMs, m.MaxMs)
	}
	if !(m.TreeShrink >= 0 && m.TreeShrink <= 1) {
		return fmt.Errorf("tree shrink %v outside [0, 1]", m.TreeShrink)
	}
	if !finite(m.LogShift) || math.Abs(m.LogShift) > 5 {
		return fmt.Errorf("log shift %v is not a finite number in [-5, 5]", m.LogShift)
	}
	if err := m.Calibration.Validate(); err != nil {
		return err
	}
	if err := m.Selection.Validate(); err != nil {
		return err
	}
	if err := m.Support.Validate(n); err != nil {
		return err
	}
	m.schema = schema
	return nil
}

// Schema is the compiled column list; valid after Prepare.
func (m *TargetModel) Schema() features.Schema { return m.schema }

// Predict returns the central prediction in milliseconds for a feature vector
// built with m.Schema(). The result is finite and within [MinMs, MaxMs].
func (m *TargetModel) Predict(x []float64) float64 {
	base, treeLog := m.Parts(x)
	return m.Combine(base, treeLog, 1-m.TreeShrink, m.LogShift)
}

// PredictRows sets out[r] to Predict(x[r*width:(r+1)*width]), bit for bit,
// for every row r of the row-major matrix x of vectors built with
// m.Schema() (width at least its length), the trees walked for the rows
// together (Trees.PredictRows).
func (m *TargetModel) PredictRows(x []float64, width int, out []float64) {
	switch m.Kind {
	case KindLogTrees, KindResidual:
		m.Trees.PredictRows(x, width, out)
	default:
		clear(out)
	}
	for r := range out {
		base := 1.0
		if m.Kind != KindLogTrees {
			base = m.base(x[r*width : (r+1)*width])
		}
		out[r] = m.Combine(base, out[r], 1-m.TreeShrink, m.LogShift)
	}
}

// Parts returns the two parts of a prediction: the base in milliseconds
// (the floored line, or 1 for KindLogTrees) and the trees' log correction
// (0 without trees).
func (m *TargetModel) Parts(x []float64) (base, treeLog float64) {
	switch m.Kind {
	case KindLogTrees:
		return 1, m.Trees.Predict(x)
	case KindResidual:
		return m.base(x), m.Trees.Predict(x)
	}
	return m.base(x), 0
}

// Combine composes a prediction from its parts with a tree weight and a
// log shift, clamped: Predict is Combine(Parts(x), 1 − TreeShrink, LogShift).
// The trainer uses it to ask what other weights would have predicted.
func (m *TargetModel) Combine(base, treeLog, treeWeight, logShift float64) float64 {
	return m.clamp(base * math.Exp(treeWeight*treeLog+logShift))
}

// PredictLinear is the linear part alone, clamped like Predict.
func (m *TargetModel) PredictLinear(x []float64) float64 { return m.clamp(m.base(x)) }

// Quantile scales the central prediction for x to quantile q of the
// calibrated error distribution, widened by how far x lies outside the
// training ranges (Support) and read at the level served to rows where x
// lies (Calibration.ServedAt). It is QuantileAt(central, q, m.Place(x)).
func (m *TargetModel) Quantile(x []float64, central, q float64) float64 {
	return m.QuantileAt(central, q, m.Place(x))
}

// QuantileAt is Quantile with the row's place against the training ranges
// already measured, for callers that want several quantiles of one row.
// Every quantile the service serves or scores comes through here.
func (m *TargetModel) QuantileAt(central, q float64, p Placement) float64 {
	c, level := m.Calibration.ServedAt(q, p.OutOfRange)
	return m.clamp(central * math.Exp(m.Support.LogResidual(c, level, p.Reach)))
}

// Placement is where a row lies against a model's training ranges: how
// far outside the support (Reach, zero without a Support), and whether any
// feature lies outside a range at all (OutOfRange), which chooses the
// level its quantiles are served at even where no spread was measured.
type Placement struct {
	Reach      Reach
	OutOfRange bool
}

// Place measures x against the training ranges.
func (m *TargetModel) Place(x []float64) Placement {
	return Placement{Reach: m.Reach(x), OutOfRange: m.OutOfRange(x) > 0}
}

// Reach is how far x lies outside the training ranges, as the spread of
// the extrapolation's error (Support.Reach); zero in range or without a
// Support.
func (m *TargetModel) Reach(x []float64) Reach { return m.Support.Reach(m.Ranges, x) }

func (m *TargetModel) base(x []float64) float64 {
	return math.Max(m.Linear.Predict(x), m.BaseFloorMs)
}

func (m *TargetModel) clamp(y float64) float64 {
	if math.IsNaN(y) {
		return m.MinMs
	}
	return math.Min(math.Max(y, m.MinMs), m.MaxMs)
}

// OutOfRange reports how many features of x lie outside the training ranges.
func (m *TargetModel) OutOfRange(x []float64) int {
	n := 0
	for i, r := range m.Ranges {
		if x[i] < r.Min || x[i] > r.Max {
			n++
		}
	}
	return n
}
