package fit

import (
	"math"
	"math/bits"
	"slices"
	"sort"
)

// Median is the median of v, NaN for none: the middle value of v sorted,
// or the mean of the two middle ones. v is not changed.
//
// A fit takes dozens of medians of every training row's residual (the
// line's scale at each reweighting, the shifts, the spreads), so the
// middle is found by selection, in time linear in len(v), not by sorting
// a copy; the value equals the one sorting gives (which of +0 and -0 a
// tie between them yields is the only freedom, as in a sort;
// TestMedianIsSortsMiddle). With a NaN in v it sorts, as sort.Float64s
// orders NaNs, so that even then the answer is the sorted copy's.
func Median(v []float64) float64 {
	n := len(v)
	if n == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	k := n / 2
	if slices.ContainsFunc(s, math.IsNaN) {
		sort.Float64s(s)
	} else {
		selectNth(s, k)
		if n%2 == 0 {
			// Every value before k is at most s[k]; the largest of
			// them is the sorted copy's s[k-1].
			s[k-1] = slices.Max(s[:k])
		}
	}
	if n%2 == 1 {
		return s[k]
	}
	return (s[k-1] + s[k]) / 2
}

// selectNth reorders s, which holds no NaN, so that s[k] is the value
// sorting would put there, every value before it at most s[k] and every
// one after it at least s[k]. It partitions three ways around the median
// of three (runs of equal values, common in residuals, end in one pass),
// and sorts what is left after 2·log₂(len(s)) + 8 rounds without
// reaching k, so that no input costs more than a sort.
func selectNth(s []float64, k int) {
	lo, hi := 0, len(s) // the value for k is within s[lo:hi]
	for budget := 2*bits.Len(uint(len(s))) + 8; hi-lo > 16; budget-- {
		if budget == 0 {
			slices.Sort(s[lo:hi])
			return
		}
		a, b, c := s[lo], s[lo+(hi-lo)/2], s[hi-1]
		pivot := max(min(a, b), min(max(a, b), c))
		// s[lo:lt] < pivot, s[lt:i] == pivot, s[gt:hi] > pivot.
		lt, i, gt := lo, lo, hi
		for i < gt {
			switch x := s[i]; {
			case x < pivot:
				s[lt], s[i] = s[i], s[lt]
				lt++
				i++
			case x > pivot:
				gt--
				s[gt], s[i] = s[i], s[gt]
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt
		case k >= gt:
			lo = gt
		default:
			return // s[k] == pivot, in its place
		}
	}
	slices.Sort(s[lo:hi])
}
