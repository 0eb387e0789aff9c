package sim

import (
	"fmt"
	"math"
	"time"
)

// CostModel prices one engine step. A step's time is linear in what the
// step does:
//
//	StepMs + DecodeSeqMs·(sequences decoding) + ContextTokenMs·(KV tokens attended)
//	       + PrefillTokenMs·max(0, prompt tokens computed − PrefillFreeTokens)
//
// StepMs is dominated by reading the weights once: decode is memory-bound,
// so a decoding sequence adds little. Prefill is compute-bound, so every
// prompt token adds PrefillTokenMs, except that the first
// PrefillFreeTokens of a step ride along in the time the step spends
// reading weights anyway (the roofline's knee: StepMs/PrefillTokenMs). With
// PrefillFreeTokens 0 the model is purely linear; see docs/SIMULATOR.md for
// why the default is not.
//
// FrontendMs is not part of a step: it is the fixed time between the
// router's dispatch and the engine seeing the request (proxy, HTTP,
// tokenisation), which the router's TTFT includes.
type CostModel struct {
	StepMs            float64 `json:"step_ms"`
	PrefillTokenMs    float64 `json:"prefill_token_ms"`
	DecodeSeqMs       float64 `json:"decode_seq_ms"`
	ContextTokenMs    float64 `json:"context_token_ms"`
	PrefillFreeTokens int     `json:"prefill_free_tokens"`
	FrontendMs        float64 `json:"frontend_ms"`
}

// DefaultCostModel is FitCostModel applied to the shared H200 trace
// (Qwen3-32B, one H200 per replica), rounded; TestDefaultCostModelIsTheFit
// recomputes it. See docs/SIMULATOR.md for the fit and its quality.
func DefaultCostModel() CostModel {
	return CostModel{
		StepMs:            19.2,
		PrefillTokenMs:    0.131,
		DecodeSeqMs:       0.039,
		ContextTokenMs:    ContextTokenMsPrior,
		PrefillFreeTokens: 147,
		FrontendMs:        33.8,
	}
}

// ContextTokenMsPrior is the cost of attending one KV token in a step, from
// the hardware, not the trace (the trace cannot separate it from the
// per-sequence cost, see FitCostModel): Qwen3-32B keeps 64 layers × 8 KV
// heads × 128 dims × 2 (K and V) × 2 bytes = 256 KiB per token, and an H200
// reads HBM at 4.8 TB/s, so one token costs 262144 B / 4.8e12 B/s ≈ 55 ns.
const ContextTokenMsPrior = 262144.0 / 4.8e12 * 1e3

// Validate rejects negative or non-finite coefficients and a zero-cost step,
// which would let simulated time stand still.
func (c CostModel) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"step_ms", c.StepMs}, {"prefill_token_ms", c.PrefillTokenMs}, {"decode_seq_ms", c.DecodeSeqMs},
		{"context_token_ms", c.ContextTokenMs}, {"frontend_ms", c.FrontendMs},
	} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("cost model: %s = %v, need a finite value >= 0", f.name, f.v)
		}
	}
	if c.PrefillFreeTokens < 0 {
		return fmt.Errorf("cost model: prefill_free_tokens = %d, need >= 0", c.PrefillFreeTokens)
	}
	if c.StepMs == 0 && c.PrefillTokenMs == 0 && c.DecodeSeqMs == 0 {
		return fmt.Errorf("cost model: step_ms, prefill_token_ms and decode_seq_ms are all 0, so a step would take no time")
	}
	return nil
}

// Batch is what one step computes.
type Batch struct {
	PrefillTokens int // tokens of sequences still prefilling (or recomputing)
	DecodeSeqs    int // sequences computing their one next token
	ContextTokens int // KV tokens each scheduled sequence attends, summed
	// The same work in the detail a model of the hardware needs: the
	// prefill chunks, the context of the decoding sequences (the KV they
	// read) and of the prefill chunks, the query-key pairs the chunks'
	// attention computes (a chunk of n tokens after c computed ones: n·c +
	// n(n+1)/2), and the sequences that sample a token at the step's end.
	PrefillSeqs    int
	DecodeContext  int
	PrefillContext int
	PrefillPairs   float64
	Sampling       int
}

// StepModel prices what an engine does: one step of a batch, and the
// fixed delay between a client sending a request and the engine seeing it.
// CostModel (a linear fit to one trace) and Roofline (the model's FLOPs
// and bytes against the GPU) are its instances.
type StepModel interface {
	StepTime(b Batch) time.Duration
	Frontend() time.Duration
}

// StepTimeMs is the time of one step in milliseconds.
func (c CostModel) StepTimeMs(b Batch) float64 {
	return c.StepMs + c.PrefillTokenMs*float64(max(0, b.PrefillTokens-c.PrefillFreeTokens)) +
		c.DecodeSeqMs*float64(b.DecodeSeqs) + c.ContextTokenMs*float64(b.ContextTokens)
}

// StepTime is StepTimeMs as a duration, rounded to the nanosecond and never
// zero, so the simulation always moves forward.
func (c CostModel) StepTime(b Batch) time.Duration {
	return max(msToDuration(c.StepTimeMs(b)), 1)
}

// Frontend is FrontendMs as a duration.
func (c CostModel) Frontend() time.Duration { return msToDuration(c.FrontendMs) }

func msToDuration(ms float64) time.Duration { return time.Duration(math.Round(ms * 1e6)) }

func durationMs(d time.Duration) float64 { return float64(d) / 1e6 }
