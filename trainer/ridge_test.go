package trainer

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestFitRidgeRecoversLine(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	X := make([][]float64, 500)
	y := make([]float64, len(X))
	for i := range X {
		X[i] = []float64{rng.Float64() * 1000, rng.Float64(), 7} // the last column is constant
		y[i] = 5 + 0.02*X[i][0] - 3*X[i][1]
	}
	lin, err := FitRidge(X, y, nil, 1e-9)
	if err != nil {
		t.Fatal(err)
	}
	b0, b := lin.OriginalUnits()
	want := []float64{0.02, -3, 0}
	for j := range want {
		if math.Abs(b[j]-want[j]) > 1e-6 {
			t.Errorf("coefficient %d = %v, want %v", j, b[j], want[j])
		}
	}
	if math.Abs(b0-5) > 1e-5 {
		t.Errorf("intercept %v, want 5", b0)
	}
}

// Weights 1/y² make the fit minimise relative error: a few huge outliers
// no longer drag the line away from the many ordinary rows.
func TestFitRidgeRelativeWeights(t *testing.T) {
	var X [][]float64
	var y []float64
	for i := 0; i < 100; i++ {
		X = append(X, []float64{float64(i)})
		y = append(y, 10+float64(i))
	}
	X = append(X, []float64{50})
	y = append(y, 5000) // one multi-second outlier
	w := make([]float64, len(y))
	for i := range y {
		w[i] = 1 / (y[i] * y[i])
	}
	plain, _ := FitRidge(X, y, nil, 1e-6)
	rel, _ := FitRidge(X, y, w, 1e-6)
	ape := func(lin interface{ Predict([]float64) float64 }) float64 {
		var s float64
		for i := 0; i < 100; i++ {
			s += math.Abs(lin.Predict(X[i])-y[i]) / y[i]
		}
		return s
	}
	if ape(rel) >= ape(plain)/5 {
		t.Errorf("relative-error weights did not resist the outlier: %v vs %v", ape(rel), ape(plain))
	}
}

func TestFitRidgeRejects(t *testing.T) {
	if _, err := FitRidge(nil, nil, nil, 1); err == nil {
		t.Error("no rows accepted")
	}
	if _, err := FitRidge([][]float64{{1}}, []float64{1, 2}, nil, 1); err == nil {
		t.Error("label count mismatch accepted")
	}
	if _, err := FitRidge([][]float64{{1}}, []float64{1}, []float64{math.NaN()}, 1); err == nil {
		t.Error("NaN weight accepted")
	}
}
