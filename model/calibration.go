package model

import (
	"fmt"
	"math"
	"sort"
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

// LogResidual returns the q quantile of log(actual/predicted), interpolating
// between grid points and holding the end values beyond 1% and 99%. A zero
// Calibration returns 0: the central prediction.
func (c Calibration) LogResidual(q float64) float64 {
	n := len(c.LogResiduals)
	if n == 0 {
		return 0
	}
	pos := q*(calibrationGrid+1) - 1 // index in the grid, fractional
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
