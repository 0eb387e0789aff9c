package fit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"gonum.org/v1/gonum/mat"
)

// TransferOptions say how the KV-transfer model is fitted
// (model.TransferModel): one bandwidth law per link class,
//
//	ms = latency + bytes · (a + c·(k − 1))   with k transfers on the path,
//	ms = latency + bytes · u                 when k is not reported,
//
// so a = 1/bandwidth, c/a the contention and u/a the byte-time factor of a
// transfer of unknown concurrency. It is linear in (latency, a, c, u), which
// makes the fit a small weighted least-squares problem per class, solved
// exactly with every parameter kept non-negative, and robust through
// iteratively reweighted Huber weights on the relative error.
type TransferOptions struct {
	// BytesPerToken is the pool's KV-cache bytes per token, for samples that
	// do not report kv_bytes_per_token (--kv-bytes-per-token). 0: the median
	// of what the samples report, or, when none does, 1: the law is then in
	// tokens, and DefaultBytesPerToken says so.
	BytesPerToken float64
	// MinClassSamples is the fewest training samples a link class needs for
	// a law of its own (default 5); a class with fewer borrows from a
	// farther one (model.TransferModel.Predict).
	MinClassSamples int
	// CrossFitFolds (default 5) is how many folds the out-of-fold residuals
	// the calibration comes from are fitted on.
	CrossFitFolds int
	// MinClassCalibration (default 30) is the fewest residuals a class needs
	// for a calibration of its own; fewer use the pooled one.
	MinClassCalibration int
}

func (c *TransferOptions) setDefaults() {
	if c.MinClassSamples <= 0 {
		c.MinClassSamples = 5
	}
	if c.CrossFitFolds < 2 {
		c.CrossFitFolds = 5
	}
	if c.MinClassCalibration <= 0 {
		c.MinClassCalibration = 30
	}
}

// ErrTooFewTransfers is TransferLaw's error when no link class has
// TransferOptions.MinClassSamples training samples yet: a wait, not a
// failure.
var ErrTooFewTransfers = errors.New("kv transfer: too few samples of any one link class")

// transferMaxMs is the ceiling of a transfer prediction: the wire's ceiling
// on any measured latency.
const transferMaxMs = 3_600_000

// transferRow is one measured transfer, as the law sees it.
type transferRow struct {
	class      features.LinkClass
	tokens     int64
	bytes      float64
	concurrent int64
	ms         float64
}

// transferRows converts samples labelled for target t (KVTransfer or
// SplitTTFT) into the law's rows, bytes per token defaulting to
// bytesPerToken: the label is the row's ms. Samples without one, or with
// values no law can use, are left out.
func transferRows(samples []features.Sample, t features.Target, bytesPerToken float64) []transferRow {
	rows := make([]transferRow, 0, len(samples))
	for i := range samples {
		tr := samples[i].Transfer
		ms, ok := samples[i].Label(t)
		if tr == nil || !ok || math.IsInf(ms, 0) || tr.Tokens < 0 {
			continue
		}
		bpt := tr.BytesPerToken
		if !(bpt > 0) || math.IsInf(bpt, 0) {
			bpt = bytesPerToken
		}
		c := tr.Class()
		if c < 0 || c >= features.NumLinkClasses {
			continue
		}
		rows = append(rows, transferRow{class: c, tokens: tr.Tokens, bytes: float64(tr.Tokens) * bpt,
			concurrent: max(tr.Concurrent, 0), ms: ms})
	}
	return rows
}

// transferBytesPerToken is the bytes per token a fit assumes for samples
// that do not say: the configured pool setting, else the median reported,
// else 1 (a law in tokens).
func transferBytesPerToken(samples []features.Sample, configured float64) float64 {
	if configured > 0 && !math.IsInf(configured, 0) {
		return configured
	}
	var seen []float64
	for i := range samples {
		if tr := samples[i].Transfer; tr != nil && tr.BytesPerToken > 0 && !math.IsInf(tr.BytesPerToken, 0) {
			seen = append(seen, tr.BytesPerToken)
		}
	}
	if len(seen) == 0 {
		return 1
	}
	sort.Float64s(seen)
	return seen[len(seen)/2]
}

