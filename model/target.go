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
	MinMs       float64     `json:"min_ms"`
	MaxMs       float64     `json:"max_ms"`
	Ranges      []Range     `json:"ranges"`
	Calibration Calibration `json:"calibration"`

	// Holdout figures of this model and of its linear part alone.
	Holdout       Quality `json:"holdout"`
	HoldoutLinear Quality `json:"holdout_linear"`

	TrainSamples    int       `json:"train_samples"`
	HoldoutSamples  int       `json:"holdout_samples"`
	TrainedAt       time.Time `json:"trained_at"`
	StoreGeneration uint64    `json:"store_generation"`
	TrainSeconds    float64   `json:"train_seconds"`

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
	if err := m.Calibration.Validate(); err != nil {
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
	var y float64
	switch m.Kind {
	case KindLogTrees:
		y = math.Exp(m.Trees.Predict(x))
	case KindResidual:
		y = m.base(x) * math.Exp(m.Trees.Predict(x))
	default:
		y = m.base(x)
	}
	return m.clamp(y)
}

// PredictLinear is the linear part alone, clamped like Predict.
func (m *TargetModel) PredictLinear(x []float64) float64 { return m.clamp(m.base(x)) }

// Quantile scales a central prediction to quantile q of the calibrated
// error distribution.
func (m *TargetModel) Quantile(central, q float64) float64 {
	return m.clamp(central * math.Exp(m.Calibration.LogResidual(q)))
}

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
