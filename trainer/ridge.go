package trainer

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/headroomhq/headroom/model"
)

// FitRidge fits a ridge regression of y on the rows of X with per-row
// weights (nil = equal). Features are standardised first so one penalty
// lambda means the same for every column; the intercept is not penalised.
// A constant column gets a zero coefficient.
func FitRidge(X [][]float64, y, weights []float64, lambda float64) (*model.Linear, error) {
	n := len(X)
	if n == 0 {
		return nil, fmt.Errorf("ridge: no rows")
	}
	if len(y) != n || (weights != nil && len(weights) != n) {
		return nil, fmt.Errorf("ridge: %d rows, %d labels, %d weights", n, len(y), len(weights))
	}
	p := len(X[0])
	w := make([]float64, n)
	var wsum float64
	for i := range w {
		w[i] = 1
		if weights != nil {
			w[i] = weights[i]
		}
		if !(w[i] >= 0) || math.IsInf(w[i], 0) {
			return nil, fmt.Errorf("ridge: weight %d is %v", i, w[i])
		}
		wsum += w[i]
	}
	if wsum <= 0 {
		return nil, fmt.Errorf("ridge: weights sum to zero")
	}
	// Normalise weights to mean 1 so lambda is comparable across data sets.
	for i := range w {
		w[i] *= float64(n) / wsum
	}

	lin := &model.Linear{Coef: make([]float64, p), Mean: make([]float64, p), Scale: make([]float64, p)}
	for j := 0; j < p; j++ {
		var sum, sq float64
		for i := range X {
			sum += w[i] * X[i][j]
		}
		mean := sum / float64(n)
		for i := range X {
			d := X[i][j] - mean
			sq += w[i] * d * d
		}
		lin.Mean[j] = mean
		lin.Scale[j] = math.Sqrt(sq / float64(n))
		if !(lin.Scale[j] > 1e-12) {
			lin.Scale[j] = 1 // constant column: standardised value is 0
		}
	}
	var ymean float64
	for i := range y {
		ymean += w[i] * y[i]
	}
	ymean /= float64(n)

	// Normal equations on centred, standardised data:
	// (Zᵀ W Z + λ I) β = Zᵀ W (y − ȳ).
	A := mat.NewSymDense(p, nil)
	b := mat.NewVecDense(p, nil)
	z := make([]float64, p)
	for i := range X {
		for j := 0; j < p; j++ {
			z[j] = (X[i][j] - lin.Mean[j]) / lin.Scale[j]
		}
		r := y[i] - ymean
		for j := 0; j < p; j++ {
			if z[j] == 0 {
				continue
			}
			b.SetVec(j, b.AtVec(j)+w[i]*z[j]*r)
			for k := j; k < p; k++ {
				A.SetSym(j, k, A.At(j, k)+w[i]*z[j]*z[k])
			}
		}
	}
	for j := 0; j < p; j++ {
		A.SetSym(j, j, A.At(j, j)+lambda)
	}
	var chol mat.Cholesky
	var beta mat.VecDense
	if chol.Factorize(A) {
		if err := chol.SolveVecTo(&beta, b); err != nil {
			return nil, fmt.Errorf("ridge: solve: %w", err)
		}
	} else if err := beta.SolveVec(A, b); err != nil {
		return nil, fmt.Errorf("ridge: normal equations are singular (lambda %v): %w", lambda, err)
	}
	lin.Intercept = ymean
	for j := 0; j < p; j++ {
		lin.Coef[j] = beta.AtVec(j)
	}
	if err := lin.Validate(p); err != nil {
		return nil, fmt.Errorf("ridge: %w", err)
	}
	return lin, nil
}
