package fit

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/headroomhq/headroom/model"
)

// LineOptions say how the linear base is fitted.
type LineOptions struct {
	// Lambdas are the candidate ridge penalties (on standardised features,
	// weights normalised to mean 1); K-fold cross-validation picks one.
	// One candidate means no search. The right penalty depends on the number
	// of rows: a first model on ten samples needs one that pulls it nearly
	// to a constant, a model on ten thousand hardly any.
	Lambdas []float64
	// Folds for the cross-validation (default 5).
	Folds int
	// Signs, when set, constrain each coefficient: +1 not negative, -1 not
	// positive, 0 free (features.Schema.Directions). A latency cannot fall
	// because a queue grew; on a few samples least squares can say it does,
	// and a negative slope extrapolates to nonsense.
	Signs []int
	// RobustIterations is the number of Huber reweighting passes (0: plain
	// weighted least squares); HuberK is the Huber threshold in robust
	// standard deviations of the relative residuals.
	RobustIterations int
	HuberK           float64
}

// Line fits a linear model of y on the rows of X minimising weighted
// squared error (weights 1/y² make it relative error), with the penalty
// chosen by cross-validation, sign constraints, and Huber reweighting so
// that a burst of stalled requests (TTFTs 50 times the usual, which no
// feature explains) does not tilt the line for every ordinary request.
// floor bounds predictions from below when computing residuals, as the
// model does. It also returns the chosen penalty.
func Line(X [][]float64, y, weights []float64, cfg LineOptions, floor float64) (*model.Linear, float64, error) {
	n := len(X)
	switch {
	case n == 0:
		return nil, 0, fmt.Errorf("line: no rows")
	case len(y) != n || len(weights) != n:
		return nil, 0, fmt.Errorf("line: %d rows, %d labels, %d weights", n, len(y), len(weights))
	case len(cfg.Lambdas) == 0:
		return nil, 0, fmt.Errorf("line: no candidate penalties")
	}
	p := len(X[0])
	if cfg.Signs != nil && len(cfg.Signs) != p {
		return nil, 0, fmt.Errorf("line: %d signs for %d features", len(cfg.Signs), p)
	}
	for i, row := range X {
		if len(row) != p {
			return nil, 0, fmt.Errorf("line: row %d has %d features, row 0 has %d", i, len(row), p)
		}
	}
	w := make([]float64, n)
	copy(w, weights)
	if err := normaliseWeights(w); err != nil {
		return nil, 0, fmt.Errorf("line: %w", err)
	}
	folds := cfg.Folds
	if folds < 2 {
		folds = 5
	}
	std := newStandardiser(X, w)

	// Huber weights come from a fit at a middling penalty; the penalty is
	// then chosen on the reweighted rows, so that the stalled requests the
	// weights discount do not decide it either, and the line refitted.
	lambda := cfg.Lambdas[len(cfg.Lambdas)/2]
	lin, rw := robustFit(std, X, y, w, lambda, cfg, floor)
	if len(cfg.Lambdas) > 1 {
		lambda = chooseLambda(std, X, y, rw, cfg.Lambdas, cfg.Signs, folds)
		lin, _ = robustFit(std, X, y, w, lambda, cfg, floor)
	}
	if err := lin.Validate(p); err != nil {
		return nil, 0, fmt.Errorf("line: %w", err)
	}
	return lin, lambda, nil
}

// robustFit fits the line at one penalty with cfg.RobustIterations passes
// of Huber reweighting of the relative residuals, and returns it with the
// last weights used.
func robustFit(std standardiser, X [][]float64, y, w []float64, lambda float64, cfg LineOptions, floor float64) (*model.Linear, []float64) {
	g := std.gram(X, y, w, 1)[0]
	lin := std.linear(solveSigned(g.A, g.b, lambda, cfg.Signs))
	n := len(y)
	abs := make([]float64, n)
	rw := append([]float64(nil), w...)
	for range cfg.RobustIterations {
		for i := range y {
			abs[i] = math.Abs(y[i]-math.Max(lin.Predict(X[i]), floor)) / y[i]
		}
		scale := 1.4826 * Median(abs)
		if !(scale > 1e-9) {
			break
		}
		delta := cfg.HuberK * scale
		for i := range w {
			rw[i] = w[i]
			if abs[i] > delta {
				rw[i] *= delta / abs[i]
			}
		}
		g := std.gram(X, y, rw, 1)[0]
		lin = std.linear(solveSigned(g.A, g.b, lambda, cfg.Signs))
	}
	return lin, rw
}

