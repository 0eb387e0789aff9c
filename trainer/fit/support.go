package fit

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/headroomhq/headroom/model"
)

// SupportOptions say how a fit measures how fast errors grow outside the
// training ranges (model.Support). The measurement is
// pseudo-extrapolation: for a few influential columns in turn, the model is
// fitted again, exactly as it was (line, trees, shift), on the rows at or
// below a quantile of the column, and predicts the rows above; how far
// those rows lie outside the fold's own range of the column, and how far
// their errors exceed the calibrated spread, give the extrapolation error's
// spread per unit of distance along that column.
type SupportOptions struct {
	// Folds is the number of columns a fit measures (0: no widening,
	// bounds as calibrated everywhere); each costs len(Cuts) more fits on
	// at most MaxRows rows. The others keep what Previous measured, so a
	// few retrains measure every column at a bounded cost per retrain.
	// FirstFolds is the number a model measures when Inputs.Previous
	// measured none (a first model, or the first after a bundle without
	// them).
	Folds, FirstFolds int
	// Every is how often, in fits, the spreads are measured (≤ 1: every
	// fit); the fits between carry Previous's. A fit that measures costs a
	// full store about a third more CPU than one that carries
	// (docs/ACCURACY.md), and spreads per unit of distance change slowly.
	Every int
	// MinInterval is the least time between two measurements (0: none);
	// the fits between carry Previous's spreads. The service retrains
	// every 10 s, seconds apart under a burst of samples, and a fit that
	// measures costs about 0.35 CPU-s more on a full store
	// (docs/ACCURACY.md); spreads per unit of distance change slowly.
	MinInterval time.Duration
	// Cuts are the quantiles of a column at which it is cut, one fit each,
	// in increasing order: the model sees the rows at or below the cut and
	// extrapolates to the rest. A low cut probes far extrapolation (a
	// median cut of log-uniform prompts probes up to eight spans out), a
	// high one near.
	Cuts []float64
	// MaxRows bounds the rows of each pseudo-extrapolation, taken evenly
	// from the training rows, so a full store pays no more than a small
	// one.
	MaxRows int
	// MinRows is the fewest rows a fold needs on each side of its cut.
	MinRows int
}

// DefaultSupportOptions are the service's (docs/ACCURACY.md, Extrapolation).
func DefaultSupportOptions() SupportOptions {
	return SupportOptions{Folds: 2, FirstFolds: 6, Every: 1, MinInterval: time.Minute,
		Cuts: []float64{0.5, 0.8}, MaxRows: 2000, MinRows: 20}
}

// foldOverlap is the share of a candidate column's held-out rows that may
// already be held out by a chosen fold for the column to count as the same
// excursion: columns that are one quantity seen differently (the prompt,
// its uncached part) cut the same rows, and another fit would measure
// nothing new.
const foldOverlap = 0.8

// minBandRows is the fewest rows a band of distance needs to be judged on:
// the 90% point of fewer rows moves by a third of its value from one
// sample to the next, and the largest over bands would follow the noise.
const minBandRows = 50

