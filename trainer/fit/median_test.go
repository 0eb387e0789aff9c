package fit

import (
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"
)

// sortedMiddle is Median by sorting a copy, what Median must equal.
func sortedMiddle(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func TestMedianIsSortsMiddle(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	inf := math.Inf(1)
	cases := map[string][]float64{
		"none":           nil,
		"one":            {3},
		"two":            {4, 1},
		"odd":            {5, 1, 4, 2, 3},
		"even":           {5, 1, 4, 2, 3, 6},
		"all equal":      {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7},
		"infinities":     {-inf, inf, 1, 2, inf, -inf, 0},
		"a NaN":          {3, math.NaN(), 1, 2},
		"NaNs in a long": append(make([]float64, 40), math.NaN(), math.NaN(), 1),
	}
	for _, n := range []int{17, 18, 100, 1001, 5000} {
		normal, ties, sortedUp, sortedDown, organ := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
		for i := range n {
			normal[i] = rng.NormFloat64()
			ties[i] = float64(rng.IntN(4)) // a few values, many times each
			sortedUp[i] = float64(i)
			sortedDown[i] = float64(n - i)
			organ[i] = float64(min(i, n-1-i)) // up then down: median-of-three's bad case
		}
		cases["normal "+strconv.Itoa(n)] = normal
		cases["ties "+strconv.Itoa(n)] = ties
		cases["sorted "+strconv.Itoa(n)] = sortedUp
		cases["reversed "+strconv.Itoa(n)] = sortedDown
		cases["organ pipe "+strconv.Itoa(n)] = organ
	}
	for name, v := range cases {
		in := append([]float64(nil), v...)
		got, want := Median(v), sortedMiddle(v)
		if got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
			t.Errorf("%s: Median = %v, sorting gives %v", name, got, want)
		}
		for i := range in {
			if in[i] != v[i] && !(math.IsNaN(in[i]) && math.IsNaN(v[i])) {
				t.Errorf("%s: Median changed its argument at %d", name, i)
				break
			}
		}
	}
}

// selectNth leaves s partitioned around its k-th value, for every k.
func TestSelectNthPartitions(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 2, 16, 17, 64, 333} {
		for k := 0; k < n; k += max(1, n/7) {
			s := make([]float64, n)
			for i := range s {
				s[i] = float64(rng.IntN(n/2 + 1))
			}
			want := append([]float64(nil), s...)
			sort.Float64s(want)
			selectNth(s, k)
			if s[k] != want[k] {
				t.Fatalf("n %d, k %d: s[k] = %v, want %v", n, k, s[k], want[k])
			}
			for i := range s {
				if (i < k && s[i] > s[k]) || (i > k && s[i] < s[k]) {
					t.Fatalf("n %d, k %d: s[%d] = %v on the wrong side of %v", n, k, i, s[i], s[k])
				}
			}
		}
	}
}
