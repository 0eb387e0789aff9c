package workload

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/lab/sim"
)

func TestInferencePerfSharedPrefix(t *testing.T) {
	o := InferencePerf{
		Data:   SharedPrefix{NumGroups: 3, NumPromptsPerGroup: 4, SystemPromptLen: 100, QuestionLen: 200, OutputLen: 50},
		Stages: []Stage{{Rate: 5, Duration: 60 * time.Second}, {Rate: 2.5, Duration: 10 * time.Second}},
		Seed:   7,
	}
	stages, err := o.StageRequests()
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 || len(stages[0]) != 300 || len(stages[1]) != 25 {
		t.Fatalf("stage sizes %d, want 300 and 25 (rate × duration)", []int{len(stages[0]), len(stages[1])})
	}
	for k, st := range stages {
		last := st[len(st)-1].Arrival
		if d := o.Stages[k].Duration; last < d-time.Microsecond || last > d+time.Microsecond {
			t.Errorf("stage %d: last arrival %v, want the stage's end %v (gaps rescaled to the duration)", k, last, d)
		}
		if !slices.IsSortedFunc(st, func(a, b *sim.Request) int { return int(a.Arrival - b.Arrival) }) {
			t.Errorf("stage %d: arrivals out of order", k)
		}
	}
	// IDs run on across stages; every request asks for exactly output_len.
	all := append(slices.Clone(stages[0]), stages[1]...)
	for i, r := range all {
		if r.ID != i+1 || r.OutputTokens != 50 || r.PromptTokens != 301 {
			t.Fatalf("request %d: id %d, %d prompt and %d output tokens; want id %d, 301 (BOS + 100 + 200) and 50", i, r.ID, r.PromptTokens, r.OutputTokens, i+1)
		}
	}
	// The 12 prompts come back in the same order every 12 requests, in
	// every stage.
	key := func(r *sim.Request) uint64 { return r.BlockHashes[len(r.BlockHashes)-1] }
	distinct := map[uint64]bool{}
	for i, r := range stages[0] {
		distinct[key(r)] = true
		if i >= 12 && key(r) != key(stages[0][i-12]) {
			t.Fatalf("request %d is not the prompt of request %d", i, i-12)
		}
	}
	if len(distinct) != 12 || key(stages[1][0]) != key(stages[0][0]) {
		t.Errorf("%d distinct prompts, want 12, recurring in the second stage", len(distinct))
	}
	// Prompts of a group share the blocks of BOS and system prompt (6 full
	// blocks of 101 tokens), and nothing more; other groups share nothing.
	byGroup := map[uint64][]*sim.Request{}
	for _, r := range stages[0][:12] {
		byGroup[r.BlockHashes[0]] = append(byGroup[r.BlockHashes[0]], r)
	}
	if len(byGroup) != 3 {
		t.Fatalf("%d groups by first block, want 3", len(byGroup))
	}
	for _, g := range byGroup {
		a, b := g[0].BlockHashes, g[1].BlockHashes
		if !slices.Equal(a[:6], b[:6]) || a[6] == b[6] {
			t.Errorf("two prompts of a group share %v / %v of their first 7 blocks, want exactly 6", a[:7], b[:7])
		}
	}
	// The same seed, the same run.
	again, _ := o.StageRequests()
	if again[0][17].Arrival != stages[0][17].Arrival || key(again[0][17]) != key(stages[0][17]) {
		t.Error("one seed gave two runs")
	}
}

func TestInferencePerfErrors(t *testing.T) {
	ok := InferencePerf{Data: SharedPrefix{NumGroups: 1, NumPromptsPerGroup: 1, SystemPromptLen: 1, QuestionLen: 1, OutputLen: 1},
		Stages: []Stage{{Rate: 1, Duration: time.Second}}}
	for _, tc := range []struct {
		edit func(*InferencePerf)
		want string
	}{
		{func(o *InferencePerf) { o.Data.NumGroups = 0 }, "groups"},
		{func(o *InferencePerf) { o.Data.SystemPromptLen, o.Data.QuestionLen = 0, 0 }, "prompt"},
		{func(o *InferencePerf) { o.Data.OutputLen = 0 }, "output_len"},
		{func(o *InferencePerf) { o.Stages = nil }, "no stages"},
		{func(o *InferencePerf) { o.Stages[0].Rate = 0 }, "stage 0"},
	} {
		o := ok
		o.Stages = slices.Clone(ok.Stages)
		tc.edit(&o)
		if _, err := o.StageRequests(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one mentioning %q", err, tc.want)
		}
	}
}

// A benchmark harness's per-request log replays as its arrivals (from the
// first) and token counts; the engine's timestamps are not the workload.
func TestReadLogBenchmarkHarness(t *testing.T) {
	log := `{"request_id": "bench-0", "input_toks": 300, "output_toks": 20, "arrival_time": 1000.25, "queued_ts": 5.0, "scheduled_ts": 5.0, "first_token_ts": 5.1, "last_token_ts": 6.0}
{"request_id": "bench-1", "input_toks": 40, "output_toks": 7, "arrival_time": 1001.75, "queued_ts": 6.5, "scheduled_ts": 6.5, "first_token_ts": 6.6, "last_token_ts": 7.0}
`
	reqs, err := ReadLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[0].Arrival != 0 || reqs[1].Arrival != 1500*time.Millisecond ||
		reqs[0].PromptTokens != 300 || reqs[1].OutputTokens != 7 || len(reqs[0].BlockHashes) != 0 {
		t.Errorf("read %+v %+v", reqs[0], reqs[1])
	}
	mixed := log + `{"arrival_s": 3, "prompt_len": 5, "output_len": 2}` + "\n"
	if _, err := ReadLog(strings.NewReader(mixed)); err == nil {
		t.Error("a log mixing absolute and relative arrivals was accepted")
	}
}
