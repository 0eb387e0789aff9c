package eval

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/trace"
)

// SyntheticOptions shape a synthetic trace in which latency grows with the
// prompt, for measuring extrapolation. Zero fields take the defaults.
type SyntheticOptions struct {
	Rows      int    // default 4000
	Seed      uint64 // default 0, a fixed stream like any other
	MinTokens int64  // shortest prompt, default 16
	MaxTokens int64  // longest prompt, default 8192
	// Noise is the standard deviation of the multiplicative log-normal noise
	// on both latencies; default 0.08 (about ±8%).
	Noise float64
}

func (o SyntheticOptions) withDefaults() SyntheticOptions {
	if o.Rows <= 0 {
		o.Rows = 4000
	}
	if o.MinTokens <= 0 {
		o.MinTokens = 16
	}
	if o.MaxTokens <= o.MinTokens {
		o.MaxTokens = max(8192, o.MinTokens+1)
	}
	if o.Noise <= 0 {
		o.Noise = 0.08
	}
	return o
}

// Costs of the synthetic server, in milliseconds. The prefill is linear in
// the uncached prompt plus an attention term quadratic in it; at 4,096
// tokens the quadratic part is about 8% of the linear one, the share a
// 30-70B model's attention FLOPs have at that length.
const (
	synthTTFTFixed       = 12.0
	synthPrefillPerToken = 0.07
	synthAttentionScale  = 50_000.0 // tokens at which attention equals the linear part
	synthPerRunningTTFT  = 1.5
	synthPerWaiting      = 30.0
	synthTPOTFixed       = 9.0
	synthPerRunningTPOT  = 0.3
	synthTPOTPerContext  = 0.0006
	synthTPOTPerKV       = 20.0
)

// SyntheticTTFT is the noise-free time to first token of the synthetic
// server for a row.
func SyntheticTTFT(r *features.Row) float64 {
	eff := (1 - r.PrefixCacheScore) * float64(r.InputTokenLength)
	prefill := synthPrefillPerToken * eff * (1 + eff/synthAttentionScale)
	inFlight := synthPrefillPerToken * float64(r.PrefillTokensInFlight)
	return synthTTFTFixed + prefill + inFlight + synthPerRunningTTFT*float64(r.NumRequestRunning) +
		synthPerWaiting*float64(r.NumRequestWaiting)
}

// SyntheticTPOT is the noise-free time per output token of the synthetic
// server for a row.
func SyntheticTPOT(r *features.Row) float64 {
	return synthTPOTFixed + synthPerRunningTPOT*float64(r.NumRequestRunning) +
		synthTPOTPerContext*float64(r.InputTokenLength) + synthTPOTPerKV*r.KVCachePercentage
}

// Synthetic returns a trace of rows from a server whose latencies follow
// SyntheticTTFT and SyntheticTPOT times log-normal noise. Prompt lengths
// are log-uniform between MinTokens and MaxTokens and independent of the
// load features, so a split by prompt length leaves every other feature's
// range intact: only the prompt moves out of range. Every sample carries
// both labels. The same options give the same trace.
func Synthetic(o SyntheticOptions) []features.Sample {
	o = o.withDefaults()
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed_ca11_ab1e))
	logMin, logMax := math.Log(float64(o.MinTokens)), math.Log(float64(o.MaxTokens))
	out := make([]features.Sample, o.Rows)
	for i := range out {
		r := features.Row{
			InputTokenLength:  int64(math.Round(math.Exp(logMin + rng.Float64()*(logMax-logMin)))),
			NumRequestRunning: rng.Int64N(33),
		}
		if rng.Float64() < 0.3 {
			r.PrefixCacheScore = math.Round(rng.Float64()*90) / 100
		}
		if rng.Float64() < 0.2 {
			r.NumRequestWaiting = 1 + rng.Int64N(4)
		}
		if r.NumRequestRunning > 0 && rng.Float64() < 0.5 {
			r.PrefillTokensInFlight = rng.Int64N(2048)
		}
		// KV use follows the running batch, not this request's prompt.
		r.KVCachePercentage = math.Min(1, float64(r.NumRequestRunning)*0.02+rng.Float64()*0.05)
		out[i] = features.Sample{
			Row:          r,
			ActualTTFTMs: SyntheticTTFT(&r) * math.Exp(o.Noise*rng.NormFloat64()),
			ActualTPOTMs: SyntheticTPOT(&r) * math.Exp(o.Noise*rng.NormFloat64()),
			Timestamp:    trace.Epoch().Add(time.Duration(i) * time.Millisecond),
		}
	}
	return out
}
