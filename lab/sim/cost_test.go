package sim

import (
	"math"
	"testing"
	"time"
)

func TestCostModelStepTime(t *testing.T) {
	c := CostModel{StepMs: 10, PrefillTokenMs: 0.5, DecodeSeqMs: 2, ContextTokenMs: 0.01, PrefillFreeTokens: 100}
	tests := []struct {
		b    Batch
		want float64
	}{
		{Batch{}, 10},
		{Batch{DecodeSeqs: 3, ContextTokens: 300}, 10 + 6 + 3},
		{Batch{PrefillTokens: 100, ContextTokens: 100}, 10 + 1},        // within the knee
		{Batch{PrefillTokens: 150, ContextTokens: 150}, 10 + 25 + 1.5}, // 50 past it
		{Batch{PrefillTokens: 150, DecodeSeqs: 2, ContextTokens: 0}, 10 + 25 + 4},
	}
	for _, tt := range tests {
		if got := c.StepTimeMs(tt.b); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("StepTimeMs(%+v) = %v, want %v", tt.b, got, tt.want)
		}
		if got, want := c.StepTime(tt.b), time.Duration(math.Round(tt.want*1e6)); got != want {
			t.Errorf("StepTime(%+v) = %v, want %v", tt.b, got, want)
		}
	}
	if d := (CostModel{StepMs: 1e-9, PrefillTokenMs: 0}).StepTime(Batch{}); d != 1 {
		t.Errorf("a step shorter than 1 ns lasts %v; time must move", d)
	}
}

func TestCostModelValidate(t *testing.T) {
	if err := DefaultCostModel().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	bad := []CostModel{
		{StepMs: -1, PrefillTokenMs: 1},
		{StepMs: math.NaN()},
		{StepMs: 1, FrontendMs: math.Inf(1)},
		{StepMs: 1, PrefillFreeTokens: -1},
		{ContextTokenMs: 1}, // nothing makes a step take time
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
