package fidelity

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/gonum/mat"

	"github.com/headroomhq/headroom/lab/sim"
)

// fitMetrics are the metrics the fit matches, on the stages that are not
// overloaded: the latencies' means and 90th percentiles. Throughput is
// left out (below saturation it is the offered rate whatever the model).
// Of an overloaded stage only the per-token time is fitted (overloadMetrics),
// the steady decode of a full batch: its failures, queues and so TTFTs
// turn on thresholds a least-squares step cannot follow; they are
// predicted, not fitted.
var (
	fitMetrics      = []string{TTFTMean, TTFTP90, PerTokenMean, PerTokenP90, E2EMean, E2EP90}
	overloadMetrics = []string{PerTokenMean, PerTokenP90}
)

// coefficient is one fitted coefficient: how to read and set it, and
// whether it is a multiplier of a data sheet's ideal time, which no real
// kernel beats (so it stays at 1 or above).
type coefficient struct {
	name     string
	get      func(*sim.Coefficients) *float64
	atLeast1 bool
}

var coefficients = []coefficient{
	{"weights", func(c *sim.Coefficients) *float64 { return &c.Weights }, true},
	{"kv", func(c *sim.Coefficients) *float64 { return &c.KV }, true},
	{"compute", func(c *sim.Coefficients) *float64 { return &c.Compute }, true},
	{"link", func(c *sim.Coefficients) *float64 { return &c.Link }, true},
	{"step_us", func(c *sim.Coefficients) *float64 { return &c.StepUs }, false},
	{"seq_us", func(c *sim.Coefficients) *float64 { return &c.SeqUs }, false},
	{"all_reduce_us", func(c *sim.Coefficients) *float64 { return &c.AllReduce }, false},
	{"frontend_ms", func(c *sim.Coefficients) *float64 { return &c.FrontendMs }, false},
}

// Prior is what the coefficients are before any run is seen, from public
// knowledge of the hardware and of vLLM, not from the runs: weight
// streaming at about 87% of peak memory bandwidth (a GEMV's usual
// ceiling), paged attention at about 75%, large bf16 GEMMs at about 60%
// of the dense tensor rate, NCCL all-reduces at about half the link's rate
// and about 15 µs each, a millisecond of scheduling per step, a few
// microseconds per scheduled sequence, and a few milliseconds of HTTP
// serving. The fit pulls the coefficients from it only as far as the runs
// pay for (FitOptions.PriorWeight), so that a coefficient the runs barely
// constrain stays where physics puts it instead of wandering to trade
// against another.
func Prior() sim.Coefficients {
	return sim.Coefficients{Weights: 1.15, KV: 1.3, Compute: 1.6, Link: 2, StepUs: 1000, SeqUs: 5, AllReduce: 15, FrontendMs: 5}
}

// DefaultPriorWeight is FitOptions.PriorWeight's default: moving one
// coefficient by a factor of e from its prior costs as much as 0.2 of log
// error summed over the runs (two points of mean |log error| over ten
// runs); a move of 20% costs a twenty-fifth of that.
const DefaultPriorWeight = 0.2

// FitOptions steer Fit.
type FitOptions struct {
	// Prior is where the coefficients are pulled back to, PriorWeight how
	// hard (per coefficient, against 1 per run); zero values mean Prior()
	// and DefaultPriorWeight, a negative weight no pull.
	Prior       *sim.Coefficients
	PriorWeight float64
	// Iterations bounds the Levenberg–Marquardt iterations (0: 12).
	Iterations int
	// Progress, when set, hears of every iteration.
	Progress func(string)
}

