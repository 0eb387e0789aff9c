package model

import (
	"fmt"
	"math"
	"sort"
)

// DefaultQuantile is the quantile Headroom serves and tracks unless told
// otherwise: the one place it is written. The router's client defaults to
// it too (docs/PROTOCOL.md §4.4).
const DefaultQuantile = 0.9

// BoundsLow and BoundsHigh are the quantiles a prediction's bounds are
// reported at, beside the quantile served.
const (
	BoundsLow  = 0.05
	BoundsHigh = 0.95
)

// calibrationGrid is the number of evenly spaced probabilities at which a
// Calibration stores its residual quantiles: 1%, 2%, …, 99%.
const calibrationGrid = 99

// Calibration is the distribution of log(actual / predicted) on rows the
// model did not train on. Quantile predictions and bounds come from it: XGBoost
// 1.7 has no quantile objective, and a calibrated residual quantile means what
// it says, where the reference's fixed ±10% did not.
type Calibration struct {
	// Source says where the residuals came from; the trainer writes
	// "forward" (earlier models' errors on samples that arrived after
	// they were trained), "holdout+cross-fit" (this model's holdout errors
	// pooled with out-of-fold errors on its training rows) or "cross-fit".
	// Bundles from earlier trainers may say "holdout" or
	// "cross-validation". It is informational: nothing depends on it.
	Source string `json:"source"`
	Rows   int    `json:"rows"`
	// LogResiduals[i] is the (i+1)% quantile of log(actual/predicted).
	LogResiduals []float64 `json:"log_residuals"`
	// Adjustment, when set, serves quantile levels other than the ones
	// asked for: the trainer's adaptive conformal correction of the
	// coverage its live samples realised (LevelAdjustment). Nil: every
	// level as asked.
	Adjustment *LevelAdjustment `json:"adjustment,omitempty"`
	// OutOfRange, when set, is the level adjustment served instead of
	// Adjustment to rows outside the model's training ranges, learned from
	// the live samples that arrive there alone: those rows meet
	// extrapolation errors the in-range level neither sees nor should
	// make up for (ServedAt). Nil: they are served like rows in range.
	// Bundles written before it decode without it.
	OutOfRange *LevelAdjustment `json:"out_of_range_adjustment,omitempty"`
}

// ServedAt returns the calibration and the level at which quantile q of a
// row is read, whether or not the row lies outside the training ranges
// (outOfRange). In range, and out of range without an OutOfRange
// adjustment, that is c and q: c's own Adjustment maps the level as it
// reads. Out of range with one, it is c without Adjustment read at the
// level OutOfRange maps q to, and that level is the whole out-of-range
// distribution's (Support.LogResidual): the extrapolation's spread is read
// at it too, since a bound that misses far rows is short in both parts.
func (c Calibration) ServedAt(q float64, outOfRange bool) (Calibration, float64) {
	if !outOfRange || c.OutOfRange == nil {
		return c, q
	}
	level := c.OutOfRange.Map(q)
	c.Adjustment = nil
	return c, level
}

// LevelAdjustment moves the residual level a quantile is read at, so that
// the served Quantile covers what it claims when the residuals the
// calibration was made from are narrower than the errors that follow them:
// calibrated on the last window of forward errors, a model serving a load
// that keeps rising meets larger errors than that window held. The trainer
// learns Level by adaptive conformal inference (Gibbs & Candès, 2021) on
// the samples that arrive: each one above the served quantile raises it,
// each one at or below lowers it, in the proportions that balance at the
// claimed coverage.
//
// Level is the level served for Quantile exactly. The other levels on
// Quantile's side of the median are stretched with it, piecewise linearly
// through (0.5, 0.5), (Quantile, Level) and (1, 1) (mirrored below the
// median; through (0, 0), (0.5, Level) and (1, 1) when Quantile is the
// median): a 0.9 corrected to 0.93 serves 0.95 at 0.965 and leaves the
// median and the lower bounds as calibrated.
type LevelAdjustment struct {
	Quantile float64 `json:"quantile"`
	Level    float64 `json:"level"`
	// Samples is how many live samples have moved the level so far
	// (informational).
	Samples int `json:"samples"`
}

// MinAdjustedLevel and MaxAdjustedLevel bound a LevelAdjustment's Level: the
// calibration's grid holds its end values beyond them.
const (
	MinAdjustedLevel = 1.0 / (calibrationGrid + 1)
	MaxAdjustedLevel = calibrationGrid / (calibrationGrid + 1.0)
)

// Map returns the level at which quantile p is read. A nil adjustment
// returns p.
func (a *LevelAdjustment) Map(p float64) float64 {
	if a == nil {
		return p
	}
	q, l := a.Quantile, a.Level
	lo, hi := [2]float64{0, 0}, [2]float64{1, 1}
	switch {
	case q > 0.5 && p < 0.5, q < 0.5 && p > 0.5:
		return p
	case q > 0.5:
		lo = [2]float64{0.5, 0.5}
	case q < 0.5:
		hi = [2]float64{0.5, 0.5}
	}
	if p <= q {
		return lo[1] + (l-lo[1])*(p-lo[0])/(q-lo[0])
	}
	return l + (hi[1]-l)*(p-q)/(hi[0]-q)
}