func normaliseWeights(w []float64) error {
	var sum float64
	for i, v := range w {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("weight %d is %v", i, v)
		}
		sum += v
	}
	if !(sum > 0) || math.IsInf(sum, 0) {
		return fmt.Errorf("weights sum to %v", sum)
	}
	for i := range w {
		w[i] *= float64(len(w)) / sum
	}
	return nil
}

// standardiser maps features to z = (x − mean) / scale, with a leading 1
// for the intercept.
type standardiser struct {
	mean, scale []float64
}

func newStandardiser(X [][]float64, w []float64) standardiser {
	n, p := len(X), len(X[0])
	s := standardiser{mean: make([]float64, p), scale: make([]float64, p)}
	for j := 0; j < p; j++ {
		var sum, sq float64
		for i := range X {
			sum += w[i] * X[i][j]
		}
		s.mean[j] = sum / float64(n)
		for i := range X {
			d := X[i][j] - s.mean[j]
			sq += w[i] * d * d
		}
		s.scale[j] = math.Sqrt(sq / float64(n))
		if !(s.scale[j] > 1e-12) {
			s.scale[j] = 1 // constant column: its z is 0
		}
	}
	return s
}

func (s standardiser) linear(beta []float64) *model.Linear {
	p := len(s.mean)
	return &model.Linear{
		Intercept: beta[0],
		Coef:      append([]float64(nil), beta[1:]...),
		Mean:      append(make([]float64, 0, p), s.mean...),
		Scale:     append(make([]float64, 0, p), s.scale...),
	}
}

// gramStats are the sufficient statistics of weighted least squares on
// z = (1, standardised x): A = Σ w z zᵀ, b = Σ w z y, c = Σ w y².
type gramStats struct {
	A *mat.SymDense
	b *mat.VecDense
	c float64
}

// gram returns the statistics of each of folds folds, rows going to fold
// i % folds; with folds == 1, of all rows.
func (s standardiser) gram(X [][]float64, y, w []float64, folds int) []gramStats {
	q := len(s.mean) + 1
	out := make([]gramStats, folds)
	for f := range out {
		out[f] = gramStats{A: mat.NewSymDense(q, nil), b: mat.NewVecDense(q, nil)}
	}
	// Accumulate in plain slices; SymDense.At/SetSym per element is slow.
	a := make([][]float64, folds)
	bv := make([][]float64, folds)
	for f := range a {
		a[f] = make([]float64, q*q)
		bv[f] = make([]float64, q)
	}
	z := make([]float64, q)
	for i := range X {
		f := i % folds
		af, bf := a[f], bv[f]
		z[0] = 1
		for j, v := range X[i] {
			z[j+1] = (v - s.mean[j]) / s.scale[j]
		}
		wi := w[i]
		for j := 0; j < q; j++ {
			wz := wi * z[j]
			if wz == 0 {
				continue
			}
			bf[j] += wz * y[i]
			row := af[j*q:]
			for k := j; k < q; k++ {
				row[k] += wz * z[k]
			}
		}
		out[f].c += wi * y[i] * y[i]
	}
	for f := range out {
		for j := 0; j < q; j++ {
			out[f].b.SetVec(j, bv[f][j])
			for k := j; k < q; k++ {
				out[f].A.SetSym(j, k, a[f][j*q+k])
			}
		}
	}
	return out
}

// chooseLambda returns, by K-fold cross-validation of the weighted squared
// error, the largest candidate whose error is within one standard error of
// the smallest (the "one-standard-error rule"): on a dozen rows the fold
// errors scatter widely, and the rule then picks a nearly constant model
// rather than a slope that fit three rows by chance. With fewer than two
// rows per fold it returns the largest candidate: there is nothing to
// validate on, and the simplest model is the safe one.
func chooseLambda(std standardiser, X [][]float64, y, w []float64, lambdas []float64, signs []int, folds int) float64 {
	largest := lambdas[0]
	for _, l := range lambdas[1:] {
		largest = math.Max(largest, l)
	}
	if len(X) < 2*folds {
		return largest
	}
	fs := std.gram(X, y, w, folds)
	q := len(std.mean) + 1
	total := gramStats{A: mat.NewSymDense(q, nil), b: mat.NewVecDense(q, nil)}
	for _, f := range fs {
		total.A.AddSym(total.A, f.A)
		total.b.AddVec(total.b, f.b)
	}
	trainA := mat.NewSymDense(q, nil)
	trainB := mat.NewVecDense(q, nil)
	betaVec := mat.NewVecDense(q, nil)
	var Ab mat.VecDense
	mean := make([]float64, len(lambdas))
	se := make([]float64, len(lambdas))
	loss := make([]float64, folds)
	for li, lambda := range lambdas {
		for fi, f := range fs {
			for j := 0; j < q; j++ {
				for k := j; k < q; k++ {
					trainA.SetSym(j, k, total.A.At(j, k)-f.A.At(j, k))
				}
			}
			trainB.SubVec(total.b, f.b)
			beta := solveSigned(trainA, trainB, lambda, signs)
			for j, v := range beta {
				betaVec.SetVec(j, v)
			}
			// Held-out loss Σ w (y − zβ)² = c − 2 βᵀb + βᵀAβ.
			Ab.MulVec(f.A, betaVec)
			loss[fi] = f.c - 2*mat.Dot(betaVec, f.b) + mat.Dot(betaVec, &Ab)
		}
		var sum, sq float64
		for _, l := range loss {
			sum += l
		}
		mean[li] = sum / float64(folds)
		for _, l := range loss {
			sq += (l - mean[li]) * (l - mean[li])
		}
		se[li] = math.Sqrt(sq / float64(folds-1) / float64(folds))
	}
	bestI := 0
	for i := range lambdas {
		if mean[i] < mean[bestI] {
			bestI = i
		}
	}
	if math.IsNaN(mean[bestI]) || math.IsInf(mean[bestI], 0) {
		return largest
	}
	chosen := lambdas[bestI]
	for i, l := range lambdas {
		if mean[i] <= mean[bestI]+se[bestI] && l > chosen {
			chosen = l
		}
	}
	return chosen
}

