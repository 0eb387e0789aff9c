package workload

import (
	"fmt"
	"math"
	"time"

	"github.com/headroomhq/headroom/lab/sim"
)

// AgenticOptions describe agent sessions: every session starts from the
// same system prompt, and each turn sends the whole history so far (system
// prompt, earlier messages and answers) plus one new message. A turn is
// sent only after the previous answer has arrived (plus Think), so the
// cache can serve the whole history.
type AgenticOptions struct {
	Sessions           int
	Turns              int       // requests per session
	SystemPromptTokens int       // shared by every session
	Message            LogNormal // the new user or tool message of each turn
	Output             LogNormal // each answer
	Think              time.Duration
	// Arrivals paces the turns, interleaved across sessions (every
	// session's first turn, then every second turn, ...).
	Arrivals Arrivals
	Seed     uint64
}

// DefaultAgentic is 24 sessions of 8 turns (192 requests) on a 1 200-token
// system prompt, with tool-sized messages (median 200 tokens) and answers
// (median 120 tokens), at rate turns per second.
func DefaultAgentic(rate float64) AgenticOptions {
	return AgenticOptions{
		Sessions:           24,
		Turns:              8,
		SystemPromptTokens: 1200,
		Message:            LogNormal{Mu: math.Log(200), Sigma: 0.8, Min: 8, Max: 4000},
		Output:             LogNormal{Mu: math.Log(120), Sigma: 0.7, Min: 4, Max: 2000},
		Arrivals:           Poisson(rate),
		Seed:               1,
	}
}

// vocabulary is Qwen3's, so token ids look like real ones; only equality
// matters.
const vocabulary = 151936

// Agentic generates the requests. IDs are 1..Sessions×Turns, in the order of
// their scheduled times; turn k > 1 of a session waits for turn k−1.
func Agentic(o AgenticOptions) ([]*sim.Request, error) {
	if o.Sessions < 1 || o.Turns < 1 || o.SystemPromptTokens < 0 || o.Think < 0 {
		return nil, fmt.Errorf("agentic workload: need sessions >= 1, turns >= 1, system prompt and think >= 0, have %+v", o)
	}
	if err := o.Message.validate("agentic message"); err != nil {
		return nil, err
	}
	if err := o.Output.validate("agentic output"); err != nil {
		return nil, err
	}
	if err := o.Arrivals.validate(); err != nil {
		return nil, err
	}
	times := o.Arrivals.Times(o.Sessions*o.Turns, newRand(o.Seed, 1))
	lengths, content := newRand(o.Seed, 2), newRand(o.Seed, 3)
	tokens := func(dst []int32, n int) []int32 {
		for range n {
			dst = append(dst, int32(content.IntN(vocabulary)))
		}
		return dst
	}
	system := tokens(nil, o.SystemPromptTokens)

	// Each session is one growing token stream; turn k's prompt is a prefix
	// of it and its answer continues it. The hash chain of a prefix is a
	// prefix of the chain, so one chain per session serves every turn.
	type turn struct{ prompt, output int }
	reqs := make([]*sim.Request, o.Sessions*o.Turns)
	for s := range o.Sessions {
		stream := append([]int32(nil), system...)
		turns := make([]turn, o.Turns)
		for k := range turns {
			stream = tokens(stream, o.Message.Sample(lengths))
			turns[k].prompt = len(stream)
			turns[k].output = o.Output.Sample(lengths)
			stream = tokens(stream, turns[k].output)
		}
		chain := sim.HashTokens(stream)
		for k, tn := range turns {
			i := k*o.Sessions + s // interleaved: turn-major
			r := &sim.Request{
				ID:           i + 1,
				Arrival:      times[i],
				PromptTokens: tn.prompt,
				OutputTokens: tn.output,
				BlockHashes:  chain[:(tn.prompt+tn.output)/sim.BlockSize],
			}
			if k > 0 {
				r.After = (k-1)*o.Sessions + s + 1
				r.Think = o.Think
			}
			reqs[i] = r
		}
	}
	return reqs, nil
}
