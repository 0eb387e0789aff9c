package workload

import (
	"fmt"

	"github.com/headroomhq/headroom/lab/sim"
)

// ChatOptions describe independent single-turn requests, as in a ShareGPT
// benchmark: no two prompts share content.
type ChatOptions struct {
	Requests int
	Prompt   LogNormal
	Output   LogNormal
	Arrivals Arrivals
	Seed     uint64
}

// DefaultChat resembles the shared H200 trace's traffic at rate requests
// per second.
func DefaultChat(requests int, rate float64) ChatOptions {
	return ChatOptions{Requests: requests, Prompt: ChatPromptLengths, Output: ChatOutputLengths,
		Arrivals: Poisson(rate), Seed: 1}
}

// Chat generates the requests, with IDs 1..Requests in arrival order.
func Chat(o ChatOptions) ([]*sim.Request, error) {
	if o.Requests < 0 {
		return nil, fmt.Errorf("chat workload: %d requests", o.Requests)
	}
	if err := o.Prompt.validate("chat prompt"); err != nil {
		return nil, err
	}
	if err := o.Output.validate("chat output"); err != nil {
		return nil, err
	}
	if err := o.Arrivals.validate(); err != nil {
		return nil, err
	}
	times := o.Arrivals.Times(o.Requests, newRand(o.Seed, 1))
	lengths, content := newRand(o.Seed, 2), newRand(o.Seed, 3)
	reqs := make([]*sim.Request, o.Requests)
	for i := range reqs {
		prompt, output := o.Prompt.Sample(lengths), o.Output.Sample(lengths)
		// Random block contents: a ShareGPT prompt shares nothing with another.
		ids := make([]uint64, prompt/sim.BlockSize)
		for j := range ids {
			ids[j] = content.Uint64()
		}
		reqs[i] = &sim.Request{ID: i + 1, Arrival: times[i], PromptTokens: prompt, OutputTokens: output,
			BlockHashes: sim.ChainBlocks(ids)}
	}
	return reqs, nil
}
