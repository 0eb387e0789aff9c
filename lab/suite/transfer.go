package suite

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/eval"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/trainer/fit"
)

// The KV-transfer target (issue 15) is predicted per pair of pods by a
// bandwidth law per link class (model.TransferModel), not per pod from a
// row, so package eval's replays, which score the per-pod targets, do not
// cover it. A trace whose rows carry measured transfers gets kv_transfer
// lines here instead, in the same two modes and on the same footing:
// Headroom's fit (fit.TransferLaw, the trainer's own) beside plain
// models given the same inputs, the transfer's link class, tokens, bytes
// and concurrent transfers:
//   - XGBoost with the reference's hyper-parameters on raw ms and on ln ms
//     (the class as a number; trees split it as they need);
//   - least squares with an intercept and a slope on bytes per link class
//     (classes differ by orders of magnitude, so one slope for all would be
//     a straw man) and a slope on concurrent transfers: a line per class,
//     fitted plainly, without the law's robust weights, non-negativity,
//     contention scaling with bytes, class ordering or calibration.

// minTransferFit is the fewest measured transfers a prequential walk fits
// on: the trainer's first model comes after 10 samples of a target.
const minTransferFit = 10

// transferPart is the share of a trace's transfers each split holds out,
// as eval.Split does with rows.
const transferPart = 0.1

// measured returns the samples with a measured transfer, in trace order.
func measured(samples []features.Sample) []features.Sample {
	var out []features.Sample
	for i := range samples {
		if _, ok := samples[i].Label(features.KVTransfer); ok {
			out = append(out, samples[i])
		}
	}
	return out
}

// transferModels are every model of one fit: Headroom's and the plain ones.
type transferModels struct {
	headroom    *model.TransferModel
	xgb, xgbLog *model.Trees
	linear      []float64 // coefficients over linearInputs
	bpt         float64   // bytes per token for transfers that do not say
}

// transferInputs are the plain models' inputs for a transfer.
func transferInputs(tr *features.Transfer, bpt float64) []float64 {
	if tr.BytesPerToken > 0 {
		bpt = tr.BytesPerToken
	}
	return []float64{float64(tr.Class()), float64(tr.Tokens), float64(tr.Tokens) * bpt / 1e6, float64(tr.Concurrent)}
}

// linearInputs are the least-squares model's: per link class an indicator
// and megabytes (zero for the other classes), then concurrent transfers.
func linearInputs(tr *features.Transfer, bpt float64) []float64 {
	x := make([]float64, 2*int(features.NumLinkClasses)+1)
	in := transferInputs(tr, bpt)
	c := int(tr.Class())
	x[2*c], x[2*c+1] = 1, in[2]
	x[len(x)-1] = in[3]
	return x
}

// fitTransferModels fits every model on train (samples with a measured
// transfer).
func fitTransferModels(ctx context.Context, train []features.Sample, opts eval.Options) (*transferModels, error) {
	h, err := fit.TransferLaw(ctx, train, nil, fit.TransferOptions{}, opts.Quantile)
	if err != nil {
		return nil, err
	}
	m := &transferModels{headroom: h, bpt: h.DefaultBytesPerToken}
	X := make([][]float64, len(train))
	L := make([][]float64, len(train))
	y := make([]float64, len(train))
	for i := range train {
		tr := train[i].Transfer
		X[i], L[i] = transferInputs(tr, m.bpt), linearInputs(tr, m.bpt)
		y[i] = tr.Ms
	}
	if m.xgb, m.xgbLog, err = eval.ReferenceTrees(ctx, opts.XGBoost, X, y); err != nil {
		return nil, fmt.Errorf("kv transfer baseline: %w", err)
	}
	if m.linear, err = leastSquares(L, y); err != nil {
		return nil, fmt.Errorf("kv transfer linear baseline: %w", err)
	}
	return m, nil
}

// leastSquares solves min ‖Xβ − y‖² with a ridge of 1e-9 of the largest
// column scale, so that a link class absent from the training rows (a zero
// column) gets a zero coefficient instead of a singular system.
func leastSquares(X [][]float64, y []float64) ([]float64, error) {
	k := len(X[0])
	xtx := mat.NewSymDense(k, nil)
	xty := mat.NewVecDense(k, nil)
	for i, row := range X {
		for a := range k {
			xty.SetVec(a, xty.AtVec(a)+row[a]*y[i])
			for b := a; b < k; b++ {
				xtx.SetSym(a, b, xtx.At(a, b)+row[a]*row[b])
			}
		}
	}
	scale := 0.0
	for a := range k {
		scale = math.Max(scale, xtx.At(a, a))
	}
	for a := range k {
		xtx.SetSym(a, a, xtx.At(a, a)+1e-9*scale+1e-12)
	}
	var chol mat.Cholesky
	if !chol.Factorize(xtx) {
		return nil, errors.New("normal equations are not positive definite")
	}
	var beta mat.VecDense
	if err := chol.SolveVecTo(&beta, xty); err != nil {
		return nil, err
	}
	return beta.RawVector().Data, nil
}

