package fit

import (
	"math"
	"sort"
)

// MinLatencyMs is the smallest label a fit believes: 1 µs. No LLM server
// produces a first token, or a next one, faster than that (a decode step on
// an H200 takes milliseconds); anything below it is a unit mistake or an
// attack, and under relative-error weights (1/y²) one such label outweighs
// every other sample put together (1e-300 ms even made the weight +Inf and
// every fit fail).
const MinLatencyMs = 1e-3

// Label band factors: a label is believed when it lies within
// [q_low / labelBandLow, q_high · labelBandHigh], q_low and q_high being
// the 1st and 99th percentiles of the target's training labels, and never
// the single smallest or largest label. Below the band the relative-error
// weights would let a handful of samples decide the line; the high side
// is wider because long prompts have legitimately long latencies, and a
// slow label weighs little under relative error anyway.
const (
	labelBandLow  = 4
	labelBandHigh = 10
)

// LabelBand is the range of labels a fit believes, learned from the labels
// themselves (NewLabelBand).
type LabelBand struct {
	Lo, Hi float64
	// Low is the low quantile itself (q_low): the smallest label whose
	// relative-error weight is taken at face value (relativeWeight).
	Low float64
}

// NewLabelBand learns the believable range of a target's labels: a robust
// quantile band that one sample, or a few (1% at each end), cannot move.
// Labels that are not finite and positive are ignored.
func NewLabelBand(y []float64) LabelBand {
	s := make([]float64, 0, len(y))
	for _, v := range y {
		if v > 0 && !math.IsInf(v, 0) {
			s = append(s, v)
		}
	}
	if len(s) == 0 {
		return LabelBand{Lo: MinLatencyMs, Hi: math.MaxFloat64, Low: MinLatencyMs}
	}
	sort.Float64s(s)
	n := len(s)
	// At least the most extreme label is ignored once there are a few:
	// one poisoned sample among ten must not set the band.
	k := int(0.01 * float64(n))
	if n >= 5 {
		k = max(k, 1)
	}
	lo := math.Max(s[k]/labelBandLow, MinLatencyMs)
	hi := math.Max(s[n-1-k]*labelBandHigh, lo)
	return LabelBand{Lo: lo, Hi: hi, Low: math.Max(s[k], MinLatencyMs)}
}

// relativeWeight is the weight of a label under relative error, 1/y²,
// with y taken no lower than the band's low quantile: a label clipped to
// the band's floor is still one the data calls unusually low, and at face
// value its weight would be 16 times that of the lowest ordinary label.
func (b LabelBand) relativeWeight(y float64) float64 {
	y = math.Max(y, b.Low)
	return 1 / (y * y)
}

// Clip winsorises a label into the band.
func (b LabelBand) Clip(y float64) float64 { return math.Min(math.Max(y, b.Lo), b.Hi) }

// Contains reports whether y is a believable label.
func (b LabelBand) Contains(y float64) bool { return y >= b.Lo && y <= b.Hi }

// winsorise returns d with every label clipped into the band (the feature
// rows are shared, not copied).
func winsorise(d Dataset, b LabelBand) Dataset {
	out := Dataset{X: d.X, Y: make([]float64, len(d.Y))}
	for i, y := range d.Y {
		out.Y[i] = b.Clip(y)
	}
	return out
}

// believable returns the rows of d whose label lies in the band: a model is
// measured only on labels the fit would believe, so that one absurd label
// in the holdout (1e-300 ms, whose percentage error is 10^302) cannot
// decide its figures, nor the publication gate's comparison.
func believable(d Dataset, b LabelBand) Dataset {
	out := Dataset{X: make([][]float64, 0, len(d.Y)), Y: make([]float64, 0, len(d.Y))}
	for i, y := range d.Y {
		if b.Contains(y) {
			out.X, out.Y = append(out.X, d.X[i]), append(out.Y, y)
		}
	}
	return out
}
