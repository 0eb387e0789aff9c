package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// Histogram records durations with a bounded relative error and fixed
// memory, so a run of any length costs the same to summarise and a
// percentile is not the mean of a sample. Values below subBuckets ns are
// exact; above, each power of two is split into subBuckets/2 buckets, so a
// reported quantile is at most 1/64 (1.6%) above the true value and never
// below it. The zero Histogram is empty and ready to use; it is not safe for
// concurrent use (give each goroutine its own and Merge them).
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    float64 // ns, for the mean
	min    int64
	max    int64
}

const (
	subBits    = 7
	subBuckets = 1 << subBits // exact values below this, in ns
	halfSub    = subBuckets / 2
	// A non-negative int64 has at most 63 significant bits, so the top
	// exponent is 63 - subBits and the last bucket (63-subBits+2)·halfSub - 1.
	numBuckets = (63 - subBits + 2) * halfSub
)

// bucketOf returns the bucket index of v ≥ 0.
func bucketOf(v int64) int {
	if v < subBuckets {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - subBits // ≥ 1
	m := int(v >> e)                     // in [halfSub, subBuckets)
	return (e+1)*halfSub + m - halfSub
}

// bucketHigh is the largest value that falls into bucket i.
func bucketHigh(i int) int64 {
	if i < subBuckets {
		return int64(i)
	}
	e := i/halfSub - 1
	m := int64(i%halfSub + halfSub)
	return (m+1)<<e - 1
}

// Record adds one duration; negative durations count as 0.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += float64(v)
}

// Merge adds every value recorded in o.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Min and Max are the extreme recorded values, exactly; 0 when empty.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the exact mean of the recorded values; 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the smallest bucket bound at or above the q quantile
// (the value with rank ⌈q·n⌉), clipped to the exact maximum; 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(bucketHigh(i), h.max))
		}
	}
	return time.Duration(h.max)
}