// solveSigned minimises βᵀAβ − 2βᵀb + λ Σ_{j≥1} β_j² (index 0, the
// intercept, unpenalised) subject to signs[j−1]·β_j ≥ 0 where signs is
// non-zero, by an active-set method: solve on the free coefficients, pin
// those of the wrong sign at zero, and free again a pinned one whose
// gradient says it would move the right way. signs nil means unconstrained.
func solveSigned(A *mat.SymDense, b *mat.VecDense, lambda float64, signs []int) []float64 {
	q := b.Len()
	free := make([]bool, q)
	for j := range free {
		free[j] = true
	}
	beta := make([]float64, q)
	for range 3*q + 3 {
		solveFree(A, b, lambda, free, beta)
		if signs == nil {
			return beta
		}
		violated := false
		for j := 1; j < q; j++ {
			if free[j] && float64(signs[j-1])*beta[j] < 0 {
				free[j], beta[j] = false, 0
				violated = true
			}
		}
		if violated {
			continue
		}
		// KKT: a pinned coefficient whose gradient points into its allowed
		// side would lower the loss if freed.
		bestJ, bestG := -1, 0.0
		for j := 1; j < q; j++ {
			if free[j] {
				continue
			}
			g := b.AtVec(j)
			for k := 0; k < q; k++ {
				g -= A.At(j, k) * beta[k]
			}
			g *= float64(signs[j-1])
			if g > 1e-9*(math.Abs(b.AtVec(j))+1) && g > bestG {
				bestJ, bestG = j, g
			}
		}
		if bestJ < 0 {
			return beta
		}
		free[bestJ] = true
	}
	// Did not settle (a cycle between near-ties): the last iterate with
	// every violator pinned is feasible.
	for j := 1; j < q; j++ {
		if signs[j-1] != 0 && float64(signs[j-1])*beta[j] < 0 {
			beta[j] = 0
		}
	}
	return beta
}

// solveFree solves the penalised normal equations on the free coefficients
// into beta, setting the others to zero.
func solveFree(A *mat.SymDense, b *mat.VecDense, lambda float64, free []bool, beta []float64) {
	var idx []int
	for j, f := range free {
		if f {
			idx = append(idx, j)
		} else {
			beta[j] = 0
		}
	}
	m := len(idx)
	sub := mat.NewSymDense(m, nil)
	rhs := mat.NewVecDense(m, nil)
	for a, j := range idx {
		rhs.SetVec(a, b.AtVec(j))
		for c := a; c < m; c++ {
			sub.SetSym(a, c, A.At(j, idx[c]))
		}
		pen := lambda
		if j == 0 {
			// The intercept is unpenalised; a tiny ridge keeps the system
			// solvable when the rows are degenerate.
			pen = 1e-9
		}
		sub.SetSym(a, a, sub.At(a, a)+pen)
	}
	var x mat.VecDense
	var chol mat.Cholesky
	ok := chol.Factorize(sub)
	if ok {
		ok = chol.SolveVecTo(&x, rhs) == nil
	}
	if !ok {
		if err := x.SolveVec(sub, rhs); err != nil {
			// Singular even with the ridge: keep only the intercept, the
			// weighted mean.
			for j := range beta {
				beta[j] = 0
			}
			if A.At(0, 0) > 0 {
				beta[0] = b.AtVec(0) / A.At(0, 0)
			}
			return
		}
	}
	for a, j := range idx {
		beta[j] = x.AtVec(a)
	}
}
