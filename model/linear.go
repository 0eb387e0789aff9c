package model

import (
	"fmt"
	"math"
)

// Linear is a linear model over standardised features:
//
//	y = Intercept + Σ Coef[i] · (x[i] − Mean[i]) / Scale[i]
//
// It extrapolates where trees cannot: past the largest prompt seen in
// training a tree repeats its last leaf, a line keeps rising.
type Linear struct {
	Intercept float64   `json:"intercept"`
	Coef      []float64 `json:"coef"`
	Mean      []float64 `json:"mean"`
	Scale     []float64 `json:"scale"`
}

// Predict evaluates the model on a feature vector of the schema it was fit on.
func (l *Linear) Predict(x []float64) float64 {
	y := l.Intercept
	for i, c := range l.Coef {
		y += c * (x[i] - l.Mean[i]) / l.Scale[i]
	}
	return y
}

// OriginalUnits returns the intercept and coefficients for unstandardised
// features, the form operators and llm-d's /metrics parser expect.
func (l *Linear) OriginalUnits() (intercept float64, coef []float64) {
	intercept = l.Intercept
	coef = make([]float64, len(l.Coef))
	for i, c := range l.Coef {
		coef[i] = c / l.Scale[i]
		intercept -= c * l.Mean[i] / l.Scale[i]
	}
	return intercept, coef
}

// Validate checks that the model can be evaluated on n features without
// panicking or producing a non-finite number from finite input.
func (l *Linear) Validate(n int) error {
	if len(l.Coef) != n || len(l.Mean) != n || len(l.Scale) != n {
		return fmt.Errorf("linear model: %d coefficients, %d means, %d scales for %d features",
			len(l.Coef), len(l.Mean), len(l.Scale), n)
	}
	if !finite(l.Intercept) {
		return fmt.Errorf("linear model: intercept is not finite")
	}
	for i := range l.Coef {
		if !finite(l.Coef[i]) || !finite(l.Mean[i]) || !finite(l.Scale[i]) || l.Scale[i] <= 0 {
			return fmt.Errorf("linear model: feature %d has coefficient %v, mean %v, scale %v",
				i, l.Coef[i], l.Mean[i], l.Scale[i])
		}
	}
	return nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
