package suite

import "github.com/headroomhq/headroom/lab/sim"

// Default is the suite `headroom suite` writes: seven regimes of about
// 1,500 to 2,000 rows each, small enough that `headroom eval --suite` over
// all of them runs in a few minutes on one core. Three regimes are held out:
// agentic prefix reuse, a model size nothing else uses, and the
// disaggregated pool, whose rows mix two pod roles and whose TTFT crosses a
// network hop, which no tuned regime has (and the settings chosen before it
// existed never saw it).
func Default() *Manifest {
	chatPrompt := Lengths{Median: 127, Sigma: 1.419, Min: 4, Max: 1488} // the shared trace's fit
	chatOutput := Lengths{Median: 60, Sigma: 1, Min: 1, Max: 2000}
	return &Manifest{
		Version:        1,
		HeldOutRegimes: []string{"prefix-reuse", "large-model", "pd-pool"},
		Eval:           Eval{Seeds: 3, Every: 100},
		Traces: []Trace{
			{
				Name: "decode-bound", Regime: "decode-bound", Seed: 11,
				About: "short prompts, long answers, bursty: dozens of sequences decoding per server, so TPOT follows the batch",
				Workload: Workload{Kind: KindChat, Requests: 900,
					Prompt: Lengths{Median: 80, Sigma: 0.8, Min: 4, Max: 512},
					Output: Lengths{Median: 350, Sigma: 0.6, Min: 16, Max: 2000},
					Rate:   16, Burstiness: 0.25},
				Fleet: withName(sim.DefaultConfig(), "qwen3-32b-h200"), Router: "least-queue",
			},
			{
				Name: "prefill-bound", Regime: "prefill-bound", Seed: 12,
				About: "long prompts (median 2,500 tokens), short answers, no prefix cache: TTFT is mostly prefill",
				Workload: Workload{Kind: KindChat, Requests: 900,
					Prompt: Lengths{Median: 2500, Sigma: 0.6, Min: 256, Max: 7000},
					Output: Lengths{Median: 16, Sigma: 0.7, Min: 2, Max: 128},
					Rate:   3, Burstiness: 1},
				Fleet: noPrefixCache(withName(sim.DefaultConfig(), "qwen3-32b-h200")), Router: "least-queue",
			},
			{
				Name: "queue-dominated", Regime: "queue-dominated", Seed: 13,
				About: "the shared trace's lengths with at most 16 running sequences per server and bursts above capacity: TTFT is mostly waiting",
				Workload: Workload{Kind: KindChat, Requests: 900, Prompt: chatPrompt, Output: chatOutput,
					Rate: 11, Burstiness: 0.25},
				Fleet: maxSeqs(withName(sim.DefaultConfig(), "qwen3-32b-h200"), 16), Router: "round-robin",
			},
			{
				Name: "prefix-reuse", Regime: "prefix-reuse", Seed: 14,
				About: "agent sessions resending their history on a shared system prompt, prefix-aware routing: most prompt tokens are cache hits",
				Workload: Workload{Kind: KindAgentic, Sessions: 112, Turns: 8, SystemPromptTokens: 1200,
					Prompt: Lengths{Median: 200, Sigma: 0.8, Min: 8, Max: 4000},
					Output: Lengths{Median: 120, Sigma: 0.7, Min: 4, Max: 2000},
					Rate:   6, Burstiness: 1},
				Fleet: withName(sim.DefaultConfig(), "qwen3-32b-h200"), Router: "load-prefix",
			},
			{
				Name: "small-model", Regime: "small-model", Seed: 15,
				About: "an 8B-class model on one H200 at 30 requests/s: steps three times faster, a much larger KV cache",
				Workload: Workload{Kind: KindChat, Requests: 900, Prompt: chatPrompt, Output: chatOutput,
					Rate: 30, Burstiness: 1},
				Fleet: smallModel(), Router: "least-queue",
			},
			{
				Name: "large-model", Regime: "large-model", Seed: 16,
				About: "a 70B-class model over two H200s at 4 requests/s: slower steps and prefill, a smaller KV cache per token",
				Workload: Workload{Kind: KindChat, Requests: 900, Prompt: chatPrompt, Output: chatOutput,
					Rate: 4, Burstiness: 1},
				Fleet: largeModel(), Router: "least-queue",
			},
			{
				Name: "pd-pool", Regime: "pd-pool", Seed: 17,
				About: "a disaggregated pool, 4 prefill and 4 decode pods over 2 zones: TTFT rows on prefill pods span a second hop and a KV transfer, TPOT rows on decode pods see no prefills",
				Workload: Workload{Kind: KindChat, Requests: 900,
					Prompt: Lengths{Median: 700, Sigma: 0.9, Min: 16, Max: 6000},
					Output: Lengths{Median: 120, Sigma: 0.8, Min: 2, Max: 1500},
					Rate:   10, Burstiness: 0.5},
				Fleet: pods(withName(sim.DefaultConfig(), "qwen3-32b-h200"), 8), Router: "greedy",
				PD: &PD{Layout: "zones", PrefillPods: 4, DecodePods: 4, SplitThreshold: 256,
					Links: ManifestLinks(sim.DefaultLinks()), KVBytesPerToken: sim.DefaultKVBytesPerToken,
					PrefillFailureRate: 0.01},
			},
		},
	}
}

func withName(c sim.Config, name string) sim.Config { c.Name = name; return c }

func noPrefixCache(c sim.Config) sim.Config { c.PrefixCaching = false; return c }

func pods(c sim.Config, n int) sim.Config { c.Servers = n; return c }

func maxSeqs(c sim.Config, n int) sim.Config { c.MaxNumSeqs = n; return c }

// smallModel is an 8B-class model (36 layers, 8 KV heads of 128: 144 KiB of
// KV per token) on one H200. Its costs are priors scaled from the fitted
// 32B defaults by weight and KV bytes read per step, not fits: the suite
// needs a different hardware regime, not a claim about a particular server.
func smallModel() sim.Config {
	c := withName(sim.DefaultConfig(), "8b-h200")
	c.KVBlocks = 48000 // (141 GB × 0.9 − 16 GB weights − 2 GB) / 144 KiB / 16
	c.Cost.StepMs = 7
	c.Cost.PrefillTokenMs = 0.035
	c.Cost.PrefillFreeTokens = 200 // step_ms / prefill_token_ms
	c.Cost.DecodeSeqMs = 0.02
	c.Cost.ContextTokenMs = 0.000031 // 144 KiB per token at 4.8 TB/s
	c.Cost.FrontendMs = 20
	return c
}

// largeModel is a 70B-class model (80 layers, 8 KV heads of 128: 320 KiB
// per token) with tensor parallelism over two H200s, two such replicas;
// priors as for smallModel.
func largeModel() sim.Config {
	c := withName(sim.DefaultConfig(), "70b-2xh200")
	c.KVBlocks = 21000 // (2 × 141 GB × 0.9 − 140 GB weights − 4 GB) / 320 KiB / 16
	c.Cost.StepMs = 28
	c.Cost.PrefillTokenMs = 0.2
	c.Cost.PrefillFreeTokens = 140
	c.Cost.DecodeSeqMs = 0.06
	c.Cost.ContextTokenMs = 0.000034 // 320 KiB per token at 2 × 4.8 TB/s
	c.Cost.FrontendMs = 40
	return c
}
