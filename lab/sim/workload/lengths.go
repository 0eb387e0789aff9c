// Package workload generates and reads request streams for the simulator:
// agent sessions that share a long system prompt and grow their history
// turn by turn, chat traffic with ShareGPT-like lengths, Poisson or bursty
// arrivals, and JSONL request logs for replaying real traffic. Every
// generator is a pure function of its options, seed included.
package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// LogNormal is a token-length distribution: exp(N(Mu, Sigma²)), rounded
// and clipped to [Min, Max].
type LogNormal struct {
	Mu, Sigma float64
	Min, Max  int
}

// Sample draws one length.
func (d LogNormal) Sample(rng *rand.Rand) int {
	v := math.Round(math.Exp(d.Mu + d.Sigma*rng.NormFloat64()))
	return int(min(max(v, float64(d.Min)), float64(d.Max)))
}

// Median is exp(Mu), clipped.
func (d LogNormal) Median() int {
	return int(min(max(math.Round(math.Exp(d.Mu)), float64(d.Min)), float64(d.Max)))
}

func (d LogNormal) validate(name string) error {
	if d.Min < 1 || d.Max < d.Min || d.Sigma < 0 || math.IsNaN(d.Mu) || math.IsInf(d.Mu, 0) {
		return fmt.Errorf("%s lengths: need 1 <= min <= max and sigma >= 0, have %+v", name, d)
	}
	return nil
}

// ChatPromptLengths is the log-normal fitted to the prompts of the shared
// H200 ShareGPT trace (1 692 prompts, 4 to 1 488 tokens), rounded; a test
// recomputes it (fitPromptLengths, lengths_test.go).
var ChatPromptLengths = LogNormal{Mu: 4.846, Sigma: 1.419, Min: 4, Max: 1488}

// ChatOutputLengths: the trace does not record output lengths. A median of
// 60 tokens and Sigma 1 give a mean of about 100, which is what Little's law
// says the trace's answers averaged: at 8 requests/s per server it shows
// about 17 requests in flight at a TPOT of about 20 ms, i.e. about 2.1 s per
// request. The clip is the trace's range.
var ChatOutputLengths = LogNormal{Mu: math.Log(60), Sigma: 1.0, Min: 1, Max: 1024}

// newRand returns the generator for a seed; stream separates the uses of
// one seed (arrivals, lengths, token content) so that changing one option
// does not reshuffle everything else.
func newRand(seed uint64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15^stream))
}
