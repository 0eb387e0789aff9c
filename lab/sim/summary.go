package sim

import (
	"math"
	"slices"
	"time"
)

// Percentiles describe a latency distribution in milliseconds.
type Percentiles struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

// Summary is a run's outcome in aggregate.
type Summary struct {
	Requests  int `json:"requests"`
	Completed int `json:"completed"`
	Rejected  int `json:"rejected"`
	TimedOut  int `json:"timed_out,omitempty"` // dropped when the client gave up
	// Duration runs from the first dispatch to the last finish.
	Duration         time.Duration `json:"-"`
	ThroughputRPS    float64       `json:"throughput_rps"`
	OutputTokensPerS float64       `json:"output_tokens_per_s"`
	PromptTokens     int           `json:"prompt_tokens"`
	PrefixHitTokens  int           `json:"prefix_hit_tokens"`
	// PrefixHitRate is prefix-hit tokens over prompt tokens, counting each
	// completed request's first scheduling only.
	PrefixHitRate float64     `json:"prefix_hit_rate"`
	Preemptions   int         `json:"preemptions"`
	Evictions     int         `json:"kv_evictions"`
	TTFT          Percentiles `json:"ttft"`
	TPOT          Percentiles `json:"tpot"` // over requests with at least two output tokens
	E2E           Percentiles `json:"e2e"`
}

// Summarize aggregates outcomes. Requests that did not complete count in
// Requests (and Rejected) only.
func Summarize(outs []*Outcome) Summary {
	s := Summary{Requests: len(outs)}
	var ttft, tpot, e2e []float64
	var first, last time.Duration
	outputTokens := 0
	for _, o := range outs {
		if o.Rejected {
			s.Rejected++
		}
		if o.TimedOut {
			s.TimedOut++
		}
		if !o.Done {
			continue
		}
		if s.Completed == 0 || o.Dispatch < first {
			first = o.Dispatch
		}
		last = max(last, o.Finish)
		s.Completed++
		outputTokens += o.Request.OutputTokens
		s.PromptTokens += o.Request.PromptTokens
		s.PrefixHitTokens += o.PrefixHitTokens
		s.Preemptions += o.Preemptions
		ttft = append(ttft, durationMs(o.TTFT()))
		e2e = append(e2e, durationMs(o.E2E()))
		if o.Request.OutputTokens > 1 {
			tpot = append(tpot, durationMs(o.TPOT()))
		}
	}
	if s.Completed > 0 {
		s.Duration = last - first
		if secs := s.Duration.Seconds(); secs > 0 {
			s.ThroughputRPS = float64(s.Completed) / secs
			s.OutputTokensPerS = float64(outputTokens) / secs
		}
	}
	if s.PromptTokens > 0 {
		s.PrefixHitRate = float64(s.PrefixHitTokens) / float64(s.PromptTokens)
	}
	s.TTFT, s.TPOT, s.E2E = percentiles(ttft), percentiles(tpot), percentiles(e2e)
	return s
}

func percentiles(v []float64) Percentiles {
	if len(v) == 0 {
		return Percentiles{}
	}
	slices.Sort(v)
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return Percentiles{
		N: len(v), Mean: sum / float64(len(v)),
		P50: Quantile(v, 0.50), P90: Quantile(v, 0.90), P95: Quantile(v, 0.95), P99: Quantile(v, 0.99),
		Max: v[len(v)-1],
	}
}

// Quantile is the q-quantile of sorted values, interpolating linearly
// between order statistics (type 7, as numpy's default); NaN when empty.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	h := q * float64(len(sorted)-1)
	lo := int(math.Floor(h))
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}