// Fit finds the Roofline coefficients that best predict runs, starting
// from init: the log of each coefficient is moved by damped Gauss–Newton
// (Levenberg–Marquardt) steps, the Jacobian by finite differences of whole
// simulations, to minimise the sum of the absolute log-ratios of
// predicted to measured latencies (fitMetrics, on the stages not
// overloaded; reweighted least squares), every run counting alike whatever
// its number of stages, plus each coefficient's log distance from its
// prior times the prior's weight. The multipliers of a data sheet's rates
// stay at 1 or above. Coefficients at zero stay at zero: a model without
// the term.
func Fit(ctx context.Context, runs []*Run, init sim.Coefficients, opts FitOptions) (sim.Coefficients, error) {
	if len(runs) == 0 {
		return sim.Coefficients{}, fmt.Errorf("fit: no runs")
	}
	iterations := opts.Iterations
	if iterations == 0 {
		iterations = 12
	}
	say := func(format string, args ...any) {
		if opts.Progress != nil {
			opts.Progress(fmt.Sprintf(format, args...))
		}
	}
	prior, pw := Prior(), opts.PriorWeight
	if opts.Prior != nil {
		prior = *opts.Prior
	}
	if pw == 0 {
		pw = DefaultPriorWeight
	}
	var free []coefficient
	for _, c := range coefficients {
		if *c.get(&init) > 0 {
			free = append(free, c)
		}
	}
	x := make([]float64, len(free))
	for i, c := range free {
		x[i] = math.Log(*c.get(&init))
	}
	coef := func(x []float64) sim.Coefficients {
		c := init
		for i, f := range free {
			*f.get(&c) = math.Exp(x[i])
		}
		return c
	}
	// eval is the figures' log errors with their weights (the L1 part of
	// the cost), then each free coefficient's log distance from its prior,
	// scaled so that its square is its part of the cost (a Gaussian prior:
	// small moves cheap, large ones dear).
	nPrior := 0
	eval := func(x []float64) (res, w []float64, err error) {
		if res, w, err = residuals(ctx, runs, coef(x)); err != nil {
			return nil, nil, err
		}
		nPrior = 0
		if pw > 0 {
			for i, f := range free {
				if p := *f.get(&prior); p > 0 {
					res, w = append(res, math.Sqrt(pw)*(x[i]-math.Log(p))), append(w, 1)
					nPrior++
				}
			}
		}
		return res, w, nil
	}
	// cost is the L1 of the figures plus the squares of the prior terms,
	// which come last.
	cost := func(r, w []float64) float64 {
		n := len(r) - nPrior
		c := l1(r[:n], w[:n])
		for _, x := range r[n:] {
			c += x * x
		}
		return c
	}
	bound := func(x []float64) {
		for i, f := range free {
			if f.atLeast1 {
				x[i] = max(x[i], 0)
			}
		}
	}
	bound(x)
	res, w, err := eval(x)
	if err != nil {
		return sim.Coefficients{}, err
	}
	best := cost(res, w)
	say("fit: start, cost %.4f over %d figures of %d runs", best, len(res)-nPrior, len(runs))
	lambda := 1e-2
	const h = 0.03 // the finite differences' step, in log units
	for it := 0; it < iterations; it++ {
		jac := mat.NewDense(len(res), len(free), nil)
		for j := range free {
			xh := slices.Clone(x)
			xh[j] += h
			rh, _, err := eval(xh)
			if err != nil {
				return sim.Coefficients{}, err
			}
			for i := range res {
				jac.Set(i, j, (rh[i]-res[i])/h)
			}
		}
		// Reweighted least squares for the L1 part: weight each figure by
		// the inverse of its error (bounded), its own weight beside; the
		// prior's squares are least squares already.
		wr := make([]float64, len(res))
		for i, r := range res {
			if i < len(res)-nPrior {
				wr[i] = w[i] / max(math.Abs(r), 0.01)
			} else {
				wr[i] = 2
			}
		}
		improved := false
		for try := 0; try < 6; try++ {
			step, ok := lmStep(jac, res, wr, lambda)
			if !ok {
				lambda *= 10
				continue
			}
			xn := slices.Clone(x)
			for j := range xn {
				xn[j] += max(-1, min(1, step[j])) // no coefficient moves by more than e× per step
			}
			bound(xn)
			rn, wn, err := eval(xn)
			if err != nil {
				return sim.Coefficients{}, err
			}
			if c := cost(rn, wn); c < best {
				gain := (best - c) / best
				x, res, w, best = xn, rn, wn, c
				lambda = max(lambda/3, 1e-6)
				improved = true
				say("fit: iteration %d, cost %.4f (%.2f%% better), %s", it+1, best, 100*gain, describe(coef(x)))
				if gain < 1e-3 {
					return coef(x), nil
				}
				break
			}
			lambda *= 10
		}
		if !improved {
			break
		}
	}
	return coef(x), nil
}

