package workload

import (
	"math"
	"testing"
)

func TestArrivalsRateAndBurstiness(t *testing.T) {
	const n, rate = 20000, 5.0
	tests := []struct {
		burstiness float64
		cv         float64 // coefficient of variation of the gaps: 1/√shape
	}{
		{0, 1}, // 0 means Poisson
		{1, 1},
		{0.25, 2},
		{4, 0.5},
	}
	for _, tt := range tests {
		times := Arrivals{Rate: rate, Burstiness: tt.burstiness}.Times(n, newRand(3, 1))
		gaps := make([]float64, n)
		prev := 0.0
		for i, at := range times {
			gaps[i] = at.Seconds() - prev
			prev = at.Seconds()
			if gaps[i] < 0 {
				t.Fatalf("burstiness %v: arrival %d goes back in time", tt.burstiness, i)
			}
		}
		mean, sd := meanSD(gaps)
		if math.Abs(mean*rate-1) > 0.05 {
			t.Errorf("burstiness %v: mean gap %.4f s, want %.4f", tt.burstiness, mean, 1/rate)
		}
		if cv := sd / mean; math.Abs(cv-tt.cv) > 0.1*tt.cv {
			t.Errorf("burstiness %v: gap CV %.3f, want %.3f", tt.burstiness, cv, tt.cv)
		}
	}
}

func TestArrivalsAllAtOnce(t *testing.T) {
	for _, at := range (Arrivals{}).Times(5, newRand(1, 1)) {
		if at != 0 {
			t.Fatalf("rate 0 sent a request at %v", at)
		}
	}
}

func meanSD(v []float64) (float64, float64) {
	mean := 0.0
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	ss := 0.0
	for _, x := range v {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(v)-1))
}
