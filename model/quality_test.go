package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestMeasure(t *testing.T) {
	pred := []float64{110, 90, 50, 7}
	actual := []float64{100, 100, 100, 0} // the last row has no label
	q := Measure(pred, actual)
	if q.Rows != 3 {
		t.Fatalf("rows %d, want 3", q.Rows)
	}
	checks := []struct {
		name      string
		got, want float64
	}{
		{"mape", q.MAPE, (10 + 10 + 50) / 3.0},
		{"median ape", q.MedianAPE, 10},
		{"p90 ape", q.P90APE, 10 + 0.8*40},
		{"mae", q.MAE, 70 / 3.0},
		{"bias", q.Bias, -10},
	}
	for _, c := range checks {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if (Measure(nil, nil) != Quality{}) {
		t.Error("empty Measure is not zero")
	}
}

func TestCoverage(t *testing.T) {
	if got := Coverage([]float64{10, 10, 10, 10}, []float64{5, 10, 11, 0}); math.Abs(got-200.0/3) > 1e-9 {
		t.Errorf("coverage %v, want 66.7", got)
	}
}

// A calibration's quantiles cover what they claim on fresh draws from the
// distribution they were fit on.
func TestCalibrationCoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	draw := func(n int) []float64 {
		r := make([]float64, n)
		for i := range r {
			r[i] = 0.3*rng.NormFloat64() + 0.05
		}
		return r
	}
	c, err := NewCalibration("holdout", draw(50000))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	fresh := draw(50000)
	for _, q := range []float64{0.05, 0.5, 0.9, 0.95} {
		cut := c.LogResidual(q)
		hit := 0
		for _, r := range fresh {
			if r <= cut {
				hit++
			}
		}
		if got := float64(hit) / float64(len(fresh)); math.Abs(got-q) > 0.01 {
			t.Errorf("q=%v: coverage %v", q, got)
		}
	}
	if (Calibration{}).LogResidual(0.9) != 0 {
		t.Error("zero calibration is not neutral")
	}
	if _, err := NewCalibration("x", []float64{math.NaN()}); err == nil {
		t.Error("NaN residual accepted")
	}
}

// Nearly constant residuals used to interpolate to quantiles that decrease
// by an ulp, and the predictor then refused the trainer's bundle.
func TestCalibrationOfNearlyConstantResidualsValidates(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 2000; trial++ {
		base := rng.NormFloat64()
		r := make([]float64, 3+rng.IntN(200))
		for i := range r {
			r[i] = base
			if rng.IntN(3) == 0 {
				r[i] = math.Nextafter(base, math.Inf(1))
			}
		}
		c, err := NewCalibration("holdout", r)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
	}
}