// TransferLaw fits the KV-transfer model on the training samples with a
// measured transfer, calibrates it on out-of-fold residuals, and measures
// it on the held-out ones, the coverage of its quantile q (strictly
// between 0 and 1).
func TransferLaw(ctx context.Context, train, holdout []features.Sample, cfg TransferOptions, q float64) (*model.TransferModel, error) {
	return Law(ctx, features.KVTransfer, train, holdout, cfg, q)
}

// Law fits target t's law per link class, as TransferLaw does the KV
// transfer's, on the samples labelled for t: for features.SplitTTFT the
// whole TTFT of a disaggregated request, so that the law's latency holds
// the prefill's fixed part and the first decode step and its per-byte
// term the prefill and the transfer of the tokens that move. It is how a
// pair is predicted from what llm-d reports, which does not time the
// transfer.
func Law(ctx context.Context, t features.Target, train, holdout []features.Sample, cfg TransferOptions, q float64) (*model.TransferModel, error) {
	what := lawName(t)
	if !(q > 0 && q < 1) {
		return nil, fmt.Errorf("%s: quantile %v, want a value strictly between 0 and 1", what, q)
	}
	cfg.setDefaults()
	start := time.Now()
	bpt := transferBytesPerToken(train, cfg.BytesPerToken)
	rows := transferRows(train, t, bpt)
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: no training samples with a measured %s", ErrTooFewTransfers, what)
	}
	m, err := fitTransferLaws(rows, bpt, cfg.MinClassSamples)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := calibrateTransfer(m, rows, cfg); err != nil {
		return nil, err
	}
	if err := m.Prepare(); err != nil {
		return nil, fmt.Errorf("%s: fitted model is inconsistent: %w", what, err)
	}
	measureTransfer(m, believableTransfers(m, transferRows(holdout, t, bpt), rows), q)
	m.TrainSamples, m.HoldoutSamples = len(rows), m.Holdout.Rows
	m.TrainedAt = time.Now().UTC()
	m.TrainSeconds = time.Since(start).Seconds()
	return m, nil
}

// lawName is how Law's errors name target t.
func lawName(t features.Target) string {
	if t == features.KVTransfer {
		return "kv transfer"
	}
	return strings.ToLower(t.Title())
}

// fitTransferLaws fits a law for every class with at least minRows rows.
func fitTransferLaws(rows []transferRow, bpt float64, minRows int) (*model.TransferModel, error) {
	var byClass [features.NumLinkClasses][]transferRow
	for _, r := range rows {
		byClass[r.class] = append(byClass[r.class], r)
	}
	m := &model.TransferModel{DefaultBytesPerToken: bpt, MinMs: MinLatencyMs, MaxMs: transferMaxMs}
	for c, rs := range byClass {
		if len(rs) < minRows {
			continue
		}
		k, err := fitClassLaw(rs)
		if err != nil {
			return nil, fmt.Errorf("kv transfer %s: %w", features.LinkClass(c), err)
		}
		k.Class = features.LinkClass(c).String()
		m.Classes = append(m.Classes, k)
	}
	if len(m.Classes) == 0 {
		return nil, fmt.Errorf("%w: no link class has %d samples yet (%d samples in all)", ErrTooFewTransfers, minRows, len(rows))
	}
	if err := m.Prepare(); err != nil {
		return nil, fmt.Errorf("kv transfer: fitted model is inconsistent: %w", err)
	}
	return m, nil
}

// Law parameters, in the order of the design columns.
const (
	pLatency = iota // ms
	pAlone          // ms per byte, one transfer on the path
	pCrowd          // ms per byte per other transfer on the path
	pUnknown        // ms per byte, concurrency not reported
	numLawParams
)

// lawColumn is row r's value in design column j.
func lawColumn(r transferRow, j int) float64 {
	switch j {
	case pLatency:
		return 1
	case pAlone:
		if r.concurrent > 0 {
			return r.bytes
		}
	case pCrowd:
		if r.concurrent > 1 {
			return r.bytes * float64(r.concurrent-1)
		}
	case pUnknown:
		if r.concurrent == 0 {
			return r.bytes
		}
	}
	return 0
}

func lawPredict(p [numLawParams]float64, r transferRow) float64 {
	y := 0.0
	for j := range numLawParams {
		y += p[j] * lawColumn(r, j)
	}
	return y
}

// huberK is the Huber threshold in robust standard deviations: 95%
// efficiency under normal errors, bounded influence beyond.
const huberK = 1.345

