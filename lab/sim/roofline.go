package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"
)

// Roofline prices an engine step from the model's architecture and the
// GPU: a step's time is the time its bytes take at the memory's rate and
// its FLOPs at the tensor cores' rate, on each of the TP GPUs, each rate
// discounted by a coefficient fitted once across real runs
// (DefaultCoefficients), plus the all-reduces tensor parallelism adds and
// the engine's fixed costs:
//
//	step = Step + Seq·(sequences scheduled)
//	     + max(Weights·weight bytes/BW, Compute·GEMM FLOPs/FLOPS)   (the linear layers)
//	     + KV·KV bytes/BW                                           (attention reading the cache)
//	     + Compute·prefill attention FLOPs/FLOPS
//	     + AllReduce·2·layers + Link·all-reduce bytes/link          (TP > 1 only)
//
// per GPU: weights, FLOPs and KV bytes divide by TP. An MoE layer reads the
// weights of the experts its tokens use (each token ActiveExperts of
// Experts, chosen independently), and its tokens compute ActiveExperts
// experts each. The output head runs only for the sequences that sample.
type Roofline struct {
	Arch Architecture `json:"architecture"`
	GPU  GPU          `json:"gpu"`
	TP   int          `json:"tensor_parallel"`
	Coef Coefficients `json:"coefficients"`
}

// Coefficients are the Roofline's few global constants: the fraction of
// its peak each part of the hardware reaches, as a multiplier of the ideal
// time (1 is the data sheet's rate), and the engine's fixed costs. They are
// fitted once across runs, never per model or per run (docs/SIMULATOR.md).
type Coefficients struct {
	Weights   float64 `json:"weights"`       // weight streaming, × the ideal time at the memory's peak
	KV        float64 `json:"kv"`            // paged-attention KV reads, × ideal
	Compute   float64 `json:"compute"`       // tensor-core FLOPs, × ideal (1/MFU)
	Link      float64 `json:"link"`          // all-reduce bytes over the GPU link, × ideal
	StepUs    float64 `json:"step_us"`       // fixed cost of a step (scheduling, launch, sampling)
	SeqUs     float64 `json:"seq_us"`        // cost per scheduled sequence (input preparation, sampling)
	AllReduce float64 `json:"all_reduce_us"` // latency of one all-reduce (TP > 1)
	// FrontendMs is what serving a request over HTTP adds to the latency a
	// client measures: the API server's parsing, tokenisation and
	// streaming, the network. A log written inside the engine does not see
	// it.
	FrontendMs float64 `json:"frontend_ms"`
}

// DefaultCoefficients are the Roofline's coefficients fitted once across
// the ten shared real-vLLM runs from the hardware prior (`headroom
// calibrate --prior physics` on them, rounded; docs/SIMULATOR.md, §11,
// gives the fit and how it does on runs it did not see).
func DefaultCoefficients() Coefficients {
	return Coefficients{Weights: 1.183, KV: 1.250, Compute: 1.776, Link: 4.52, StepUs: 1083, SeqUs: 5.15, AllReduce: 16.5, FrontendMs: 6.36}
}

// ReadCoefficients reads coefficients from a JSON file (as `headroom
// calibrate` writes them); a key it does not know is an error, one it
// does not give keeps DefaultCoefficients' value.
func ReadCoefficients(path string) (Coefficients, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Coefficients{}, fmt.Errorf("read coefficients: %w", err)
	}
	c := DefaultCoefficients()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Coefficients{}, fmt.Errorf("coefficients %s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return Coefficients{}, fmt.Errorf("coefficients %s: %w", path, err)
	}
	return c, nil
}

// Validate rejects coefficients that are negative or not finite, and
// rates of zero (infinitely fast hardware).
func (c Coefficients) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"weights", c.Weights}, {"kv", c.KV}, {"compute", c.Compute}, {"link", c.Link}, {"step_us", c.StepUs}, {"seq_us", c.SeqUs},
		{"all_reduce_us", c.AllReduce}, {"frontend_ms", c.FrontendMs}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("coefficients: %s = %v, need a finite value >= 0", f.name, f.v)
		}
	}
	if c.Weights == 0 || c.Compute == 0 {
		return fmt.Errorf("coefficients: weights and compute must be above 0")
	}
	return nil
}

// Validate reports the first setting the model cannot price.
func (r Roofline) Validate() error {
	if err := r.Arch.Validate(); err != nil {
		return err
	}
	if err := r.GPU.Validate(); err != nil {
		return err
	}
	switch {
	case r.TP < 1:
		return fmt.Errorf("roofline: tensor parallel %d, need at least 1", r.TP)
	case r.Arch.Heads%r.TP != 0:
		return fmt.Errorf("roofline: %d attention heads do not split over %d GPUs", r.Arch.Heads, r.TP)
	}
	return r.Coef.Validate()
}

