package model

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// MaxSupportDistance caps FeatureDistance: past ten training spans the
// spread, measured within a few spans of the data, says nothing more, and an
// unbounded distance (a corrupt row) must not turn a bound into MaxMs.
const MaxSupportDistance = 10

// MaxSupportSpread bounds a column's spread: a spread of 5 per span would
// put the 90% bound e^6.4 (600) times above the central prediction one
// span out of range.
const MaxSupportSpread = 5

// SupportBands are the upper edges of the bands of distance, in training
// spans, in which the trainer measures spreads: 0–0.5, 0.5–1, 1–2, 2–4 and
// beyond 4.
var SupportBands = [...]float64{0.5, 1, 2, 4}

// SupportBand is the index of the band of distance d.
func SupportBand(d float64) int { return sort.SearchFloat64s(SupportBands[:], d) }

// Support says how much wider quantile bounds get for a feature vector
// outside the training rows' ranges. The calibration (Calibration) measures
// errors where the model has seen data; outside it, a line carries the trend
// and trees repeat their edge correction, and errors grow with the distance
// travelled. The trainer measures how fast by pseudo-extrapolation: it fits
// the model again on the rows below a high quantile of an influential
// feature, predicts the rows above, and finds how fast the error of the
// extrapolation grows with the distance along that feature for the q bound
// to cover q of them (trainer/support.go).
//
// The error out of range is modelled as the in-range error plus an
// independent extrapolation error, zero-mean in log space, whose standard
// deviation grows linearly with distance: the trend the model carries past
// its data is wrong by an amount proportional to how far it is carried.
// Variances add, so the q quantile's distance from the median residual, s_q
// in range, becomes sqrt(s_q² + (z_q·σ)²) out of range, with z_q the
// standard normal q quantile and σ the Reach. The median, and so the
// central prediction and its bias, does not move; a calibration with a wide
// tail (queueing) absorbs the extrapolation's error instead of being
// multiplied by it.
//
// In range the bounds are exactly the calibration's. A bundle without a
// Support (from an older trainer) serves bounds as before.
type Support struct {
	// SpreadUp[j] and SpreadDown[j] are the standard deviation of the
	// extrapolation's log error per unit of distance along column j (in
	// units of its training span), above and below the median: measured
	// separately because a model extrapolating a convex cost errs low far
	// more than high. Per column because a model that carries a prompt's
	// cost well may carry a queue's badly.
	// They are the largest over bands of distance of BandUp and BandDown,
	// and serve alone when those are absent (a bundle from an older
	// trainer).
	SpreadUp   []float64 `json:"spread_up"`
	SpreadDown []float64 `json:"spread_down"`
	// BandUp[j][b] and BandDown[j][b] are column j's spreads measured on
	// the rows in band b of distance (SupportBands). Per band, because
	// the error does not grow in proportion to distance: a fold's rows
	// just past its cut can need a large spread per unit of distance (a
	// small bias is a large share of a small distance, and variances add
	// in quadrature), and that rate carried ten spans out put bounds
	// 178% above the central prediction where the far rows needed 20%.
	// A row is widened by the rate measured at its own distance, and
	// never less than a nearer band's widest (Reach). Nil or empty: the
	// flat SpreadUp and SpreadDown.
	BandUp   [][]float64 `json:"band_up,omitempty"`
	BandDown [][]float64 `json:"band_down,omitempty"`
	// Rows is the number of pseudo-extrapolated rows the spreads come from,
	// and Folds the columns whose upper tails were held out; the other
	// columns took the spread of the fold that held out the same rows, or
	// the largest measured.
	Rows  int      `json:"rows"`
	Folds []string `json:"folds,omitempty"`
	// Age is the number of fits since a column was last measured, and
	// MeasuredAt when: the trainer measures now and then and carries the
	// spreads between.
	Age        int       `json:"age,omitempty"`
	MeasuredAt time.Time `json:"measured_at,omitempty"`
}

