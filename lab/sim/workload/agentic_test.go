package workload

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/headroomhq/headroom/lab/sim"
)

func TestAgenticStructure(t *testing.T) {
	o := DefaultAgentic(4)
	o.Think = 2 * time.Second
	reqs, err := Agentic(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 192 {
		t.Fatalf("%d requests, want 24 sessions × 8 turns = 192", len(reqs))
	}
	systemBlocks := o.SystemPromptTokens / sim.BlockSize
	byID := map[int]*sim.Request{}
	for i, r := range reqs {
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		if r.ID != i+1 || (i > 0 && r.Arrival < reqs[i-1].Arrival) {
			t.Fatalf("request %d: id %d, arrival %v: want ids in arrival order", i, r.ID, r.Arrival)
		}
		byID[r.ID] = r
		// Every request of every session starts with the shared system prompt.
		if !slices.Equal(r.BlockHashes[:systemBlocks], reqs[0].BlockHashes[:systemBlocks]) {
			t.Fatalf("request %d does not start with the system prompt", r.ID)
		}
	}
	for _, r := range reqs {
		first := r.ID <= o.Sessions
		if first != (r.After == 0) {
			t.Fatalf("request %d: after %d; first turns wait for nothing, the others for their previous turn", r.ID, r.After)
		}
		if first {
			continue
		}
		prev := byID[r.After]
		if r.After != r.ID-o.Sessions || r.Think != o.Think {
			t.Fatalf("request %d waits for %d (think %v), want %d", r.ID, r.After, r.Think, r.ID-o.Sessions)
		}
		// The next turn resends the previous prompt and answer, then more.
		if r.PromptTokens <= prev.PromptTokens+prev.OutputTokens {
			t.Fatalf("request %d: prompt %d does not extend the previous turn's %d+%d", r.ID, r.PromptTokens,
				prev.PromptTokens, prev.OutputTokens)
		}
		if !slices.Equal(r.BlockHashes[:len(prev.BlockHashes)], prev.BlockHashes) {
			t.Fatalf("request %d does not continue request %d's conversation", r.ID, prev.ID)
		}
	}
	// Sessions diverge right after the system prompt.
	if reqs[0].BlockHashes[systemBlocks+1] == reqs[1].BlockHashes[systemBlocks+1] {
		t.Error("two sessions share their first message")
	}
	again, _ := Agentic(o)
	if !reflect.DeepEqual(reqs, again) {
		t.Error("same options, different requests")
	}
}

func TestAgenticRejectsBadOptions(t *testing.T) {
	o := DefaultAgentic(1)
	o.Turns = 0
	if _, err := Agentic(o); err == nil {
		t.Error("zero turns accepted")
	}
}