// score predicts every sample of test with every model and adds the
// predictions to sc; a transfer Headroom's model cannot bound (a link class
// with no seen class beyond it) is left out for all of them, so every model
// is scored on the same rows.
func (m *transferModels) score(test []features.Sample, q float64, sc *transferScores) {
	for i := range test {
		tr := test[i].Transfer
		h, ok := m.headroom.Predict(tr.Class(), tr.Tokens, tr.BytesPerToken, tr.Concurrent)
		if !ok {
			continue
		}
		x := transferInputs(tr, m.bpt)
		lin := 0.0
		for j, v := range linearInputs(tr, m.bpt) {
			lin += m.linear[j] * v
		}
		sc.add(tr.Ms, map[string]float64{
			eval.ModelHeadroom:   h,
			eval.ModelXGBoost:    m.xgb.Predict(x),
			eval.ModelXGBoostLog: math.Exp(m.xgbLog.Predict(x)),
			eval.ModelLinear:     lin,
		}, tr.Ms <= m.headroom.Quantile(tr.Class(), h, q))
	}
}

// transferScores accumulate absolute percentage errors per model and
// Headroom's quantile coverage.
type transferScores struct {
	rows, covered int
	ape           map[string]float64 // sum of |predicted − actual| / actual
}

func (s *transferScores) add(actual float64, predicted map[string]float64, covered bool) {
	if s.ape == nil {
		s.ape = map[string]float64{}
	}
	s.rows++
	if covered {
		s.covered++
	}
	for name, p := range predicted {
		s.ape[name] += math.Abs(p-actual) / actual
	}
}

// line is the scores as a suite line (percentages, best baseline, ratio).
func (s *transferScores) line(mode string) (Line, bool) {
	if s.rows == 0 {
		return Line{}, false
	}
	l := Line{Target: features.KVTransfer.String(), Mode: mode, Rows: s.rows, MAPE: map[string]float64{},
		Coverage: 100 * float64(s.covered) / float64(s.rows)}
	for name, sum := range s.ape {
		l.MAPE[name] = 100 * sum / float64(s.rows)
	}
	best := math.Inf(1)
	for _, b := range Baselines {
		if v := l.MAPE[b]; v < best {
			best, l.Best = v, b
		}
	}
	if best > 0 {
		l.Ratio = l.MAPE[eval.ModelHeadroom] / best
	}
	return l, true
}

// transferSplit holds out a random tenth of the measured transfers per seed
// (seeds 1..seeds), fits every model on the rest and scores the held-out
// ones, pooled over the seeds. false when the trace has too few transfers.
func transferSplit(ctx context.Context, samples []features.Sample, opts eval.Options, seeds int) (Line, bool, error) {
	all := measured(samples)
	nTest := int(math.Round(transferPart * float64(len(all))))
	if len(all)-nTest < minTransferFit || nTest == 0 {
		return Line{}, false, nil
	}
	var sc transferScores
	for seed := 1; seed <= seeds; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 0x7a5f))
		perm := rng.Perm(len(all))
		test := make([]features.Sample, 0, nTest)
		train := make([]features.Sample, 0, len(all)-nTest)
		for i, k := range perm {
			if i < nTest {
				test = append(test, all[k])
			} else {
				train = append(train, all[k])
			}
		}
		m, err := fitTransferModels(ctx, train, opts)
		if err != nil {
			return Line{}, false, fmt.Errorf("kv transfer split, seed %d: %w", seed, err)
		}
		m.score(test, opts.Quantile, &sc)
	}
	l, ok := sc.line(eval.ModeSplit)
	return l, ok, nil
}

// transferPrequential walks the trace in order, refitting every model on
// the transfers seen so far at every `every` rows of the trace (the
// trainer's cadence in eval.Prequential) once there are minTransferFit,
// and scores each transfer with the models fitted before its row arrived.
func transferPrequential(ctx context.Context, samples []features.Sample, opts eval.Options, every int) (Line, bool, error) {
	var (
		seen []features.Sample
		m    *transferModels
		sc   transferScores
	)
	for start := 0; start < len(samples); start += every {
		if len(seen) >= minTransferFit {
			var err error
			if m, err = fitTransferModels(ctx, seen, opts); err != nil {
				return Line{}, false, fmt.Errorf("kv transfer prequential at row %d: %w", start, err)
			}
		}
		block := measured(samples[start:min(start+every, len(samples))])
		if m != nil {
			m.score(block, opts.Quantile, &sc)
		}
		seen = append(seen, block...)
	}
	l, ok := sc.line(eval.ModePrequential)
	return l, ok, nil
}
