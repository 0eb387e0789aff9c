// Package predictor serves predictions from the newest model bundle.
//
// The read path takes no lock: the current bundle sits behind an atomic
// pointer, bundles are immutable, and a swap is one pointer store, so a
// prediction in flight finishes on the bundle it started with.
package predictor

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/wire"
)

// Objective says which statistic a prediction is.
type Objective string

const (
	Mean     Objective = "mean"     // the model's central estimate
	Quantile Objective = "quantile" // a calibrated quantile q
)

// ParseObjective accepts "mean" or "quantile".
func ParseObjective(s string) (Objective, error) {
	switch Objective(s) {
	case Mean, Quantile:
		return Objective(s), nil
	}
	return "", fmt.Errorf("objective %q: want mean or quantile", s)
}

// ErrNotReady is returned while no bundle with any model has been loaded.
var ErrNotReady = errors.New("no model loaded yet")

// loaded is one bundle in service with the time it was swapped in.
type loaded struct {
	pub      *bundle.Published
	loadedAt time.Time
}

// Predictor holds the bundle in service. The zero value is not ready; Swap
// makes it ready.
type Predictor struct {
	stat Statistic
	cur  atomic.Pointer[loaded]
}

// New returns a predictor answering objective at quantile q (used only for
// the quantile objective, but always reported, as the reference does).
func New(objective Objective, q float64) (*Predictor, error) {
	if _, err := ParseObjective(string(objective)); err != nil {
		return nil, err
	}
	if !(q > 0 && q < 1) {
		return nil, fmt.Errorf("quantile %v: must lie strictly between 0 and 1", q)
	}
	return &Predictor{stat: Statistic{Objective: objective, Quantile: q}}, nil
}

// Objective and Quantile report the configured statistic.
func (p *Predictor) Objective() Objective { return p.stat.Objective }
func (p *Predictor) Quantile() float64    { return p.stat.Quantile }

// Statistic is what every prediction of p reports.
func (p *Predictor) Statistic() Statistic { return p.stat }

// Swap puts pub in service if it is current (bundle.CheckSuccessor at
// now): not the bundle in service, not an older version of its lineage,
// not of another lineage that began before the bundle in service was
// made. It returns whether it swapped.
func (p *Predictor) Swap(pub *bundle.Published, now time.Time) bool {
	_, err := p.swap(pub, now, false)
	return err == nil
}

// swap is Swap, also returning the bundle it replaced (nil if none) and
// why it did not swap. With anyAge, what an operator asks for, it takes
// pub whatever its lineage and age, if it is not the bundle in service.
func (p *Predictor) swap(pub *bundle.Published, now time.Time, anyAge bool) (*bundle.Published, error) {
	for {
		cur := p.cur.Load()
		var prev *bundle.Published
		var prevBundle *model.Bundle
		if cur != nil {
			prev, prevBundle = cur.pub, cur.pub.Bundle
		}
		err := bundle.CheckSuccessor(pub.Bundle, prevBundle, now)
		if anyAge && err != nil && !errors.Is(err, bundle.ErrSameBundle) {
			err = nil
		}
		if err != nil {
			return prev, err
		}
		if p.cur.CompareAndSwap(cur, &loaded{pub: pub, loadedAt: now}) {
			return prev, nil
		}
	}
}

// Current returns the bundle in service and when it was loaded; nil before
// the first.
func (p *Predictor) Current() (*bundle.Published, time.Time) {
	cur := p.cur.Load()
	if cur == nil {
		return nil, time.Time{}
	}
	return cur.pub, cur.loadedAt
}

// Ready reports whether predictions can be served: some target has a model.
func (p *Predictor) Ready() bool {
	cur := p.cur.Load()
	return cur != nil && (cur.pub.Bundle.TTFT != nil || cur.pub.Bundle.TPOT != nil)
}

// parallelRows is the least share of a batch given a goroutine of its own:
// about a millisecond of tree walks. A router caller's 100 rows (~0.2 ms)
// stay on the request's goroutine: splitting them saved a tenth of a
// millisecond when a core was free but, on cores shared with other work,
// made the request wait for the busier of two, and raised the tail
// (1,000 requests/s of 100 rows, A/B on this machine: p99 7.3 against
// 8.9 ms and 20.2 against 23.9 ms). Batches of thousands still spread over
// every core.
const parallelRows = 256

