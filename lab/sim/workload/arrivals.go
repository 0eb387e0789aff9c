package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// Arrivals is an open-loop arrival process: gaps between requests are
// Gamma-distributed with mean 1/Rate and shape Burstiness, as in vLLM's
// benchmark_serving. Burstiness 1 is a Poisson process; below 1 requests
// come in clumps separated by lulls (coefficient of variation
// 1/√Burstiness), above 1 more evenly. Rate 0 sends everything at time 0.
type Arrivals struct {
	Rate       float64 // requests per second
	Burstiness float64 // 0 means 1
}

// Poisson arrives at rate requests per second.
func Poisson(rate float64) Arrivals { return Arrivals{Rate: rate, Burstiness: 1} }

func (a Arrivals) validate() error {
	if a.Rate < 0 || math.IsNaN(a.Rate) || math.IsInf(a.Rate, 0) || a.Burstiness < 0 || math.IsNaN(a.Burstiness) {
		return fmt.Errorf("arrivals: need rate >= 0 and burstiness >= 0, have %+v", a)
	}
	return nil
}

// Times returns n arrival times, the first gap included (so the first
// request does not arrive at exactly 0 unless Rate is 0).
func (a Arrivals) Times(n int, rng *rand.Rand) []time.Duration {
	out := make([]time.Duration, n)
	if a.Rate == 0 {
		return out
	}
	shape := a.Burstiness
	if shape == 0 {
		shape = 1
	}
	gap := distuv.Gamma{Alpha: shape, Beta: shape * a.Rate, Src: rng}
	t := 0.0
	for i := range out {
		t += gap.Rand()
		out[i] = time.Duration(math.Round(t * 1e9))
	}
	return out
}
