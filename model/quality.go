package model

import (
	"math"
	"sort"
)

// Quality is how well predictions matched actual values on a set of rows.
// Percentages are in percent. A Quality with Rows == 0 says nothing.
type Quality struct {
	Rows      int     `json:"rows"`
	MAPE      float64 `json:"mape"`       // mean absolute percentage error
	MedianAPE float64 `json:"median_ape"` // median absolute percentage error
	P90APE    float64 `json:"p90_ape"`    // 90th percentile absolute percentage error
	MAE       float64 `json:"mae"`        // mean absolute error, ms
	Bias      float64 `json:"bias"`       // median signed percentage error; negative = under-prediction
}

// Measure compares predictions with actual values. Rows whose actual value is
// not positive carry no label and are skipped.
func Measure(predicted, actual []float64) Quality {
	ape := make([]float64, 0, len(actual))
	signed := make([]float64, 0, len(actual))
	var absSum float64
	for i, a := range actual {
		if !(a > 0) {
			continue
		}
		e := predicted[i] - a
		absSum += math.Abs(e)
		ape = append(ape, 100*math.Abs(e)/a)
		signed = append(signed, 100*e/a)
	}
	q := Quality{Rows: len(ape)}
	if q.Rows == 0 {
		return q
	}
	var sum float64
	for _, v := range ape {
		sum += v
	}
	sort.Float64s(ape)
	sort.Float64s(signed)
	q.MAPE = sum / float64(q.Rows)
	q.MedianAPE = sortedQuantile(ape, 0.5)
	q.P90APE = sortedQuantile(ape, 0.9)
	q.MAE = absSum / float64(q.Rows)
	q.Bias = sortedQuantile(signed, 0.5)
	return q
}

// Coverage is the percentage of rows whose actual value is at or below the
// predicted quantile.
func Coverage(quantilePredictions, actual []float64) float64 {
	n, hit := 0, 0
	for i, a := range actual {
		if !(a > 0) {
			continue
		}
		n++
		if a <= quantilePredictions[i] {
			hit++
		}
	}
	if n == 0 {
		return 0
	}
	return 100 * float64(hit) / float64(n)
}