// Predict fills out[i] for rows[i]; out must be at least as long as rows.
// It returns the load time of the bundle it used. Batches of at least
// 2·parallelRows rows are split over GOMAXPROCS goroutines; smaller ones run
// on the caller's goroutine and do not allocate. Every row of one call uses
// the same bundle.
func (p *Predictor) Predict(rows []features.Row, out []wire.Prediction) (time.Time, error) {
	cur := p.cur.Load()
	if cur == nil {
		return time.Time{}, ErrNotReady
	}
	b := cur.pub.Bundle
	if b.TTFT == nil && b.TPOT == nil {
		return time.Time{}, ErrNotReady
	}
	workers := 1
	if len(rows) >= 2*parallelRows {
		workers = min(runtime.GOMAXPROCS(0), len(rows)/parallelRows)
	}
	if workers > 1 {
		p.predictParallel(b, rows, out, workers)
	} else {
		p.predictRows(b, rows, out[:len(rows)])
	}
	return cur.loadedAt, nil
}

// predictParallel splits rows into workers shares, one per goroutine. It is
// a function of its own because what a goroutine captures escapes to the
// heap, and in Predict that would cost the small batches an allocation.
func (p *Predictor) predictParallel(b *model.Bundle, rows []features.Row, out []wire.Prediction, workers int) {
	share := (len(rows) + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := share; lo < len(rows); lo += share {
		hi := min(lo+share, len(rows))
		wg.Go(func() { p.predictRows(b, rows[lo:hi], out[lo:hi]) })
	}
	p.predictRows(b, rows[:share], out[:share])
	wg.Wait()
}

// predictRows predicts rows into out (of the same length) with bundle b.
func (p *Predictor) predictRows(b *model.Bundle, rows []features.Row, out []wire.Prediction) {
	var buf [64]float64
	for i := range rows {
		out[i] = wire.Prediction{}
		if b.TTFT != nil {
			e := p.stat.Predict(b.TTFT, &rows[i], buf[:0])
			out[i].TTFTMs, out[i].TTFTBounds, out[i].TTFTUncertainty = e.Ms, e.Bounds, e.Uncertainty()
		}
		if b.TPOT != nil {
			e := p.stat.Predict(b.TPOT, &rows[i], buf[:0])
			out[i].TPOTMs, out[i].TPOTBounds, out[i].TPOTUncertainty = e.Ms, e.Bounds, e.Uncertainty()
		}
	}
}

// Statistic is what a prediction reports: the central estimate or a
// calibrated quantile of one, always with the 5% and 95% bounds. Every
// prediction path, per row or per pair, goes through it.
type Statistic struct {
	Objective Objective
	Quantile  float64 // the quantile reported under the Quantile objective
}

// Distribution is a model's calibrated error around a central prediction:
// Quantile scales a central value to quantile q.
type Distribution interface {
	Quantile(central, q float64) float64
}

// Predict is target model m's estimate for row; buf is scratch for the
// feature vector, built by the one feature-building function. Its
// quantiles and bounds widen with how far the row lies outside m's
// training ranges (model.Support).
func (s Statistic) Predict(m *model.TargetModel, row *features.Row, buf []float64) wire.Estimate {
	return s.PredictVector(m, m.Schema().Build(row, buf))
}

// PredictVector is Predict for feature vector x, built from a row by
// m.Schema(), for a caller that reads the vector too.
func (s Statistic) PredictVector(m *model.TargetModel, x []float64) wire.Estimate {
	return s.around(m, x, m.Predict(x))
}

// PredictVectors sets out[r] to PredictVector(m, x[r*width:(r+1)*width])
// for every row r of the row-major matrix x, bit for bit, the rows' trees
// walked together (model.TargetModel.PredictRows): what a caller with many
// rows for one model saves. central is scratch, as long as out.
func (s Statistic) PredictVectors(m *model.TargetModel, x []float64, width int, central []float64, out []wire.Estimate) {
	central = central[:len(out)]
	m.PredictRows(x, width, central)
	for r := range out {
		out[r] = s.around(m, x[r*width:(r+1)*width], central[r])
	}
}

// around is m's estimate for vector x whose central prediction is central.
func (s Statistic) around(m *model.TargetModel, x []float64, central float64) wire.Estimate {
	place := m.Place(x)
	// Of's arithmetic without its interface: a model and a placement handed
	// to one would escape to the heap, an allocation per row.
	y := central
	if s.Objective == Quantile {
		y = m.QuantileAt(central, s.Quantile, place)
	}
	return estimate(y, m.QuantileAt(central, model.BoundsLow, place), m.QuantileAt(central, model.BoundsHigh, place))
}

// Of is the estimate of a model whose central prediction is central and
// whose error distribution is d.
func (s Statistic) Of(central float64, d Distribution) wire.Estimate {
	y := central
	if s.Objective == Quantile {
		y = d.Quantile(central, s.Quantile)
	}
	return estimate(y, d.Quantile(central, model.BoundsLow), d.Quantile(central, model.BoundsHigh))
}

// estimate is a reported value with its 5% and 95% bounds.
func estimate(y, lo, hi float64) wire.Estimate {
	return wire.Estimate{Ms: y, Bounds: [2]float64{lo, hi}}
}
