package fit

import (
	"math"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
)

// Dataset is the rows of one target, built with one schema.
type Dataset struct {
	X [][]float64
	Y []float64
}

// BuildDataset turns labelled samples into feature rows for target t. Samples
// without a label for t are skipped.
func BuildDataset(schema features.Schema, t features.Target, samples []features.Sample) Dataset {
	d := Dataset{X: make([][]float64, 0, len(samples)), Y: make([]float64, 0, len(samples))}
	// One backing array for every row: a full store is 20,000 rows per target.
	p := schema.Len()
	flat := make([]float64, len(samples)*p)
	for i := range samples {
		y, ok := samples[i].Label(t)
		if !ok {
			continue
		}
		row := flat[len(d.Y)*p : (len(d.Y)+1)*p : (len(d.Y)+1)*p]
		d.X = append(d.X, schema.Build(&samples[i].Row, row))
		d.Y = append(d.Y, y)
	}
	return d
}

func subset(d Dataset, rows []int) Dataset {
	out := Dataset{X: make([][]float64, len(rows)), Y: make([]float64, len(rows))}
	for k, i := range rows {
		out.X[k], out.Y[k] = d.X[i], d.Y[i]
	}
	return out
}

// thin returns at most n rows of d, evenly spaced, in order.
func thin(d Dataset, n int) Dataset {
	if n <= 0 || len(d.Y) <= n {
		return d
	}
	out := Dataset{X: make([][]float64, n), Y: make([]float64, n)}
	for k := range n {
		i := k * len(d.Y) / n
		out.X[k], out.Y[k] = d.X[i], d.Y[i]
	}
	return out
}

func ranges(p int, X [][]float64) []model.Range {
	r := make([]model.Range, p)
	for j := range r {
		r[j] = model.Range{Min: math.Inf(1), Max: math.Inf(-1)}
	}
	for _, x := range X {
		for j, v := range x {
			r[j].Min = math.Min(r[j].Min, v)
			r[j].Max = math.Max(r[j].Max, v)
		}
	}
	return r
}

func minMax(v []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		lo = math.Min(lo, x)
		hi = math.Max(hi, x)
	}
	return lo, hi
}

// robustSpread returns v's median and its robust standard deviation:
// 1.4826 times the median absolute deviation from the median, which is
// the standard deviation for normal data and is not moved by a tail. Both
// are NaN for no values.
func robustSpread(v []float64) (median, sd float64) {
	median = Median(v)
	dev := make([]float64, len(v))
	for i, x := range v {
		dev[i] = math.Abs(x - median)
	}
	return median, 1.4826 * Median(dev)
}