// fitClassLaw fits one class's law by iteratively reweighted least squares
// on relative error, then centres it so that its median relative error on
// the rows is zero (least squares fits a mean, which stalled transfers
// drag up).
func fitClassLaw(rows []transferRow) (model.TransferClass, error) {
	labels := make([]float64, len(rows))
	for i, r := range rows {
		labels[i] = r.ms
	}
	band := NewLabelBand(labels)
	robust := make([]float64, len(rows))
	for i := range robust {
		robust[i] = 1
	}
	var p [numLawParams]float64
	rel := make([]float64, len(rows))
	for iter := 0; iter < 6; iter++ {
		var ok bool
		p, ok = solveLaw(rows, func(i int) float64 { return robust[i] * band.relativeWeight(rows[i].ms) })
		if !ok {
			return model.TransferClass{}, fmt.Errorf("no non-negative law fits %d samples", len(rows))
		}
		abs := make([]float64, len(rows))
		for i, r := range rows {
			rel[i] = (r.ms - lawPredict(p, r)) / math.Max(r.ms, band.Low)
			abs[i] = math.Abs(rel[i])
		}
		sort.Float64s(abs)
		scale := 1.4826 * abs[len(abs)/2]
		if !(scale > 1e-12) {
			break // an exact fit: nothing to reweight
		}
		for i := range robust {
			robust[i] = math.Min(1, huberK*scale/math.Max(math.Abs(rel[i]), 1e-300))
		}
	}
	// Centre: scale every parameter by the median of actual/predicted.
	logs := make([]float64, 0, len(rows))
	for _, r := range rows {
		if y := lawPredict(p, r); y > 0 {
			logs = append(logs, math.Log(r.ms/y))
		}
	}
	if len(logs) > 0 {
		shift := math.Exp(Median(logs))
		for j := range p {
			p[j] *= shift
		}
	}
	return lawClass(p, rows), nil
}

// lawClass turns law parameters into the model's terms.
func lawClass(p [numLawParams]float64, rows []transferRow) model.TransferClass {
	k := model.TransferClass{LatencyMs: p[pLatency], Samples: len(rows),
		Tokens: model.Range{Min: math.Inf(1), Max: math.Inf(-1)}}
	known, unknown := 0, 0
	meanFactor := 0.0
	for _, r := range rows {
		k.Tokens.Min = math.Min(k.Tokens.Min, float64(r.tokens))
		k.Tokens.Max = math.Max(k.Tokens.Max, float64(r.tokens))
		if r.concurrent > 0 {
			known++
		} else {
			unknown++
		}
	}
	alone := p[pAlone]
	if known == 0 || !(alone > 0) {
		// Never told the concurrency (or the fit found no byte cost alone):
		// the bandwidth is the effective one the samples saw, and nothing is
		// known of sharing.
		alone = math.Max(p[pUnknown], p[pAlone])
		k.Contention, k.UnknownContention = 0, 1
	} else {
		k.Contention = p[pCrowd] / alone
		if unknown > 0 && p[pUnknown] > 0 {
			k.UnknownContention = p[pUnknown] / alone
		} else {
			// No transfer of unknown concurrency to learn from: assume the
			// crowding the reported ones saw on average.
			for _, r := range rows {
				if r.concurrent > 0 {
					meanFactor += 1 + k.Contention*float64(r.concurrent-1)
				}
			}
			k.UnknownContention = meanFactor / float64(known)
		}
	}
	// Clamps the model requires: a finite positive bandwidth (a law with no
	// byte cost at all is given one so fast it costs nothing), factors in
	// range.
	if alone > 0 {
		k.BytesPerSec = math.Min(1000/alone, 1e18)
	} else {
		k.BytesPerSec = 1e18
	}
	k.Contention = math.Min(math.Max(k.Contention, 0), 100)
	k.UnknownContention = math.Min(math.Max(k.UnknownContention, 1), 1e4)
	k.LatencyMs = math.Min(math.Max(k.LatencyMs, 0), 1e6)
	return k
}