// Validate checks a decoded Support for a model of n columns; nil is
// valid (no widening).
func (s *Support) Validate(n int) error {
	if s == nil {
		return nil
	}
	if len(s.SpreadUp) != n || len(s.SpreadDown) != n {
		return fmt.Errorf("support: %d and %d spreads for %d columns", len(s.SpreadUp), len(s.SpreadDown), n)
	}
	for _, v := range [][]float64{s.SpreadUp, s.SpreadDown} {
		for _, r := range v {
			if !(r >= 0 && r <= MaxSupportSpread) {
				return fmt.Errorf("support: spread %v per unit of distance outside [0, %d]", r, MaxSupportSpread)
			}
		}
	}
	for _, bands := range [][][]float64{s.BandUp, s.BandDown} {
		if len(bands) == 0 {
			continue
		}
		if len(bands) != n {
			return fmt.Errorf("support: band spreads for %d columns, want %d", len(bands), n)
		}
		for j, b := range bands {
			if len(b) != len(SupportBands)+1 {
				return fmt.Errorf("support: %d band spreads for column %d, want %d", len(b), j, len(SupportBands)+1)
			}
			for _, r := range b {
				if !(r >= 0 && r <= MaxSupportSpread) {
					return fmt.Errorf("support: band spread %v per unit of distance outside [0, %d]", r, MaxSupportSpread)
				}
			}
		}
	}
	if s.Rows < 0 || s.Age < 0 {
		return fmt.Errorf("support: %d rows, age %d", s.Rows, s.Age)
	}
	return nil
}

// Reach is how far a row lies outside the training support, as the
// standard deviation of the extrapolation's log error above and below the
// median: the largest over columns of the column's reach at its distance
// (ReachAlong). The largest, not a sum, because several columns are the same
// quantity seen differently (the prompt, its uncached part, the prefill
// work), and a sum would count one excursion three times. Zero in range.
type Reach struct{ Up, Down float64 }

// Reach measures x against ranges. A nil Support reaches nowhere.
func (s *Support) Reach(ranges []Range, x []float64) Reach {
	var r Reach
	if s == nil {
		return r
	}
	for j, rg := range ranges {
		if d := FeatureDistance(rg, x[j]); d > 0 {
			r.Up = math.Max(r.Up, reachAlong(s.SpreadUp[j], band(s.BandUp, j), d))
			r.Down = math.Max(r.Down, reachAlong(s.SpreadDown[j], band(s.BandDown, j), d))
		}
	}
	return r
}

func band(bands [][]float64, j int) []float64 {
	if len(bands) == 0 {
		return nil
	}
	return bands[j]
}

// reachAlong is a column's reach at distance d: the spread measured in d's
// band times d, and no less than any nearer band's spread times that
// band's far edge, so that a farther row's bounds are never narrower than
// a nearer one's. Without bands, the flat spread times d.
func reachAlong(flat float64, bands []float64, d float64) float64 {
	if len(bands) == 0 {
		return flat * d
	}
	k := SupportBand(d)
	r := bands[k] * d
	for b := range k {
		r = math.Max(r, bands[b]*SupportBands[b])
	}
	return r
}

// LogResidual is the q quantile of log(actual/predicted) at reach r: the
// calibration's, moved away from its median as the extrapolation error's
// variance adds to the in-range one. A nil Support or a zero Reach gives
// c.LogResidual(q) exactly.
func (s *Support) LogResidual(c Calibration, q float64, r Reach) float64 {
	lr := c.LogResidual(q)
	sigma, sign := r.Up, 1.0
	if q < 0.5 {
		sigma, sign = r.Down, -1
	}
	if s == nil || !(sigma > 0) || q == 0.5 {
		return lr
	}
	med := c.LogResidual(0.5)
	in := math.Max(sign*(lr-med), 0)
	return med + sign*math.Hypot(in, math.Abs(NormalQuantile(q))*sigma)
}

// NormalQuantile is the q quantile of the standard normal distribution.
func NormalQuantile(q float64) float64 { return math.Sqrt2 * math.Erfinv(2*q-1) }

// FeatureDistance is how far v lies outside r, in units of r's span
// (max − min): 0 in range, 1 for a prompt as far beyond the longest trained
// one as the trained prompts spanned. A column that was constant in
// training has no span to measure in; any other value is distance 1. The
// result is at most MaxSupportDistance (NaN included).
func FeatureDistance(r Range, v float64) float64 {
	var out float64
	switch {
	case v > r.Max:
		out = v - r.Max
	case v < r.Min:
		out = r.Min - v
	case v >= r.Min && v <= r.Max:
		return 0
	default:
		return MaxSupportDistance // NaN
	}
	if span := r.Max - r.Min; span > 0 {
		out /= span
	} else {
		out = 1
	}
	return math.Min(out, MaxSupportDistance)
}