// Validate checks a decoded adjustment: its level on the same side of the
// median as its quantile, so the map keeps every level in order.
func (a *LevelAdjustment) Validate() error {
	if a == nil {
		return nil
	}
	q, l := a.Quantile, a.Level
	switch {
	case !(q > 0 && q < 1):
		return fmt.Errorf("level adjustment: quantile %v outside (0, 1)", q)
	case !(l >= MinAdjustedLevel && l <= MaxAdjustedLevel):
		return fmt.Errorf("level adjustment: level %v outside [%v, %v]", l, MinAdjustedLevel, MaxAdjustedLevel)
	case q > 0.5 && l <= 0.5, q < 0.5 && l >= 0.5:
		return fmt.Errorf("level adjustment: level %v is across the median from quantile %v", l, q)
	case a.Samples < 0:
		return fmt.Errorf("level adjustment: %d samples", a.Samples)
	}
	return nil
}

// NewCalibration summarises residuals log(actual/predicted). It needs at
// least one; every value must be finite.
func NewCalibration(source string, logResiduals []float64) (Calibration, error) {
	if len(logResiduals) == 0 {
		return Calibration{}, fmt.Errorf("calibration: no residuals")
	}
	r := append([]float64(nil), logResiduals...)
	for _, v := range r {
		if !finite(v) {
			return Calibration{}, fmt.Errorf("calibration: non-finite residual %v", v)
		}
	}
	sort.Float64s(r)
	c := Calibration{Source: source, Rows: len(r), LogResiduals: make([]float64, calibrationGrid)}
	for i := range c.LogResiduals {
		c.LogResiduals[i] = conformalQuantile(r, float64(i+1)/(calibrationGrid+1))
		if i > 0 && c.LogResiduals[i] < c.LogResiduals[i-1] {
			// Interpolation between nearly equal residuals can wobble by
			// an ulp; quantiles must never decrease (Validate refuses it).
			c.LogResiduals[i] = c.LogResiduals[i-1]
		}
	}
	return c, nil
}

// LogResidual returns the q quantile of log(actual/predicted), read at the
// level the Adjustment maps q to, interpolating between grid points and
// holding the end values beyond 1% and 99%. A zero Calibration returns 0:
// the central prediction.
func (c Calibration) LogResidual(q float64) float64 {
	n := len(c.LogResiduals)
	if n == 0 {
		return 0
	}
	pos := c.Adjustment.Map(q)*(calibrationGrid+1) - 1 // index in the grid, fractional
	switch {
	case pos <= 0:
		return c.LogResiduals[0]
	case pos >= float64(n-1):
		return c.LogResiduals[n-1]
	}
	i := int(pos)
	f := pos - float64(i)
	return c.LogResiduals[i]*(1-f) + c.LogResiduals[i+1]*f
}

// Validate checks a decoded calibration.
func (c Calibration) Validate() error {
	if len(c.LogResiduals) != 0 && len(c.LogResiduals) != calibrationGrid {
		return fmt.Errorf("calibration: %d quantiles, want %d", len(c.LogResiduals), calibrationGrid)
	}
	for i, v := range c.LogResiduals {
		if !finite(v) || math.Abs(v) > 50 {
			return fmt.Errorf("calibration: quantile %d is %v", i, v)
		}
		if i > 0 && v < c.LogResiduals[i-1] {
			return fmt.Errorf("calibration: quantiles decrease at %d", i)
		}
	}
	if err := c.Adjustment.Validate(); err != nil {
		return err
	}
	if err := c.OutOfRange.Validate(); err != nil {
		return fmt.Errorf("out of range: %w", err)
	}
	return nil
}

// conformalQuantile is the q quantile of sorted residuals as split
// conformal prediction takes it: the value at rank q·(n+1) (1-based,
// interpolated, held at the ends) rather than 1 + q·(n−1). A new row is
// then at or below it with probability at least q when it is exchangeable
// with the calibration rows. The difference matters only for few rows: at
// 20 residuals the 90% point moves from rank 18.1 to 18.9.
func conformalQuantile(sorted []float64, q float64) float64 {
	n := len(sorted)
	pos := q*float64(n+1) - 1
	switch {
	case pos <= 0:
		return sorted[0]
	case pos >= float64(n-1):
		return sorted[n-1]
	}
	i := int(pos)
	f := pos - float64(i)
	return sorted[i] + (sorted[i+1]-sorted[i])*f
}

// sortedQuantile is the linearly interpolated q quantile of sorted values
// (the "type 7" definition numpy uses by default).
func sortedQuantile(sorted []float64, q float64) float64 {
	if len(sorted) == 1 {
		return sorted[0]
	}
	pos := q * float64(len(sorted)-1)
	i := int(pos)
	if i >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	f := pos - float64(i)
	return sorted[i] + (sorted[i+1]-sorted[i])*f
}