// solveLaw minimises Σ w_i (y_i − x_i·p)² over p ≥ 0, exactly: the
// unconstrained least squares of every subset of the columns the rows use,
// keeping the best whose solution is non-negative (at most 2⁴ solves of at
// most 4×4 systems). Columns are scaled to unit maximum first, since bytes
// reach 10^10 where the latency column is 1.
func solveLaw(rows []transferRow, weight func(i int) float64) ([numLawParams]float64, bool) {
	var scale [numLawParams]float64
	for _, r := range rows {
		for j := range numLawParams {
			scale[j] = math.Max(scale[j], math.Abs(lawColumn(r, j)))
		}
	}
	var used []int
	for j := range numLawParams {
		if scale[j] > 0 {
			used = append(used, j)
		}
	}
	var best [numLawParams]float64
	bestLoss, found := math.Inf(1), false
	for mask := 1; mask < 1<<len(used); mask++ {
		var cols []int
		for b, j := range used {
			if mask&(1<<b) != 0 {
				cols = append(cols, j)
			}
		}
		p, ok := weightedLeastSquares(rows, weight, cols, scale)
		if !ok {
			continue
		}
		feasible := true
		for _, v := range p {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				feasible = false
			}
		}
		if !feasible {
			continue
		}
		loss := 0.0
		for i, r := range rows {
			e := r.ms - lawPredict(p, r)
			loss += weight(i) * e * e
		}
		if loss < bestLoss*(1-1e-12) {
			best, bestLoss, found = p, loss, true
		}
	}
	return best, found
}

// weightedLeastSquares solves the normal equations of the given columns
// (scaled by scale) by Cholesky, with a whisper of ridge so a column that
// duplicates another cannot make the system singular; false when it is
// not positive definite even so.
func weightedLeastSquares(rows []transferRow, weight func(i int) float64, cols []int, scale [numLawParams]float64) ([numLawParams]float64, bool) {
	n := len(cols)
	a := mat.NewSymDense(n, nil)
	b := mat.NewVecDense(n, nil)
	x := make([]float64, n)
	for i, r := range rows {
		w := weight(i)
		for j, c := range cols {
			x[j] = lawColumn(r, c) / scale[c]
		}
		for j := range n {
			for l := j; l < n; l++ {
				a.SetSym(j, l, a.At(j, l)+w*x[j]*x[l])
			}
			b.SetVec(j, b.AtVec(j)+w*x[j]*r.ms)
		}
	}
	for j := range n {
		a.SetSym(j, j, a.At(j, j)*(1+1e-10))
	}
	var chol mat.Cholesky
	if !chol.Factorize(a) {
		return [numLawParams]float64{}, false
	}
	var sol mat.VecDense
	if err := chol.SolveVecTo(&sol, b); err != nil {
		return [numLawParams]float64{}, false
	}
	var p [numLawParams]float64
	for j, c := range cols {
		p[c] = sol.AtVec(j) / scale[c]
	}
	return p, true
}

// calibrateTransfer sets the model's calibrations from out-of-fold
// residuals: each fold's rows predicted by laws fitted on the other folds,
// through the model's own Predict (so borrowing and ordering apply as
// they will in service).
func calibrateTransfer(m *model.TransferModel, rows []transferRow, cfg TransferOptions) error {
	folds := min(cfg.CrossFitFolds, len(rows))
	var pooled []float64
	var byClass [features.NumLinkClasses][]float64
	for f := 0; f < folds && folds >= 2; f++ {
		var in, out []transferRow
		for i, r := range rows {
			if i%folds == f {
				out = append(out, r)
			} else {
				in = append(in, r)
			}
		}
		fm, err := fitTransferLaws(in, m.DefaultBytesPerToken, max(2, cfg.MinClassSamples*(folds-1)/folds))
		if err != nil {
			continue // too few rows in this fold's complement
		}
		for _, r := range out {
			y, ok := predictRow(fm, r)
			if !ok || !(y > 0) {
				continue
			}
			res := math.Log(r.ms / y)
			pooled = append(pooled, res)
			byClass[r.class] = append(byClass[r.class], res)
		}
	}
	if len(pooled) == 0 {
		return nil // no calibration: quantiles are the central prediction
	}
	var err error
	if m.Calibration, err = model.NewCalibration("cross-fit", clampResiduals(pooled)); err != nil {
		return fmt.Errorf("kv transfer calibration: %w", err)
	}
	for i := range m.Classes {
		c, _ := features.ParseLinkClass(m.Classes[i].Class)
		if res := byClass[c]; len(res) >= cfg.MinClassCalibration {
			if m.Classes[i].Calibration, err = model.NewCalibration("cross-fit", clampResiduals(res)); err != nil {
				return fmt.Errorf("kv transfer %s calibration: %w", c, err)
			}
		}
	}
	return nil
}