// estimateSupport measures m's extrapolation spreads on train. m must be
// fitted and calibrated. It returns nil when widening is off or no column
// can be cut with enough rows on both sides.
func estimateSupport(ctx context.Context, m *model.TargetModel, cfg Options, in Inputs, train Dataset) (*model.Support, error) {
	sc := cfg.Support
	if sc.Folds <= 0 || len(train.Y) < 2*sc.MinRows {
		return nil, nil
	}
	if len(sc.Cuts) == 0 {
		sc.Cuts = DefaultSupportOptions().Cuts
	}
	rows := thin(train, sc.MaxRows)
	q := in.Quantile
	if !(q > 0.5 && q < 1) {
		q = model.DefaultQuantile
	}
	// The in-range spread above and below the median at the quantile
	// whose coverage the service reports: what a served bound already
	// allows for.
	med := m.Calibration.LogResidual(0.5)
	spreadUp := math.Max(m.Calibration.LogResidual(q)-med, 0)
	spreadDown := math.Max(med-m.Calibration.LogResidual(1-q), 0)
	z := model.NormalQuantile(q)

	n := len(m.Columns)
	s := &model.Support{SpreadUp: make([]float64, n), SpreadDown: make([]float64, n),
		BandUp: make([][]float64, n), BandDown: make([][]float64, n)}
	measured := make([]bool, n)

	// The columns worth measuring, each once: a column whose upper rows
	// are those of a column before it is the same excursion (alias).
	var distinct []fold
	alias := map[int]int{}
	for _, j := range influentialColumns(m) {
		_, above, _, ok := cutFold(rows, j, sc.Cuts[len(sc.Cuts)-1], sc.MinRows)
		if !ok {
			continue
		}
		if k := overlapsChosen(above, distinct); k >= 0 {
			alias[j] = distinct[k].column
			continue
		}
		distinct = append(distinct, fold{column: j, heldOut: setOf(above)})
	}

	// Spreads the previous model measured carry over; this fit measures
	// the columns never measured, then the longest unmeasured, up to the
	// budget (all of FirstFolds for a first model).
	prev := carriedSpreads(in.Previous)
	budget := sc.Folds
	age := 0
	switch {
	case len(prev) == 0 && m.Kind == model.KindLinear:
		// A line's folds cost milliseconds: a first model measures
		// FirstFolds columns at once.
		budget = max(sc.FirstFolds, sc.Folds)
	case len(prev) == 0:
		// Nothing to carry (the first retrain after a bundle without
		// spreads, a first fit that also chooses), and every fold refits
		// trees: Folds columns, like any retrain that measures. FirstFolds
		// of them took a full store's retrain to 4.4-4.9 CPU-s
		// (docs/PERFORMANCE.md). The other columns take the largest
		// spreads measured (below) until later retrains measure them,
		// never-measured first.
	case in.CarryOnly || in.Previous.Support.Age+1 < sc.Every ||
		(sc.MinInterval > 0 && time.Since(in.Previous.Support.MeasuredAt) < sc.MinInterval):
		budget, age = 0, in.Previous.Support.Age+1
		s.MeasuredAt = in.Previous.Support.MeasuredAt
	}
	s.Age = age
	if budget > 0 {
		s.MeasuredAt = time.Now().UTC()
	}
	todo := measureOrder(m, distinct, prev, in.Previous)
	if len(todo) > budget {
		todo = todo[:budget]
	}
	fresh := map[int]bool{}
	// unseen[j] is the first band past the farthest that column j's folds
	// judged in this fit (len(bands) when they judged the farthest).
	unseen := map[int]int{}
	for _, j := range todo {
		var needs []need
		for _, c := range sc.Cuts {
			nc, err := pseudoExtrapolate(ctx, m, cfg, rows, j, c, sc.MinRows)
			if err != nil {
				return nil, err
			}
			for _, nd := range nc {
				// The spread σ per unit of distance this row needs to
				// fall inside the q bound (above the median) or the 1−q
				// bound (below it): e² = s² + (z·σ·d)².
				needs = append(needs, need{d: nd.d,
					up: excess(nd.e, spreadUp) / (z * nd.d), down: excess(-nd.e, spreadDown) / (z * nd.d)})
			}
		}
		if len(needs) == 0 {
			continue
		}
		sp, farthest := spreadFor(needs, q, minBandRows)
		sp.set(s, j)
		unseen[j] = farthest + 1
		measured[j], fresh[j] = true, true
		s.Rows += len(needs)
	}
	// Folds lists the measured columns by age, oldest first: carried ones
	// in the previous order, then this fit's.
	if in.Previous != nil && in.Previous.Support != nil {
		for _, name := range in.Previous.Support.Folds {
			j := columnIndex(m.Columns, name)
			if j < 0 || fresh[j] || !isDistinct(distinct, j) {
				continue
			}
			prev[name].set(s, j)
			measured[j] = true
			s.Folds = append(s.Folds, name)
		}
	}
	for _, j := range todo {
		if fresh[j] {
			s.Folds = append(s.Folds, m.Columns[j])
		}
	}
	if len(s.Folds) == 0 {
		return nil, nil
	}
	for j, c := range alias {
		if measured[c] {
			spreadOf(s, c).set(s, j)
			measured[j] = true
		}
	}
	// A band farther than any row a fold of the column held out says
	// nothing of it: rows just past a cut that needed no widening do not
	// vouch for rows several spans out. Such bands take the largest
	// spread measured in any band of any column (a prefill-bound trace's
	// prompt, whose folds reached only half a span, measured 0 there and
	// left prompts two to eight spans out with the in-range bound, 3%
	// covered).
	var anyUp, anyDown float64
	for j := range n {
		if measured[j] {
			anyUp, anyDown = math.Max(anyUp, s.SpreadUp[j]), math.Max(anyDown, s.SpreadDown[j])
		}
	}
	for j, from := range unseen {
		c := spreadOf(s, j)
		for b := from; b < len(c.up); b++ {
			c.up[b], c.down[b] = math.Max(c.up[b], anyUp), math.Max(c.down[b], anyDown)
		}
		c.set(s, j)
	}
	for j, c := range alias {
		if _, ok := unseen[c]; ok && measured[c] {
			spreadOf(s, c).set(s, j)
		}
	}
	// A column no fold measured (a category, a column constant in
	// training or one past the budget) is taken to
	// extrapolate as badly as the worst measured one: nothing says it does
	// better.
	worst := flatSpread(0, 0)
	for j := range n {
		if measured[j] {
			worst = worst.widest(spreadOf(s, j))
		}
	}
	for j := range n {
		if !measured[j] {
			worst.set(s, j)
		}
	}
	return s, nil
}

