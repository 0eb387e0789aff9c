package loadgen

import (
	"testing"
	"time"
)

// cpuTime counts this process's work: it grows while the process computes
// and never goes back. The loop waits for the growth itself (bounded), so a
// busy machine only makes it take longer.
func TestCPUTimeGrowsWithWork(t *testing.T) {
	start := cpuTime()
	if start <= 0 {
		t.Fatalf("cpuTime() = %v at start, want > 0 (the test binary has already run)", start)
	}
	deadline := time.Now().Add(30 * time.Second)
	x := uint64(1)
	for now := start; now == start; now = cpuTime() {
		if now < start {
			t.Fatalf("cpuTime went back from %v to %v", start, now)
		}
		if time.Now().After(deadline) {
			t.Fatalf("cpuTime stayed at %v through 30 s of computing", start)
		}
		for range 1 << 16 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	_ = x
}
