package workload

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/lab/sim"
)

func TestReadLogExample(t *testing.T) {
	reqs, err := ReadLogFile("../testdata/example.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 5 {
		t.Fatalf("%d requests, want 5", len(reqs))
	}
	r1, r2, r3, r4, r5 := reqs[0], reqs[1], reqs[2], reqs[3], reqs[4]
	if r1.PromptTokens != 100 || r1.OutputTokens != 40 || r1.Arrival != 0 || len(r1.BlockHashes) != 8 {
		t.Errorf("request 1: %+v", r1)
	}
	if r3.After != 1 || r3.Think != 1500*time.Millisecond || r3.Arrival != 400*time.Millisecond {
		t.Errorf("request 3: after %d think %v arrival %v", r3.After, r3.Think, r3.Arrival)
	}
	if !slices.Equal(r1.BlockHashes[:4], r2.BlockHashes[:4]) || r1.BlockHashes[4] == r2.BlockHashes[4] {
		t.Error("requests 1 and 2 should share exactly their first four blocks")
	}
	if !slices.Equal(r1.BlockHashes, r3.BlockHashes[:8]) {
		t.Error("request 3 does not continue request 1's conversation")
	}
	if r4.PromptTokens != 20 || r5.PromptTokens != 25 || r4.BlockHashes[0] != r5.BlockHashes[0] {
		t.Errorf("token-id requests: %d and %d tokens, first blocks equal %v", r4.PromptTokens, r5.PromptTokens,
			r4.BlockHashes[0] == r5.BlockHashes[0])
	}
}

func TestReadLogExampleReplays(t *testing.T) {
	reqs, err := ReadLogFile("../testdata/example.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.DefaultConfig()
	cfg.Servers = 1
	f, err := sim.Simulate(t.Context(), cfg, sim.FleetOptions{}, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	hits := map[int]int{}
	for _, o := range f.Outcomes() {
		hits[o.Request.ID] = o.PrefixHitTokens
	}
	// 2 finds the shared system prompt (4 blocks); 3 finds all of 1's
	// computed conversation (8 blocks); 5 finds 4's first block.
	want := map[int]int{1: 0, 2: 64, 3: 128, 4: 0, 5: 16}
	for id, w := range want {
		if hits[id] != w {
			t.Errorf("request %d hit %d tokens, want %d", id, hits[id], w)
		}
	}
}

func TestReadLogErrors(t *testing.T) {
	tests := []struct{ name, log, want string }{
		{"no arrival", `{"prompt_len": 10, "output_len": 1}`, "arrival_s"},
		{"negative arrival", `{"arrival_s": -1, "prompt_len": 10, "output_len": 1}`, ">= 0"},
		{"no prompt", `{"arrival_s": 0, "output_len": 1}`, "prompt"},
		{"no output", `{"arrival_s": 0, "prompt_len": 10}`, "output"},
		{"both forms", `{"arrival_s": 0, "prompt_tokens": [1], "blocks": [1], "prompt_len": 1, "output_len": 1}`, "not both"},
		{"length mismatch", `{"arrival_s": 0, "prompt_tokens": [1, 2], "prompt_len": 3, "output_len": 1}`, "prompt_len"},
		{"output ids mismatch", `{"arrival_s": 0, "prompt_tokens": [1], "output_tokens": [1, 2], "output_len": 3}`, "output_len"},
		{"output ids alone", `{"arrival_s": 0, "prompt_len": 4, "output_tokens": [1]}`, "needs prompt_tokens"},
		{"too many blocks", `{"arrival_s": 0, "blocks": [1, 2], "prompt_len": 16, "output_len": 1}`, "block hashes"},
		{"unknown field", `{"arrival_s": 0, "prompt_len": 10, "output_len": 1, "model": "x"}`, "unknown field"},
		{"duplicate id", "{\"id\": 4, \"arrival_s\": 0, \"prompt_len\": 10, \"output_len\": 1}\n{\"id\": 4, \"arrival_s\": 1, \"prompt_len\": 10, \"output_len\": 1}", "line 2: id 4"},
		{"dangling after", `{"arrival_s": 0, "after": 9, "prompt_len": 10, "output_len": 1}`, "after 9"},
		{"not json", `{"arrival_s": 0,`, "line 1"},
	}
	for _, tt := range tests {
		_, err := ReadLog(strings.NewReader(tt.log))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tt.name, err, tt.want)
		}
	}
}

func TestReadLogDefaultsIDsAndOutputLength(t *testing.T) {
	log := "\n# comment\n" +
		`{"arrival_s": 0, "prompt_len": 10, "output_len": 2}` + "\n" +
		`{"arrival_s": 1, "prompt_tokens": [1, 2, 3], "output_tokens": [4, 5]}` + "\n"
	reqs, err := ReadLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if reqs[0].ID != 1 || reqs[1].ID != 2 || reqs[1].OutputTokens != 2 {
		t.Errorf("ids %d, %d; output %d", reqs[0].ID, reqs[1].ID, reqs[1].OutputTokens)
	}
}

func TestRescale(t *testing.T) {
	reqs := []*sim.Request{
		{ID: 1, Arrival: 10 * time.Second, PromptTokens: 1, OutputTokens: 1},
		{ID: 2, Arrival: 12 * time.Second, PromptTokens: 1, OutputTokens: 1},
		{ID: 3, Arrival: 14 * time.Second, PromptTokens: 1, OutputTokens: 1},
		{ID: 4, Arrival: 0, After: 1, Think: time.Second, PromptTokens: 1, OutputTokens: 1},
	}
	// Two gaps over 4 s is 0.5 requests/s; at 2/s the gaps shrink 4x.
	out, err := Rescale(reqs, 2)
	if err != nil {
		t.Fatal(err)
	}
	got := []time.Duration{out[0].Arrival, out[1].Arrival, out[2].Arrival, out[3].Arrival}
	want := []time.Duration{10 * time.Second, 10500 * time.Millisecond, 11 * time.Second, 7500 * time.Millisecond}
	if !slices.Equal(got, want) || out[3].Think != time.Second {
		t.Errorf("arrivals %v think %v, want %v and 1s", got, out[3].Think, want)
	}
	if reqs[1].Arrival != 12*time.Second {
		t.Error("Rescale modified its input")
	}
	if same, _ := Rescale(reqs, 0); &same[0] != &reqs[0] {
		t.Error("rate 0 should return the log as is")
	}
	if _, err := Rescale(reqs[:1], 2); err == nil {
		t.Error("one request cannot be rescaled")
	}
}