// columnSpread is one column's spreads per band of distance
// (model.SupportBands), above and below the median.
type columnSpread struct{ up, down []float64 }

func flatSpread(up, down float64) columnSpread {
	c := columnSpread{make([]float64, len(model.SupportBands)+1), make([]float64, len(model.SupportBands)+1)}
	for b := range c.up {
		c.up[b], c.down[b] = up, down
	}
	return c
}

// spreadOf is column j's spreads in s; a Support without bands (an older
// trainer's) has the same spread in every band.
func spreadOf(s *model.Support, j int) columnSpread {
	if len(s.BandUp) == 0 || len(s.BandDown) == 0 || s.BandUp[j] == nil || s.BandDown[j] == nil {
		return flatSpread(s.SpreadUp[j], s.SpreadDown[j])
	}
	return columnSpread{append([]float64(nil), s.BandUp[j]...), append([]float64(nil), s.BandDown[j]...)}
}

// set makes c column j's spreads in s, the flat ones the largest band's.
func (c columnSpread) set(s *model.Support, j int) {
	s.BandUp[j], s.BandDown[j] = c.up, c.down
	s.SpreadUp[j], s.SpreadDown[j] = 0, 0
	for b := range c.up {
		s.SpreadUp[j], s.SpreadDown[j] = math.Max(s.SpreadUp[j], c.up[b]), math.Max(s.SpreadDown[j], c.down[b])
	}
}

// widest is the larger of c and o in every band.
func (c columnSpread) widest(o columnSpread) columnSpread {
	w := flatSpread(0, 0)
	for b := range w.up {
		w.up[b], w.down[b] = math.Max(c.up[b], o.up[b]), math.Max(c.down[b], o.down[b])
	}
	return w
}

// CarriesSpreads reports whether m carries measured spreads a later fit
// can carry over (Inputs.Previous); a model of an older trainer has none.
func CarriesSpreads(m *model.TargetModel) bool { return len(carriedSpreads(m)) > 0 }

// carriedSpreads returns the spreads prev measured, by column name.
func carriedSpreads(prev *model.TargetModel) map[string]columnSpread {
	out := map[string]columnSpread{}
	if prev == nil || prev.Support == nil || prev.Support.Validate(len(prev.Columns)) != nil {
		return out
	}
	for _, name := range prev.Support.Folds {
		if j := columnIndex(prev.Columns, name); j >= 0 {
			out[name] = spreadOf(prev.Support, j)
		}
	}
	return out
}