// clampResiduals keeps log residuals within what a Calibration accepts
// (|v| ≤ 50, e^50 ≈ 5·10^21): a transfer 10^21 times off its law is damage.
func clampResiduals(r []float64) []float64 {
	out := slices.Clone(r)
	for i, v := range out {
		out[i] = math.Min(math.Max(v, -40), 40)
	}
	return out
}

// believableTransfers is the held-out rows the law's figures are measured
// on: those of a class it has a law for, whose rate (bytes a millisecond,
// or for a transfer of no bytes its time) lies inside the believable band
// (NewLabelBand) of that class's training rows, as the per-pod targets
// measure only believable rows. The rate, not the time, because a class's
// times span the whole range of transfer sizes while a link's rate does
// not: one crafted 0.05 ms transfer of 4,096 tokens, predicted at 16 ms,
// moved the reported MAPE from 5% to 2,541% (issue 26). A row of a class
// without a law is predicted by a farther class's law, as a bound, which
// says nothing of the law.
func believableTransfers(m *model.TransferModel, holdout, train []transferRow) []transferRow {
	type bands struct{ rate, ms LabelBand }
	var rates, times [features.NumLinkClasses][]float64
	for _, r := range train {
		if r.bytes > 0 {
			rates[r.class] = append(rates[r.class], r.bytes/r.ms)
		} else {
			times[r.class] = append(times[r.class], r.ms)
		}
	}
	var by [features.NumLinkClasses]*bands
	for c := range by {
		if m.Seen(features.LinkClass(c)) {
			by[c] = &bands{rate: NewLabelBand(rates[c]), ms: NewLabelBand(times[c])}
		}
	}
	out := make([]transferRow, 0, len(holdout))
	for _, r := range holdout {
		b := by[r.class]
		switch {
		case b == nil:
		case r.bytes > 0 && b.rate.Contains(r.bytes/r.ms), r.bytes == 0 && b.ms.Contains(r.ms):
			out = append(out, r)
		}
	}
	return out
}

// measureTransfer sets the model's holdout figures, overall and per class.
func measureTransfer(m *model.TransferModel, rows []transferRow, q float64) {
	pred, actual, quant := transferPredictions(m, rows, q)
	m.Holdout = model.Measure(pred, actual)
	if m.Holdout.Rows > 0 {
		m.HoldoutCoverage = &model.QuantileCoverage{Quantile: q, Percent: model.Coverage(quant, actual), Rows: m.Holdout.Rows}
	}
	for i := range m.Classes {
		c, _ := features.ParseLinkClass(m.Classes[i].Class)
		var p, a []float64
		for j, r := range rows {
			if r.class == c {
				p, a = append(p, pred[j]), append(a, actual[j])
			}
		}
		m.Classes[i].Holdout = model.Measure(p, a)
	}
}

// LawPredictions predicts target t's label (KVTransfer or SplitTTFT) of
// samples with m, t's law, each with its own bytes per token (m's default
// where it does not say), and their q quantiles: one row per sample with
// a usable label, in order, actual 0 for one of a class m cannot bound,
// which model.Measure and model.Coverage skip.
func LawPredictions(m *model.TransferModel, t features.Target, samples []features.Sample, q float64) (pred, actual, quant []float64) {
	return transferPredictions(m, transferRows(samples, t, m.DefaultBytesPerToken), q)
}

// transferPredictions predicts rows (actual 0 for a row the model cannot
// bound, which Measure skips) and their q quantiles.
func transferPredictions(m *model.TransferModel, rows []transferRow, q float64) (pred, actual, quant []float64) {
	pred, actual, quant = make([]float64, len(rows)), make([]float64, len(rows)), make([]float64, len(rows))
	for i, r := range rows {
		y, ok := predictRow(m, r)
		if !ok {
			continue
		}
		pred[i], actual[i], quant[i] = y, r.ms, m.Quantile(r.class, y, q)
	}
	return pred, actual, quant
}

// predictRow is the model's prediction for a row, with the row's own bytes
// per token.
func predictRow(m *model.TransferModel, r transferRow) (float64, bool) {
	bpt := 0.0
	if r.tokens > 0 {
		bpt = r.bytes / float64(r.tokens)
	}
	return m.Predict(r.class, r.tokens, bpt, r.concurrent)
}