// StepTime implements StepModel; it is never zero, so that simulated time
// moves.
func (r Roofline) StepTime(b Batch) time.Duration {
	return max(time.Duration(math.Round(r.StepSeconds(b)*1e9)), 1)
}

// Frontend implements StepModel.
func (r Roofline) Frontend() time.Duration { return msToDuration(r.Coef.FrontendMs) }

// StepSeconds is the time of one step of b, in seconds.
func (r Roofline) StepSeconds(b Batch) float64 {
	w, gemm, kv, attn, comm := r.work(b)
	c := r.Coef
	bw, flops := r.GPU.MemoryBandwidth, r.GPU.DenseFLOPS
	t := (c.StepUs + c.SeqUs*float64(b.PrefillSeqs+b.DecodeSeqs)) * 1e-6
	t += max(c.Weights*w/bw, c.Compute*gemm/flops)
	t += c.KV*kv/bw + c.Compute*attn/flops
	if r.TP > 1 {
		t += c.AllReduce*1e-6*2*float64(r.Arch.Layers) + c.Link*comm/r.GPU.LinkBandwidth
	}
	return t
}

// work is one GPU's share of a step: the weight bytes it reads, the FLOPs
// of its linear layers, the KV-cache bytes it reads and writes, the FLOPs
// of its prefill attention, and the bytes its all-reduces send.
func (r Roofline) work(b Batch) (weights, gemm, kv, attn, comm float64) {
	a := r.Arch
	tp := float64(r.TP)
	tokens := float64(b.PrefillTokens + b.DecodeSeqs)
	layers := float64(a.Layers)
	perToken := a.denseLayerParams() + float64(a.ActiveExperts)*a.expertParams()
	read := a.denseLayerParams()
	if a.MoE() && tokens > 0 {
		// Each token picks ActiveExperts of Experts; an expert no token
		// picked is never read.
		e, k := float64(a.Experts), float64(a.ActiveExperts)
		read += e * (1 - math.Pow(1-k/e, tokens)) * a.expertParams()
	}
	weights = (layers*read + a.headParams()) * a.BytesPerParam / tp
	gemm = 2 * (tokens*layers*perToken + float64(b.Sampling)*a.headParams()) / tp
	kvToken := a.KVBytesPerToken() / tp
	kv = float64(b.DecodeContext+b.PrefillContext)*kvToken + tokens*kvToken
	attn = 4 * layers * float64(a.Heads*a.HeadDim) * b.PrefillPairs / tp
	if r.TP > 1 {
		// Two all-reduces of the hidden state per layer; a ring sends
		// 2(tp−1)/tp of it from each GPU.
		comm = 2 * layers * 2 * (tp - 1) / tp * tokens * float64(a.Hidden) * a.BytesPerParam
	}
	return weights, gemm, kv, attn, comm
}

// Activation budgets: the GPU memory an engine keeps outside the weights
// and the KV cache for a forward pass of max_num_batched_tokens, CUDA
// graphs and sampling (over the whole TP group), and per GPU for the CUDA
// context and the communication buffers. They are the llm-d capacity
// planner's figures for vLLM.
const (
	activationDenseBytes = 5.5 * gib
	activationMoEBytes   = 8 * gib
	nonTorchBytes        = 0.15 * gib
	nonTorchTPBytes      = 0.6 * gib
)

// KVBlocks is the engine's KV cache in blocks of BlockSize tokens, as vLLM
// sizes it: each GPU's memory times memoryUtilization, less its share of
// the weights and of the activation budget and its own overhead, divided
// by one block's bytes on one GPU (its share of the KV heads).
func (r Roofline) KVBlocks(memoryUtilization float64) (int, error) {
	if !(memoryUtilization > 0 && memoryUtilization <= 1) {
		return 0, fmt.Errorf("gpu memory utilization %v: want a fraction in (0, 1]", memoryUtilization)
	}
	tp := float64(r.TP)
	act, other := activationDenseBytes, nonTorchBytes
	if r.Arch.MoE() {
		act = activationMoEBytes
	}
	if r.TP > 1 {
		other = nonTorchTPBytes
	}
	free := r.GPU.MemoryBytes*memoryUtilization - (r.Arch.WeightBytes()+act)/tp - other
	block := BlockSize * r.Arch.KVBytesPerToken() / tp
	n := int(math.Floor(free / block))
	if n < 1 {
		return 0, fmt.Errorf("%s on %d × %s: the weights (%.1f GiB per GPU) leave no memory for a KV cache",
			r.Arch.Name, r.TP, r.GPU.Name, r.Arch.WeightBytes()/tp/gib)
	}
	return n, nil
}
