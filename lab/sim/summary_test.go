package sim

import (
	"math"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	v := []float64{10, 20, 30, 40}
	tests := []struct{ q, want float64 }{
		{0, 10}, {1, 40}, {0.5, 25}, {0.9, 37}, {1.0 / 3, 20},
	}
	for _, tt := range tests {
		if got := Quantile(v, tt.q); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
		t.Error("quantile of nothing is not NaN")
	}
}

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	out := func(prompt, output, hit, preempt int, dispatch, first, finish time.Duration) *Outcome {
		return &Outcome{Request: &Request{PromptTokens: prompt, OutputTokens: output}, PrefixHitTokens: hit,
			Preemptions: preempt, Dispatch: dispatch, FirstToken: first, Finish: finish, Done: true}
	}
	outs := []*Outcome{
		out(100, 11, 0, 0, 0, 100*ms, 1100*ms),         // TPOT 100 ms
		out(300, 1, 150, 2, 1000*ms, 1050*ms, 1050*ms), // one token: no TPOT
		out(100, 3, 50, 0, 1500*ms, 1600*ms, 2000*ms),  // TPOT 200 ms
		{Request: &Request{PromptTokens: 10, OutputTokens: 1}, Rejected: true},
	}
	s := Summarize(outs)
	if s.Requests != 4 || s.Completed != 3 || s.Rejected != 1 {
		t.Errorf("counts %d/%d/%d, want 4/3/1", s.Requests, s.Completed, s.Rejected)
	}
	if s.Duration != 2*time.Second || s.ThroughputRPS != 1.5 || s.OutputTokensPerS != 7.5 {
		t.Errorf("duration %v, %v req/s, %v tok/s; want 2s, 1.5, 7.5", s.Duration, s.ThroughputRPS, s.OutputTokensPerS)
	}
	if s.PrefixHitRate != 200.0/500 || s.Preemptions != 2 {
		t.Errorf("hit rate %v preemptions %d, want 0.4 and 2", s.PrefixHitRate, s.Preemptions)
	}
	if s.TTFT.N != 3 || s.TTFT.P50 != 100 || s.TTFT.Max != 100 || s.TTFT.Mean != (100+50+100)/3.0 {
		t.Errorf("TTFT %+v", s.TTFT)
	}
	if s.TPOT.N != 2 || s.TPOT.P50 != 150 || s.E2E.Max != 1100 {
		t.Errorf("TPOT %+v E2E %+v", s.TPOT, s.E2E)
	}
	if empty := Summarize(nil); empty.ThroughputRPS != 0 || empty.TTFT.N != 0 {
		t.Errorf("empty summary %+v", empty)
	}
}
