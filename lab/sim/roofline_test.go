package sim

import (
	"math"
	"strings"
	"testing"
	"time"
)

// llama7B and mixtral are two architectures as their HuggingFace configs
// give them: a dense model with as many KV heads as heads, and an MoE one
// with grouped KV heads and 2 of 8 experts per token.
const (
	llama7BConfig = `{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 11008,
		"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
		"hidden_act": "silu", "torch_dtype": "float16"}`
	mixtralConfig = `{"architectures": ["MixtralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
		"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
		"num_local_experts": 8, "num_experts_per_tok": 2, "hidden_act": "silu", "torch_dtype": "bfloat16"}`
	qwen3Config = `{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 5120, "intermediate_size": 25600, "head_dim": 128,
		"num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 151936,
		"hidden_act": "silu", "torch_dtype": "bfloat16"}`
)

func mustArch(t *testing.T, config string) Architecture {
	t.Helper()
	a, err := ParseArchitecture([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestParseArchitecture(t *testing.T) {
	for _, tc := range []struct {
		name            string
		config          string
		kvBytes, weight float64 // weight bytes, GB
	}{
		// 32 layers × 2 × 32 heads × 128 × 2 bytes = 512 KiB; 6.74 B params.
		{"llama-2-7b", llama7BConfig, 524288, 13.48},
		// 32 × 2 × 8 × 128 × 2 = 128 KiB; 46.7 B params.
		{"mixtral", mixtralConfig, 131072, 93.4},
		// head_dim 128 apart from hidden/heads (80); 64 × 2 × 8 × 128 × 2 = 256 KiB; 32.8 B params.
		{"qwen3-32b", qwen3Config, 262144, 65.5},
	} {
		a := mustArch(t, tc.config)
		if a.KVBytesPerToken() != tc.kvBytes {
			t.Errorf("%s: %v KV bytes per token, want %v", tc.name, a.KVBytesPerToken(), tc.kvBytes)
		}
		if w := a.WeightBytes() / 1e9; math.Abs(w-tc.weight)/tc.weight > 0.01 {
			t.Errorf("%s: %.2f GB of weights, want about %.2f", tc.name, w, tc.weight)
		}
	}
	for _, tc := range []struct{ config, want string }{
		{`{"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8, "kv_lora_rank": 512}`, "latent attention"},
		{`{"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8, "quantization_config": {"quant_method": "fp8"}}`, "quantized"},
		{`{"num_hidden_layers": 0, "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8}`, "num_hidden_layers"},
		{`{"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 3, "num_key_value_heads": 2, "intermediate_size": 8, "vocab_size": 8}`, "group"},
		{`{"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8, "torch_dtype": "int4"}`, "torch_dtype"},
		{`not json`, "decode"},
	} {
		if _, err := ParseArchitecture([]byte(tc.config)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.config, err, tc.want)
		}
	}
}

func TestParseGPU(t *testing.T) {
	for _, tc := range []struct {
		name, sheet          string
		flops, bw, mem, link float64
		nvlink               bool
	}{
		// inference-sim's flat sheet: sparse TFLOP/s halved, NVLink both ways halved.
		{"flat", `{"name": "H100 SXM", "compute": {"bf16_tensor_core": 1979, "with_sparsity": true},
			"memory": {"capacity_gb": 80, "bandwidth_tb_s": 3.35}, "interconnect": {"nvlink_bandwidth_gb_s": 900, "pcie_bandwidth_gb_s": 128}}`,
			989.5e12, 3.35e12, 80 * gib, 450e9, true},
		// Figures as {"value": …} objects, PCIe only.
		{"valued", `{"name": "RTX PRO 6000", "compute": {"bf16_tensor_tflops_dense": {"value": 503.8, "note": "x"}},
			"memory": {"capacity_gb": {"value": 96}, "bandwidth_gb_s": {"value": 1597}},
			"interconnect": {"host_interface": {"value": "PCIe 5.0 x16", "bandwidth_gb_s_per_direction": 63}}}`,
			503.8e12, 1597e9, 96 * gib, 63e9, false},
	} {
		g, err := ParseGPU([]byte(tc.sheet))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*b }
		if !near(g.DenseFLOPS, tc.flops) || !near(g.MemoryBandwidth, tc.bw) || !near(g.MemoryBytes, tc.mem) ||
			!near(g.LinkBandwidth, tc.link) || g.NVLink != tc.nvlink {
			t.Errorf("%s: %+v", tc.name, g)
		}
	}
	if _, err := ParseGPU([]byte(`{"name": "x", "compute": {}, "memory": {"capacity_gb": 1}}`)); err == nil {
		t.Error("a sheet without rates was accepted")
	}
	if g, ok := LookupGPU("h100_sxm"); !ok || g.Name != "H100-SXM" {
		t.Errorf("lookup by a spelling of the name: %v %v", g, ok)
	}
}

// unitCoefficients price every part at its data sheet's rate, with no
// fixed costs: the roofline itself.
var unitCoefficients = Coefficients{Weights: 1, KV: 1, Compute: 1, Link: 1}

func TestRooflineStepTime(t *testing.T) {
	h100, _ := LookupGPU("H100-SXM")
	dense := Roofline{Arch: mustArch(t, llama7BConfig), GPU: h100, TP: 1, Coef: unitCoefficients}
	decode := func(seqs, ctx int) Batch {
		return Batch{DecodeSeqs: seqs, DecodeContext: seqs * ctx, ContextTokens: seqs * ctx, Sampling: seqs}
	}
	// A lone decode step reads the weights once, all but the embeddings
	// (looked up, not multiplied): 13.2 GB at 3.35 TB/s.
	a7 := dense.Arch
	if got, want := dense.StepSeconds(decode(1, 0)), (a7.WeightBytes()-a7.headParams()*a7.BytesPerParam)/h100.MemoryBandwidth; math.Abs(got-want)/want > 1e-3 {
		t.Errorf("one decode: %v s, want about the weights' read time %v s", got, want)
	}
	// A batch's cost grows with its context: each token attended is read.
	short, long := dense.StepSeconds(decode(32, 100)), dense.StepSeconds(decode(32, 2000))
	if want := 32 * 1900 * dense.Arch.KVBytesPerToken() / h100.MemoryBandwidth; math.Abs(long-short-want)/want > 1e-6 {
		t.Errorf("1 900 more context tokens on 32 sequences cost %v s more, want %v s", long-short, want)
	}
	// A large prefill is compute-bound: its GEMM FLOPs at the dense rate.
	prefill := Batch{PrefillTokens: 2048, PrefillSeqs: 1, PrefillContext: 2048, PrefillPairs: 2048 * 2049 / 2}
	if got := dense.StepSeconds(prefill); got < 2*2048*6.5e9/h100.DenseFLOPS {
		t.Errorf("a 2 048-token prefill takes %v s, less than its GEMM FLOPs at the dense rate", got)
	}
	// The efficiencies multiply their parts; the fixed costs add.
	slow := dense
	slow.Coef = Coefficients{Weights: 2, KV: 1, Compute: 1, Link: 1, StepUs: 500, SeqUs: 10}
	w, _, _, _, _ := dense.work(decode(1, 0))
	if got, want := slow.StepSeconds(decode(1, 0))-dense.StepSeconds(decode(1, 0)), w/h100.MemoryBandwidth+510e-6; math.Abs(got-want) > 1e-12 {
		t.Errorf("with the weights at half speed and fixed costs: %v s more, want %v s", got, want)
	}

	// An MoE layer reads only the experts its tokens chose: one token reads
	// 2 of 8, many tokens all 8.
	moe := Roofline{Arch: mustArch(t, mixtralConfig), GPU: h100, TP: 1, Coef: unitCoefficients}
	a := moe.Arch
	fixed := (float64(a.Layers)*a.denseLayerParams() + a.headParams()) * a.BytesPerParam
	expert := float64(a.Layers) * a.expertParams() * a.BytesPerParam
	for _, tc := range []struct {
		tokens  int
		experts float64
	}{{1, 2}, {2, 8 * (1 - 0.75*0.75)}, {256, 8}} {
		w, _, _, _, _ := moe.work(decode(tc.tokens, 0))
		if got := (w - fixed) / expert; math.Abs(got-tc.experts) > 1e-6 {
			t.Errorf("%d tokens read %.4f experts' weights per layer, want %.4f", tc.tokens, got, tc.experts)
		}
	}
	// ...and compute only their own experts' FLOPs.
	_, gemm, _, _, _ := moe.work(decode(1, 0))
	if want := 2 * (float64(a.Layers)*(a.denseLayerParams()+2*a.expertParams()) + a.headParams()); math.Abs(gemm-want) > 1 {
		t.Errorf("one token's GEMM FLOPs %v, want %v (2 experts)", gemm, want)
	}

	// Tensor parallelism splits the work and adds two all-reduces a layer.
	tp2 := dense
	tp2.TP, tp2.Coef.AllReduce = 2, 20
	b := decode(64, 500)
	w1, g1, kv1, _, _ := dense.work(b)
	w2, g2, kv2, _, comm := tp2.work(b)
	if math.Abs(w1/w2-2) > 1e-9 || math.Abs(g1/g2-2) > 1e-9 || math.Abs(kv1/kv2-2) > 1e-9 {
		t.Errorf("TP 2 work per GPU: weights %v, FLOPs %v, KV %v of TP 1's, want halves", w2/w1, g2/g1, kv2/kv1)
	}
	if want := 2.0 * 32 * 64 * 4096 * 2; comm != want {
		t.Errorf("TP 2 all-reduce bytes %v, want %v (2 per layer, the hidden state of each token, half sent)", comm, want)
	}
	if got := tp2.StepSeconds(b) - (dense.StepSeconds(b)/2 + 20e-6*64 + comm/h100.LinkBandwidth); math.Abs(got) > 1e-9 {
		t.Errorf("TP 2 step off its parts by %v s", got)
	}
}

func TestRooflineKVBlocks(t *testing.T) {
	h100, _ := LookupGPU("H100-SXM")
	r := Roofline{Arch: mustArch(t, llama7BConfig), GPU: h100, TP: 1, Coef: DefaultCoefficients()}
	blocks, err := r.KVBlocks(0.9)
	if err != nil {
		t.Fatal(err)
	}
	// 72 GiB, less 12.55 GiB of weights and 5.65 GiB of budgets, in blocks of
	// 16 × 512 KiB.
	want := int((0.9*80*gib - r.Arch.WeightBytes() - activationDenseBytes - nonTorchBytes) / (16 * 524288))
	if blocks != want {
		t.Errorf("%d blocks, want %d", blocks, want)
	}
	if less, _ := r.KVBlocks(0.5); less >= blocks {
		t.Errorf("less memory for vLLM (0.5) gave %d blocks, not fewer than %d", less, blocks)
	}
	r.TP = 2
	if two, _ := r.KVBlocks(0.9); two <= 2*blocks {
		t.Errorf("TP 2: %d blocks, want more than twice TP 1's %d (the weights are paid once)", two, blocks)
	}
	big := Roofline{Arch: mustArch(t, mixtralConfig), GPU: h100, TP: 1, Coef: DefaultCoefficients()}
	if _, err := big.KVBlocks(0.9); err == nil {
		t.Error("93 GB of weights on one 80 GB GPU got a KV cache")
	}
	if _, err := r.KVBlocks(1.5); err == nil {
		t.Error("a memory utilization above 1 was accepted")
	}
}

// A roofline-priced engine: a request alone costs frontend + one step; with
// asynchronous scheduling a request arriving during a step waits for the
// one after the next.
func TestEngineAsyncSchedulingCostsANewRequestOneStep(t *testing.T) {
	h100, _ := LookupGPU("H100-SXM")
	coef := Coefficients{Weights: 1, KV: 1, Compute: 1, Link: 1, StepUs: 1000}
	cfg := Config{Name: "r", Servers: 1, KVBlocks: 4000, PrefixCaching: true, MaxNumSeqs: 64, MaxNumBatchedTokens: 2048,
		Cost: testCost, Roofline: &Roofline{Arch: mustArch(t, llama7BConfig), GPU: h100, TP: 1, Coef: coef}}
	ttft := func(async bool) time.Duration {
		c := cfg
		c.AsyncScheduling = async
		// A long answer keeps the engine stepping; the second request
		// arrives in the middle of a step.
		_, outs := runEngine(t, c, promptReq(1, 0, 16, 200, 1), promptReq(2, 100*time.Millisecond+123, 16, 2, 2))
		return outs[1].TTFT()
	}
	sync, async := ttft(false), ttft(true)
	step := cfg.Roofline.StepTime(Batch{DecodeSeqs: 2, PrefillTokens: 16, Sampling: 2})
	if d := async - sync; d < step*9/10 || d > step*11/10 {
		t.Errorf("async scheduling added %v to TTFT, want about one step (%v)", d, step)
	}
}

// A client time-out drops the request wherever it is, frees its blocks,
// and leaves the others to finish.
func TestEngineDropsTimedOutRequests(t *testing.T) {
	cfg := testConfig()
	cfg.MaxNumSeqs = 1
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	running := &Outcome{Request: promptReq(1, 0, 64, 200, 1), Deadline: 500 * time.Millisecond}
	waiting := &Outcome{Request: promptReq(2, 0, 64, 5, 2), Deadline: 300 * time.Millisecond}
	last := &Outcome{Request: promptReq(3, 0, 64, 5, 3)}
	for _, o := range []*Outcome{running, waiting, last} {
		if err := e.Submit(o, 0); err != nil {
			t.Fatal(err)
		}
	}
	var timedOut []int
	for {
		if _, ok := e.Next(); !ok {
			break
		}
		for _, ev := range e.Advance() {
			if ev.Kind == TimedOut {
				timedOut = append(timedOut, ev.Outcome.Request.ID)
				if ev.Outcome.Done || e.Now() < ev.Outcome.Deadline {
					t.Errorf("request %d dropped at %v, before its deadline %v or after finishing", ev.Outcome.Request.ID, e.Now(), ev.Outcome.Deadline)
				}
			}
		}
		checkEngine(t, e)
	}
	if len(timedOut) != 2 || timedOut[0] != 2 || timedOut[1] != 1 || !running.TimedOut || !waiting.TimedOut {
		t.Errorf("timed out %v, want the waiting request 2, then the running request 1", timedOut)
	}
	if !last.Done || last.TimedOut || e.pool.numUsed() != 0 {
		t.Errorf("the request without a deadline: done %v; blocks still used %d", last.Done, e.pool.numUsed())
	}
}

func TestEngineMaxModelLenRejects(t *testing.T) {
	cfg := testConfig()
	cfg.MaxModelLen = 100
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if e.Fits(promptReq(1, 0, 64, 36, 1)) != true || e.Fits(promptReq(2, 0, 64, 37, 1)) {
		t.Error("max_model_len 100: want 64 + 36 accepted and 64 + 37 refused")
	}
}