// lmStep solves (JᵀWJ + λ·diag(JᵀWJ))·Δ = −JᵀWr.
func lmStep(jac *mat.Dense, r, w []float64, lambda float64) ([]float64, bool) {
	_, n := jac.Dims()
	var a mat.Dense
	wj := mat.DenseCopyOf(jac)
	for i := range r {
		for j := range n {
			wj.Set(i, j, wj.At(i, j)*w[i])
		}
	}
	a.Mul(jac.T(), wj)
	g := make([]float64, n)
	for j := range n {
		for i := range r {
			g[j] -= wj.At(i, j) * r[i]
		}
		a.Set(j, j, a.At(j, j)*(1+lambda)+1e-9)
	}
	var d mat.VecDense
	if err := d.SolveVec(&a, mat.NewVecDense(n, g)); err != nil {
		return nil, false
	}
	return d.RawVector().Data, true
}

// residuals predicts every run with c and returns the log-ratio of each
// fitted figure, predicted to measured, and its weight: every run weighs
// 1, shared among its figures.
func residuals(ctx context.Context, runs []*Run, c sim.Coefficients) (res, weight []float64, err error) {
	for _, r := range runs {
		pred, err := Predict(ctx, r.Spec, c)
		if err != nil {
			return nil, nil, fmt.Errorf("run %s: %w", r.Name, err)
		}
		var rr []float64
		for k, ms := range r.Measured.Stages {
			metrics := fitMetrics
			if ms.Overloaded() {
				metrics = overloadMetrics
			}
			for _, m := range metrics {
				p, q := pred.Stages[k].Values[m], ms.Values[m]
				if !(q > 0) || math.IsNaN(p) {
					continue
				}
				if !(p > 0) {
					p = q * 1e-3 // a prediction of nothing: far off, not undefined
				}
				rr = append(rr, math.Log(p/q))
			}
		}
		for range rr {
			weight = append(weight, 1/float64(len(rr)))
		}
		res = append(res, rr...)
	}
	if len(res) == 0 {
		return nil, nil, fmt.Errorf("fit: no stage of these runs has a figure to fit (every stage overloaded?)")
	}
	return res, weight, nil
}

func l1(r, w []float64) float64 {
	t := 0.0
	for i, x := range r {
		t += w[i] * math.Abs(x)
	}
	return t
}

func describe(c sim.Coefficients) string {
	var parts []string
	for _, f := range coefficients {
		parts = append(parts, fmt.Sprintf("%s %.4g", f.name, *f.get(&c)))
	}
	return strings.Join(parts, ", ")
}

// Fold is one held-out group of a cross-validation: the coefficients
// fitted without it and its rows predicted with them.
type Fold struct {
	Held string
	Coef sim.Coefficients
	Rows []Row
}

// CrossValidate holds each group of runs out in turn (group names a run's
// group, e.g. its model), fits the coefficients on the others from init,
// and predicts the held-out runs with them. The rows of all folds
// together are predictions of runs the coefficients never saw.
func CrossValidate(ctx context.Context, runs []*Run, group func(*Run) string, init sim.Coefficients, opts FitOptions) ([]Fold, error) {
	var groups []string
	for _, r := range runs {
		if g := group(r); !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	if len(groups) < 2 {
		return nil, fmt.Errorf("cross-validation: one group (%v), need at least 2", groups)
	}
	var folds []Fold
	for _, g := range groups {
		var train, test []*Run
		for _, r := range runs {
			if group(r) == g {
				test = append(test, r)
			} else {
				train = append(train, r)
			}
		}
		if opts.Progress != nil {
			opts.Progress(fmt.Sprintf("cross-validation: holding out %s (%d runs), fitting on %d", g, len(test), len(train)))
		}
		c, err := Fit(ctx, train, init, opts)
		if err != nil {
			return nil, fmt.Errorf("holding out %s: %w", g, err)
		}
		rep, err := Evaluate(ctx, test, c)
		if err != nil {
			return nil, fmt.Errorf("holding out %s: %w", g, err)
		}
		folds = append(folds, Fold{Held: g, Coef: c, Rows: rep.Rows})
	}
	return folds, nil
}
