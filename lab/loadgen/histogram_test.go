package loadgen

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsCoverEveryValueInOrder(t *testing.T) {
	// Every value lies in the bucket whose bounds enclose it, and bucket
	// bounds increase, over the whole int64 range.
	prevHigh := int64(-1)
	for i := range numBuckets {
		high := bucketHigh(i)
		if high <= prevHigh {
			t.Fatalf("bucket %d ends at %d, not after bucket %d's %d", i, high, i-1, prevHigh)
		}
		low := prevHigh + 1
		for _, v := range []int64{low, high, low + (high-low)/2} {
			if got := bucketOf(v); got != i {
				t.Fatalf("value %d in bucket %d, want %d [%d, %d]", v, got, i, low, high)
			}
		}
		prevHigh = high
	}
	if prevHigh != math.MaxInt64 {
		t.Fatalf("last bucket ends at %d, want MaxInt64", prevHigh)
	}
}

func TestQuantilesAgainstSortedValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tests := []struct {
		name string
		gen  func() time.Duration
	}{
		{"exact small values", func() time.Duration { return time.Duration(rng.IntN(100)) }},
		{"log-normal around 300us", func() time.Duration {
			return time.Duration(300e3 * math.Exp(rng.NormFloat64()))
		}},
		{"bimodal with a 40ms tail", func() time.Duration {
			if rng.IntN(100) == 0 {
				return 40*time.Millisecond + time.Duration(rng.IntN(1e6))
			}
			return 200*time.Microsecond + time.Duration(rng.IntN(1e5))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h Histogram
			vals := make([]time.Duration, 20001)
			for i := range vals {
				vals[i] = tc.gen()
				h.Record(vals[i])
			}
			slices.Sort(vals)
			for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
				rank := max(int(math.Ceil(q*float64(len(vals)))), 1)
				want := vals[rank-1]
				got := h.Quantile(q)
				// Never below the true value, at most 1/64 above.
				if got < want || float64(got-want) > float64(want)/64+1 {
					t.Errorf("q%v = %v, true %v", q, got, want)
				}
			}
			if h.Min() != vals[0] || h.Max() != vals[len(vals)-1] {
				t.Errorf("min/max %v/%v, want %v/%v", h.Min(), h.Max(), vals[0], vals[len(vals)-1])
			}
			var sum float64
			for _, v := range vals {
				sum += float64(v)
			}
			if mean := time.Duration(sum / float64(len(vals))); h.Mean() != mean {
				t.Errorf("mean %v, want %v", h.Mean(), mean)
			}
		})
	}
}

func TestMergeEqualsRecordingEverything(t *testing.T) {
	var a, b, all Histogram
	for i := range 5000 {
		d := time.Duration(i*i) * time.Nanosecond
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	a.Merge(&b)
	a.Merge(&Histogram{}) // merging an empty histogram changes nothing
	if a != all {
		t.Fatalf("merged histogram differs: n %d/%d min %v/%v max %v/%v", a.n, all.n, a.min, all.min, a.max, all.max)
	}
}

func TestEmptyHistogram(t *testing.T) {
	var h Histogram
	if h.Quantile(0.99) != 0 || h.Mean() != 0 || h.Count() != 0 || h.Max() != 0 {
		t.Fatal("empty histogram reports values")
	}
	h.Record(-time.Second)
	if h.Quantile(0.5) != 0 || h.Min() != 0 {
		t.Fatalf("negative duration recorded as %v", h.Quantile(0.5))
	}
}
