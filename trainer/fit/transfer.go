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
	// shared are the row's values of the law's shared columns (nil
	// without shared terms): the prefill pod's, features.Schema.Build's.
	shared []float64
}

// transferRows converts samples labelled for target t (KVTransfer or
// SplitTTFT) into the law's rows, bytes per token defaulting to
// bytesPerToken and the shared columns (shared; the zero Schema for none)
// built from each sample's row: the label is the row's ms. Samples
// without one, or with values no law can use, are left out.
func transferRows(samples []features.Sample, t features.Target, bytesPerToken float64, shared features.Schema) []transferRow {
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
		r := transferRow{class: c, tokens: tr.Tokens, bytes: float64(tr.Tokens) * bpt,
			concurrent: max(tr.Concurrent, 0), ms: ms}
		if shared.Len() > 0 {
			r.shared = shared.Build(&samples[i].Row, nil)
		}
		rows = append(rows, r)
	}
	return rows
}

// sharedSchema is the shared columns of target t's law as the trainer
// fits it: the split TTFT's prefill on P's row
// (features.SplitTTFTSharedColumns); none for the KV transfer.
func sharedSchema(t features.Target) features.Schema {
	if t == features.SplitTTFT {
		return features.MustSchema(features.SplitTTFTSharedColumns...)
	}
	return features.Schema{}
}