// measureOrder lists the distinct columns in the order they are due:
// those the previous model did not measure (most influential first), then
// the ones it measured, longest ago first.
func measureOrder(m *model.TargetModel, distinct []fold, prev map[string]columnSpread, prevModel *model.TargetModel) []int {
	var order []int
	for _, f := range distinct {
		if _, ok := prev[m.Columns[f.column]]; !ok {
			order = append(order, f.column)
		}
	}
	if prevModel != nil && prevModel.Support != nil {
		for _, name := range prevModel.Support.Folds {
			if j := columnIndex(m.Columns, name); j >= 0 && isDistinct(distinct, j) {
				order = append(order, j)
			}
		}
	}
	return order
}

func isDistinct(distinct []fold, j int) bool {
	for _, f := range distinct {
		if f.column == j {
			return true
		}
	}
	return false
}

func columnIndex(columns []string, name string) int {
	for j, c := range columns {
		if c == name {
			return j
		}
	}
	return -1
}

// residualAt is one pseudo-extrapolated row: its distance outside the
// fold's range of the cut column, in spans, and its log residual from the
// fold model's centre.
type residualAt struct{ d, e float64 }

// pseudoExtrapolate fits m's kind of model on the rows at or below the
// cut quantile of column j and returns its residuals on the rows above.
// It returns nothing when either side has fewer than minRows rows.
func pseudoExtrapolate(ctx context.Context, m *model.TargetModel, cfg Options, rows Dataset, j int, cut float64, minRows int) ([]residualAt, error) {
	below, above, at, ok := cutFold(rows, j, cut, minRows)
	if !ok {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	in, out := subset(rows, below), subset(rows, above)
	fm, err := fitFold(ctx, m, cfg, in)
	if err != nil {
		return nil, fmt.Errorf("pseudo-extrapolation of %s past %g: %w", m.Columns[j], at, err)
	}
	foldRange := ranges(len(m.Columns), in.X)[j]
	shift := shrunkShift(logResiduals(fm, in))
	// Residuals are taken from the fold model's own median in range, as
	// the served bounds are from the calibration's.
	centre := Median(foldResiduals(fm, in, 1-m.TreeShrink, shift))
	var res []residualAt
	for i, r := range foldResiduals(fm, out, 1-m.TreeShrink, shift) {
		if d := model.FeatureDistance(foldRange, out.X[i][j]); d > 0 {
			res = append(res, residualAt{d: d, e: r - centre})
		}
	}
	return res, nil
}

// need is what one pseudo-extrapolated row at distance d needs: the
// extrapolation spread per unit of distance that puts it inside the upper
// bound and the lower bound.
type need struct{ d, up, down float64 }

// spreadFor chooses, in each band of distance holding at least minRows
// rows, the smallest spreads that put q of its rows inside the bounds. Rows
// just past a cut are most of a fold and say little about far
// extrapolation: a quantile over all of them would let the few far rows be
// missed wholesale. Nor does their rate say much about far rows: a bias
// that grows in proportion to distance needs a spread per unit of distance
// that grows without bound near the cut (it adds to the in-range spread in
// quadrature), so each band keeps its own (model.Support.BandUp). Rows just
// past the cut that the calibration misses anyway (a 1−q share of rows
// anywhere) need spreads no finite widening gives, and take the 1−q share
// left over. A band with fewer rows takes the spreads of the nearest
// measured band farther out, or beyond the farthest (returned), the
// farthest's, which estimateSupport raises to the largest measured of any
// column.
func spreadFor(needs []need, q float64, minRows int) (spread columnSpread, farthest int) {
	nb := len(model.SupportBands) + 1
	bands := make([][]need, nb)
	for _, nd := range needs {
		b := model.SupportBand(nd.d)
		bands[b] = append(bands[b], nd)
	}
	out := flatSpread(0, 0)
	judged := make([]bool, nb)
	for b, band := range bands {
		if len(band) < max(minRows, 1) {
			continue
		}
		u, d := make([]float64, len(band)), make([]float64, len(band))
		for i, nd := range band {
			u[i], d[i] = nd.up, nd.down
		}
		out.up[b] = math.Min(coveringValue(u, q), model.MaxSupportSpread)
		out.down[b] = math.Min(coveringValue(d, q), model.MaxSupportSpread)
		judged[b] = true
	}
	from := -1 // the band whose spreads an unjudged band takes
	for b := nb - 1; b >= 0; b-- {
		if judged[b] {
			from = b
		} else if from >= 0 {
			out.up[b], out.down[b] = out.up[from], out.down[from]
		}
	}
	last := -1
	for b := range nb {
		if judged[b] {
			last = b
		}
	}
	for b := last + 1; last >= 0 && b < nb; b++ {
		out.up[b], out.down[b] = out.up[last], out.down[last]
	}
	return out, last
}

// coveringValue is the smallest value at or above a share q of v.
func coveringValue(v []float64, q float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	k := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(k, len(s)-1))]
}

