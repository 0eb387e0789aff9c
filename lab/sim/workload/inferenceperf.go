package workload

import (
	"fmt"
	"math"
	"time"

	"github.com/headroomhq/headroom/lab/sim"
)

// SharedPrefix is inference-perf's shared_prefix data: NumGroups groups of
// NumPromptsPerGroup prompts, each prompt its group's system prompt
// (SystemPromptLen random tokens) and a question of its own (QuestionLen
// random tokens), answered with exactly OutputLen tokens (ignore_eos). The
// prompts are shuffled once and requests take them in turn, so each prompt
// comes back every NumGroups·NumPromptsPerGroup requests: with prefix
// caching, a prompt seen before is cached whole, not only its system
// prompt.
//
// Prompt lengths are SystemPromptLen + QuestionLen and a BOS token. The
// server may count a few percent more: inference-perf sends the random
// tokens' text, which re-tokenises differently.
type SharedPrefix struct {
	NumGroups          int `yaml:"num_groups"`
	NumPromptsPerGroup int `yaml:"num_prompts_per_group"`
	SystemPromptLen    int `yaml:"system_prompt_len"`
	QuestionLen        int `yaml:"question_len"`
	OutputLen          int `yaml:"output_len"`
}

// Stage is one of inference-perf's load stages: Rate requests per second
// for Duration, Rate·Duration requests in all.
type Stage struct {
	Rate     float64
	Duration time.Duration
}

// Requests is the number of requests the stage sends (inference-perf
// truncates rate·duration).
func (s Stage) Requests() int { return int(s.Rate * s.Duration.Seconds()) }

// InferencePerf is an inference-perf run of shared_prefix data under
// constant load: each stage's requests, with arrivals from the stage's
// start. inference-perf's constant load draws exponential gaps at the
// stage's rate and rescales them to end exactly at the stage's duration (a
// Poisson-like process with exactly Requests() arrivals), and it starts a
// stage only when every request of the one before has ended, after
// Interval.
type InferencePerf struct {
	Data     SharedPrefix
	Stages   []Stage
	Interval time.Duration
	Seed     uint64
}

// StageRequests generates the requests of every stage, each stage's
// arrivals counted from its own start. IDs are unique across the run, in
// order.
func (o InferencePerf) StageRequests() ([][]*sim.Request, error) {
	d := o.Data
	switch {
	case d.NumGroups < 1 || d.NumPromptsPerGroup < 1:
		return nil, fmt.Errorf("shared_prefix: %d groups of %d prompts, need at least 1 of each", d.NumGroups, d.NumPromptsPerGroup)
	case d.SystemPromptLen < 0 || d.QuestionLen < 0 || d.SystemPromptLen+d.QuestionLen < 1:
		return nil, fmt.Errorf("shared_prefix: system prompt %d and question %d tokens, need a prompt", d.SystemPromptLen, d.QuestionLen)
	case d.OutputLen < 1:
		return nil, fmt.Errorf("shared_prefix: output_len %d, need at least 1", d.OutputLen)
	case len(o.Stages) == 0:
		return nil, fmt.Errorf("inference-perf load: no stages")
	}
	prompts := d.prompts()
	order := newRand(o.Seed, 4).Perm(len(prompts))
	gaps := newRand(o.Seed, 1)
	var out [][]*sim.Request
	id := 1
	for k, st := range o.Stages {
		if !(st.Rate > 0) || math.IsInf(st.Rate, 0) || st.Duration <= 0 {
			return nil, fmt.Errorf("inference-perf stage %d: rate %v for %v, need both positive", k, st.Rate, st.Duration)
		}
		n := st.Requests()
		times := make([]float64, n)
		total := 0.0
		for i := range times {
			total += gaps.ExpFloat64() / st.Rate
			times[i] = total
		}
		reqs := make([]*sim.Request, n)
		for i := range reqs {
			p := prompts[order[i%len(prompts)]]
			at := time.Duration(math.Round(times[i] / total * st.Duration.Seconds() * 1e9))
			reqs[i] = &sim.Request{ID: id, Arrival: at, PromptTokens: p.tokens, OutputTokens: d.OutputLen,
				BlockHashes: p.hashes}
			id++
		}
		out = append(out, reqs)
	}
	return out, nil
}

type sharedPrompt struct {
	tokens int
	hashes []uint64
}

// prompts are the data's prompts, group by group: a BOS token, the group's
// system prompt and the prompt's question, whose blocks are identified by
// content so that the blocks a group's prompts share are exactly those of
// the BOS token and the system prompt.
func (d SharedPrefix) prompts() []sharedPrompt {
	tokens := 1 + d.SystemPromptLen + d.QuestionLen
	shared := (1 + d.SystemPromptLen) / sim.BlockSize
	var out []sharedPrompt
	for g := range d.NumGroups {
		for p := range d.NumPromptsPerGroup {
			ids := make([]uint64, tokens/sim.BlockSize)
			for j := range ids {
				if j < shared {
					ids[j] = uint64(g)<<40 | uint64(j)
				} else {
					ids[j] = 1<<63 | uint64(g)<<40 | uint64(p)<<20 | uint64(j)
				}
			}
			out = append(out, sharedPrompt{tokens: tokens, hashes: sim.ChainBlocks(ids)})
		}
	}
	return out
}