// modelSchema is the shared columns m predicts with (none for a law
// without shared terms).
func modelSchema(m *model.TransferModel) features.Schema {
	if m.Shared == nil {
		return features.Schema{}
	}
	return m.Shared.Schema()
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
// transfer's, on the samples labelled for t. For features.SplitTTFT, the
// whole TTFT of a disaggregated request, the prefill is common to every
// link class and is fitted once over all of them (the law's Shared terms
// on P's row: its cost per uncached token and its load), and each class's
// law holds only what differs, its transfer: a latency (with the
// prefill's fixed part and the first decode step) and a cost per byte
// that moves. Fitted per class alone, each class's per-byte term held the
// prefill as well, learned on whichever prompts and prefill pods routers
// happened to send over that link, and a class of few samples could come
// out no slower than a nearer one (TestSplitTTFTLawOrdersLinksByTransfer).
// It is how a pair is predicted from what llm-d reports, which does not
// time the transfer.
func Law(ctx context.Context, t features.Target, train, holdout []features.Sample, cfg TransferOptions, q float64) (*model.TransferModel, error) {
	what := lawName(t)
	if !(q > 0 && q < 1) {
		return nil, fmt.Errorf("%s: quantile %v, want a value strictly between 0 and 1", what, q)
	}
	cfg.setDefaults()
	start := time.Now()
	bpt := transferBytesPerToken(train, cfg.BytesPerToken)
	shared := sharedSchema(t)
	rows := transferRows(train, t, bpt, shared)
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: no training samples with a measured %s", ErrTooFewTransfers, what)
	}
	m, err := fitTransferLaws(rows, bpt, cfg.MinClassSamples, shared)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := calibrateTransfer(m, rows, cfg, shared); err != nil {
		return nil, err
	}
	if err := m.Prepare(); err != nil {
		return nil, fmt.Errorf("%s: fitted model is inconsistent: %w", what, err)
	}
	measureTransfer(m, believableTransfers(m, transferRows(holdout, t, bpt, shared), rows), q)
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

// fitTransferLaws fits a law for every class with at least minRows rows:
// each class apart without shared columns, all classes together with
// their shared terms otherwise (fitLaws).
func fitTransferLaws(rows []transferRow, bpt float64, minRows int, shared features.Schema) (*model.TransferModel, error) {
	var byClass [features.NumLinkClasses][]transferRow
	for _, r := range rows {
		byClass[r.class] = append(byClass[r.class], r)
	}
	var fitted []features.LinkClass
	var in []transferRow
	for c, rs := range byClass {
		if len(rs) >= minRows {
			fitted = append(fitted, features.LinkClass(c))
			in = append(in, rs...)
		}
	}
	m := &model.TransferModel{DefaultBytesPerToken: bpt, MinMs: MinLatencyMs, MaxMs: transferMaxMs}
	if len(fitted) == 0 {
		return nil, fmt.Errorf("%w: no link class has %d samples yet (%d samples in all)", ErrTooFewTransfers, minRows, len(rows))
	}
	if shared.Len() == 0 {
		for _, c := range fitted {
			law, _, err := fitLaws(byClass[c], []features.LinkClass{c}, 0)
			if err != nil {
				return nil, fmt.Errorf("kv transfer %s: %w", c, err)
			}
			m.Classes = append(m.Classes, lawClass(law[0], byClass[c]))
			m.Classes[len(m.Classes)-1].Class = c.String()
		}
	} else {
		laws, sharedMs, err := fitLaws(in, fitted, shared.Len())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", lawName(features.SplitTTFT), err)
		}
		for i, c := range fitted {
			m.Classes = append(m.Classes, lawClass(laws[i], byClass[c]))
			m.Classes[i].Class = c.String()
		}
		m.Shared = &model.SharedTerms{Columns: shared.Names(), MsPer: sharedMs}
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

// huberK is the Huber threshold in robust standard deviations: 95%
// efficiency under normal errors, bounded influence beyond.
const huberK = 1.345

// lawDesign is the design of a fit of the laws of classes (each at most
// once) with nShared shared columns: the shared columns first, then each
// class's numLawParams columns, zero on the rows of other classes. A
// parameter vector in it is the shared terms' coefficients, then each
// class's law parameters.
type lawDesign struct {
	nShared int
	at      [features.NumLinkClasses]int // a class's first column; -1 when not fitted
	n       int
}

func newLawDesign(classes []features.LinkClass, nShared int) lawDesign {
	d := lawDesign{nShared: nShared, n: nShared + len(classes)*numLawParams}
	for c := range d.at {
		d.at[c] = -1
	}
	for i, c := range classes {
		d.at[c] = nShared + i*numLawParams
	}
	return d
}

// row writes row r's design into x (length d.n).
func (d lawDesign) row(r transferRow, x []float64) {
	clear(x)
	copy(x[:d.nShared], r.shared)
	if at := d.at[r.class]; at >= 0 {
		for j := range numLawParams {
			x[at+j] = lawColumn(r, j)
		}
	}
}

func (d lawDesign) predict(p, x []float64, r transferRow) float64 {
	d.row(r, x)
	y := 0.0
	for j, v := range x {
		y += p[j] * v
	}
	return y
}

// fitLaws fits the laws of classes, and nShared shared terms, on rows (of
// those classes only) by iteratively reweighted least squares on
// relative error with every parameter non-negative, then centres the fit
// so that its median relative error on the rows is zero (least squares
// fits a mean, which stalled transfers drag up). It returns each class's
// law parameters, in the order of classes, and the shared coefficients.
func fitLaws(rows []transferRow, classes []features.LinkClass, nShared int) ([][numLawParams]float64, []float64, error) {
	d := newLawDesign(classes, nShared)
	labels := make([]float64, len(rows))
	for i, r := range rows {
		labels[i] = r.ms
	}
	band := NewLabelBand(labels)
	robust := make([]float64, len(rows))
	for i := range robust {
		robust[i] = 1
	}
	x := make([]float64, d.n)
	var p []float64
	abs := make([]float64, len(rows))
	for iter := 0; iter < 6; iter++ {
		var ok bool
		p, ok = solveLaws(d, rows, func(i int) float64 { return robust[i] * band.relativeWeight(rows[i].ms) })
		if !ok {
			return nil, nil, fmt.Errorf("no non-negative law fits %d samples", len(rows))
		}
		rel := make([]float64, len(rows))
		for i, r := range rows {
			rel[i] = (r.ms - d.predict(p, x, r)) / math.Max(r.ms, band.Low)
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
		if y := d.predict(p, x, r); y > 0 {
			logs = append(logs, math.Log(r.ms/y))
		}
	}
	if len(logs) > 0 {
		shift := math.Exp(Median(logs))
		for j := range p {
			p[j] *= shift
		}
	}
	laws := make([][numLawParams]float64, len(classes))
	for i, c := range classes {
		copy(laws[i][:], p[d.at[c]:d.at[c]+numLawParams])
	}
	return laws, p[:nShared:nShared], nil
}

// solveLaws minimises Σ w_i (y_i − x_i·p)² over p ≥ 0 (nnls) on the
// weighted normal equations, with columns scaled to unit maximum first,
// since bytes reach 10^10 where the latency column is 1, and a whisper of
// ridge so a column that duplicates another cannot make the system
// singular. Columns no row uses stay 0.
func solveLaws(d lawDesign, rows []transferRow, weight func(i int) float64) ([]float64, bool) {
	n := d.n
	x := make([]float64, n)
	scale := make([]float64, n)
	for _, r := range rows {
		d.row(r, x)
		for j, v := range x {
			scale[j] = math.Max(scale[j], math.Abs(v))
		}
	}
	g := mat.NewSymDense(n, nil)
	b := make([]float64, n)
	for i, r := range rows {
		w := weight(i)
		d.row(r, x)
		for j := range n {
			if scale[j] > 0 {
				x[j] /= scale[j]
			}
		}
		for j := range n {
			if x[j] == 0 {
				continue
			}
			for l := j; l < n; l++ {
				g.SetSym(j, l, g.At(j, l)+w*x[j]*x[l])
			}
			b[j] += w * x[j] * r.ms
		}
	}
	for j := range n {
		g.SetSym(j, j, g.At(j, j)*(1+1e-10))
	}
	p, ok := nnls(g, b, func(j int) bool { return scale[j] > 0 })
	if !ok {
		return nil, false
	}
	for j := range p {
		if scale[j] > 0 {
			p[j] /= scale[j]
		}
	}
	return p, true
}

// nnls minimises ½ pᵀGp − bᵀp over p ≥ 0, p_j = 0 where !free(j), for a
// positive semi-definite G: Lawson and Hanson's active-set method on the
// normal equations (Bro and de Jong's fast form), exact in at most a few
// passes over the columns. false when a passive set's system is not
// positive definite or it does not converge.
func nnls(g *mat.SymDense, b []float64, free func(j int) bool) ([]float64, bool) {
	n := len(b)
	p := make([]float64, n)
	passive := make([]bool, n)
	tol := 1e-12 * (1 + maxAbs(b))
	gradient := func() []float64 { // b − G p
		w := make([]float64, n)
		for j := range n {
			w[j] = b[j]
			for l := range n {
				w[j] -= g.At(j, l) * p[l]
			}
		}
		return w
	}
	for outer := 0; outer < 3*n+3; outer++ {
		w := gradient()
		best, at := tol, -1
		for j := range n {
			if !passive[j] && free(j) && w[j] > best {
				best, at = w[j], j
			}
		}
		if at < 0 {
			return p, true
		}
		passive[at] = true
		for inner := 0; ; inner++ {
			if inner > 3*n+3 {
				return nil, false
			}
			s, ok := solvePassive(g, b, passive)
			if !ok {
				return nil, false
			}
			alpha, feasible := 1.0, true
			for j := range n {
				if passive[j] && s[j] <= 0 {
					feasible = false
					if p[j]-s[j] > 0 {
						alpha = math.Min(alpha, p[j]/(p[j]-s[j]))
					} else {
						alpha = 0
					}
				}
			}
			if feasible {
				copy(p, s)
				break
			}
			for j := range n {
				p[j] += alpha * (s[j] - p[j])
				if passive[j] && p[j] <= tol*1e-3 {
					passive[j], p[j] = false, 0
				}
			}
		}
	}
	return nil, false
}

// solvePassive solves G_PP s_P = b_P by Cholesky, s zero off P.
func solvePassive(g *mat.SymDense, b []float64, passive []bool) ([]float64, bool) {
	var idx []int
	for j, in := range passive {
		if in {
			idx = append(idx, j)
		}
	}
	s := make([]float64, len(b))
	if len(idx) == 0 {
		return s, true
	}
	a := mat.NewSymDense(len(idx), nil)
	v := mat.NewVecDense(len(idx), nil)
	for i, j := range idx {
		v.SetVec(i, b[j])
		for k := i; k < len(idx); k++ {
			a.SetSym(i, k, g.At(j, idx[k]))
		}
	}
	var chol mat.Cholesky
	if !chol.Factorize(a) {
		return nil, false
	}
	var sol mat.VecDense
	if err := chol.SolveVecTo(&sol, v); err != nil {
		return nil, false
	}
	for i, j := range idx {
		s[j] = sol.AtVec(i)
	}
	return s, true
}

func maxAbs(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, math.Abs(x))
	}
	return m
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

// calibrateTransfer sets the model's calibrations from out-of-fold
// residuals: each fold's rows predicted by laws fitted on the other folds,
// through the model's own Predict (so borrowing and ordering apply as
// they will in service).
func calibrateTransfer(m *model.TransferModel, rows []transferRow, cfg TransferOptions, shared features.Schema) error {
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
		fm, err := fitTransferLaws(in, m.DefaultBytesPerToken, max(2, cfg.MinClassSamples*(folds-1)/folds), shared)
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
	return transferPredictions(m, transferRows(samples, t, m.DefaultBytesPerToken, modelSchema(m)), q)
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
// per token, its shared part included.
func predictRow(m *model.TransferModel, r transferRow) (float64, bool) {
	bpt := 0.0
	if r.tokens > 0 {
		bpt = r.bytes / float64(r.tokens)
	}
	y, ok := m.Predict(r.class, r.tokens, bpt, r.concurrent)
	if ok && m.Shared != nil {
		y = math.Min(y+m.Shared.Ms(r.shared), m.MaxMs)
	}
	return y, ok
}