// excess is the extrapolation error a residual e needs beyond an in-range
// spread s: sqrt(e² − s²) when e > s, else 0.
func excess(e, s float64) float64 {
	if e <= s {
		return 0
	}
	return math.Sqrt(e*e - s*s)
}

// fold is one measured column and the rows its highest cut held out.
type fold struct {
	column  int
	heldOut map[int]bool
}

// influentialColumns orders the columns by how much the line's prediction
// moves across each one's training range, most first, then the other
// columns that vary, in order, leaving out constant ones. A column the line
// ignores is still worth measuring, after the others: its rows beyond the
// range are often beyond it in a column the line does use (the prompt and
// its uncached part), and the trees cannot carry it past its range; one
// that nothing uses measures a spread near zero, where left unmeasured it
// would take the largest measured (a queue's, 0.19 per span, put TTFT
// bounds for long prompts 44% above the central prediction on synthetic
// seed 5 where 18% covered them).
func influentialColumns(m *model.TargetModel) []int {
	type infl struct {
		j int
		w float64
	}
	_, coef := m.Linear.OriginalUnits()
	var c, rest []infl
	for j, r := range m.Ranges {
		switch w := math.Abs(coef[j]) * (r.Max - r.Min); {
		case w > 0 && !math.IsInf(w, 0):
			c = append(c, infl{j, w})
		case r.Max > r.Min:
			rest = append(rest, infl{j, 0})
		}
	}
	sort.SliceStable(c, func(a, b int) bool { return c[a].w > c[b].w })
	out := make([]int, 0, len(c)+len(rest))
	for _, x := range append(c, rest...) {
		out = append(out, x.j)
	}
	return out
}

// cutFold splits d's rows at the below quantile of column j: at or below
// the cut, and above it. It fails when either side has fewer than minRows
// rows, or when the rows below do not vary in the column (a queue that was
// empty at the cut): a fold that never saw the column move measures a model
// that knows nothing of it, not one extrapolating it.
func cutFold(d Dataset, j int, below float64, minRows int) (in, out []int, cut float64, ok bool) {
	if len(d.X) == 0 {
		return nil, nil, 0, false
	}
	v := make([]float64, len(d.X))
	for i, x := range d.X {
		v[i] = x[j]
	}
	sort.Float64s(v)
	cut = v[min(int(below*float64(len(v))), len(v)-1)]
	for i, x := range d.X {
		if x[j] <= cut {
			in = append(in, i)
		} else {
			out = append(out, i)
		}
	}
	return in, out, cut, len(in) >= minRows && len(out) >= minRows && cut > v[0]
}

// overlapsChosen returns the index of the first chosen fold that already
// holds out foldOverlap of rows, or −1.
func overlapsChosen(rows []int, chosen []fold) int {
	for k, c := range chosen {
		n := 0
		for _, i := range rows {
			if c.heldOut[i] {
				n++
			}
		}
		if float64(n) >= foldOverlap*float64(len(rows)) {
			return k
		}
	}
	return -1
}

func setOf(rows []int) map[int]bool {
	s := make(map[int]bool, len(rows))
	for _, i := range rows {
		s[i] = true
	}
	return s
}

// foldResiduals returns log(actual / predicted) of a fold model on d with a
// tree weight and shift, as crossFitResiduals predicts its held rows.
func foldResiduals(fm *model.TargetModel, d Dataset, treeWeight, shift float64) []float64 {
	r := make([]float64, len(d.Y))
	for i, x := range d.X {
		base, treeLog := fm.Parts(x)
		r[i] = math.Log(d.Y[i] / fm.Combine(base, treeLog, treeWeight, shift))
	}
	return r
}
