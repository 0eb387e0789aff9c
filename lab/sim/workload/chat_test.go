package workload

import (
	"reflect"
	"testing"

	"github.com/headroomhq/headroom/lab/sim"
)

func TestChat(t *testing.T) {
	o := DefaultChat(2000, 8)
	reqs, err := Chat(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2000 {
		t.Fatalf("%d requests", len(reqs))
	}
	seen := map[uint64]int{}
	for i, r := range reqs {
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		if r.ID != i+1 || (i > 0 && r.Arrival < reqs[i-1].Arrival) {
			t.Fatalf("request %d: id %d arrival %v out of order", i, r.ID, r.Arrival)
		}
		if r.PromptTokens < o.Prompt.Min || r.PromptTokens > o.Prompt.Max || r.OutputTokens < o.Output.Min || r.OutputTokens > o.Output.Max {
			t.Fatalf("request %d: %d/%d tokens outside the ranges", r.ID, r.PromptTokens, r.OutputTokens)
		}
		if len(r.BlockHashes) != r.PromptTokens/sim.BlockSize {
			t.Fatalf("request %d: %d hashes for %d prompt tokens", r.ID, len(r.BlockHashes), r.PromptTokens)
		}
		for _, h := range r.BlockHashes {
			if prev, dup := seen[h]; dup {
				t.Fatalf("requests %d and %d share a block", prev, r.ID)
			}
			seen[h] = r.ID
		}
	}
	// 2000 arrivals at 8/s take about 250 s.
	if end := reqs[len(reqs)-1].Arrival.Seconds(); end < 235 || end > 265 {
		t.Errorf("last arrival at %.0f s, want about 250", end)
	}
	again, _ := Chat(o)
	if !reflect.DeepEqual(reqs, again) {
		t.Error("same options, different requests")
	}
	o.Seed = 2
	if other, _ := Chat(o); reflect.DeepEqual(reqs, other) {
		t.Error("another seed, same requests")
	}
}

func TestChatRejectsBadOptions(t *testing.T) {
	for _, o := range []ChatOptions{
		{Requests: -1, Prompt: ChatPromptLengths, Output: ChatOutputLengths},
		{Requests: 1, Prompt: LogNormal{Min: 0, Max: 5}, Output: ChatOutputLengths},
		{Requests: 1, Prompt: ChatPromptLengths, Output: ChatOutputLengths, Arrivals: Arrivals{Rate: -1}},
	} {
		if _, err := Chat(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
