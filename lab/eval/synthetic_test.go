package eval

import (
	"math"
	"testing"

	"github.com/headroomhq/headroom/features"
)

func TestSyntheticIsDeterministicAndInRange(t *testing.T) {
	a := Synthetic(SyntheticOptions{Rows: 500, Seed: 3})
	b := Synthetic(SyntheticOptions{Rows: 500, Seed: 3})
	c := Synthetic(SyntheticOptions{Rows: 500, Seed: 4})
	if len(a) != 500 {
		t.Fatalf("%d rows, want 500", len(a))
	}
	same := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("row %d differs between two runs with the same seed", i)
		}
		if a[i] == c[i] {
			same++
		}
		r := a[i].Row
		if r.InputTokenLength < 16 || r.InputTokenLength > 8192 || r.KVCachePercentage < 0 || r.KVCachePercentage > 1 ||
			r.PrefixCacheScore < 0 || r.PrefixCacheScore >= 1 {
			t.Fatalf("row %d out of range: %+v", i, r)
		}
		if !(a[i].ActualTTFTMs > 0) || !(a[i].ActualTPOTMs > 0) {
			t.Fatalf("row %d lacks a label: %+v", i, a[i])
		}
	}
	if same > 0 {
		t.Errorf("%d rows identical across seeds", same)
	}
}

// The generator's prefill is linear in the uncached prompt plus a
// quadratic attention term, as the extrapolation measurement needs.
func TestSyntheticLatencyGrowsFasterThanLinearly(t *testing.T) {
	ttft := func(n int64) float64 { return SyntheticTTFT(&features.Row{InputTokenLength: n}) }
	marginal := func(n int64) float64 { return ttft(n+1000) - ttft(n) }
	if !(marginal(6000) > marginal(3000) && marginal(3000) > marginal(0)) {
		t.Errorf("marginal cost per 1000 tokens %v, %v, %v; want it growing", marginal(0), marginal(3000), marginal(6000))
	}
	// At 4,096 tokens the quadratic part is a few percent of the linear one:
	// a line extrapolated from short prompts stays close, trees do not.
	quad := ttft(4096) - synthTTFTFixed - synthPrefillPerToken*4096
	if share := quad / (synthPrefillPerToken * 4096); share < 0.05 || share > 0.12 {
		t.Errorf("attention share at 4096 tokens %.3f, want 5-12%%", share)
	}
	cached := SyntheticTTFT(&features.Row{InputTokenLength: 4096, PrefixCacheScore: 0.5})
	if !(cached < ttft(4096)) {
		t.Errorf("a half-cached prompt costs %v, the uncached %v", cached, ttft(4096))
	}
}

// The noise is multiplicative with the configured spread.
func TestSyntheticNoise(t *testing.T) {
	s := Synthetic(SyntheticOptions{Rows: 4000, Seed: 1, Noise: 0.1})
	var sum, sq float64
	for _, x := range s {
		r := math.Log(x.ActualTTFTMs / SyntheticTTFT(&x.Row))
		sum += r
		sq += r * r
	}
	mean := sum / float64(len(s))
	sd := math.Sqrt(sq/float64(len(s)) - mean*mean)
	if math.Abs(mean) > 0.01 || math.Abs(sd-0.1) > 0.01 {
		t.Errorf("log noise mean %.4f sd %.4f, want 0 and 0.1", mean, sd)
	}
}
