package plugins

import (
	"math"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
)

func named(names ...string) []fwksched.Endpoint {
	out := make([]fwksched.Endpoint, len(names))
	for i, n := range names {
		out[i] = fwksched.NewEndpoint(&fwkdl.EndpointMetadata{ID: types.NamespacedName{Name: n}}, fwkdl.NewMetrics(), nil)
	}
	return out
}

func TestHalvingScores(t *testing.T) {
	eps := named("a", "b", "c", "d", "e")
	got := halvingScores(eps, []int{7, 2, 7, math.MaxInt, 30})
	want := []float64{0.5, 1, 0.5, 0, 0.25} // distinct ranks 2, 7, 30; none scores 0
	for i, e := range eps {
		if got[e] != want[i] {
			t.Errorf("%s scored %v, want %v", e.GetMetadata().ID.Name, got[e], want[i])
		}
	}
}

// ranking is two prefill pods (p0, p1) and two decode pods (d0, d1).
func ranking(rank [][]int, alone []int, splits []bool, decideSplit bool) *Ranking {
	return &Ranking{
		prefill: map[string]int{"/p0": 0, "/p1": 1}, decode: map[string]int{"/d0": 0, "/d1": 1},
		rank: rank, alone: alone, ttft: [][]float64{{1, 2}, {3, 4}}, aloneTTFT: []float64{5, 6},
		splits: splits, decideSplit: decideSplit,
	}
}

func TestRankingBest(t *testing.T) {
	for _, tt := range []struct {
		name        string
		r           *Ranking
		rank        [2]int
		split       [2]bool
		fallback    Reason
		prefillXtra []bool
		decodeXtra  []bool
	}{
		{"the decider splits on both: pairs only", ranking([][]int{{3, 1}, {0, -1}}, []int{4, 5}, []bool{true, true}, false),
			[2]int{1, 0}, [2]bool{true, true}, "", []bool{false, false}, []bool{true, true}},
		{"not on d1: d1 alone", ranking([][]int{{3, 1}, {0, 2}}, []int{4, 5}, []bool{true, false}, false),
			[2]int{1, 5}, [2]bool{true, false}, "", []bool{false, false}, []bool{false, false}},
		{"decideSplit: alone competes, a tie does not split", ranking([][]int{{3, 1}, {0, 2}}, []int{1, 5}, []bool{true, true}, true),
			[2]int{1, 0}, [2]bool{false, true}, "", []bool{false, false}, []bool{false, false}},
		// The guard (guard.Choice): an extrapolated option's estimate is
		// likely low, so one ranked below a trusted option is passed over,
		// and only one that could win makes the plugins fall back.
		{"an extrapolated prefill pod whose pairs rank below the best trusted one", ranking([][]int{{3, 1}, {0, 2}}, []int{4, 5}, []bool{true, true}, false),
			[2]int{1, 0}, [2]bool{true, true}, "", []bool{false, true}, []bool{false, false}},
		{"an extrapolated prefill pod in the best pair", ranking([][]int{{3, 1}, {0, 2}}, []int{4, 5}, []bool{true, true}, false),
			[2]int{1, 0}, [2]bool{true, true}, ReasonExtrapolated, []bool{true, false}, []bool{false, false}},
		{"an extrapolated pair tied with the best trusted one", ranking([][]int{{3, 0}, {0, 2}}, []int{4, 5}, []bool{true, true}, false),
			[2]int{0, 0}, [2]bool{true, true}, ReasonExtrapolated, []bool{false, true}, []bool{false, false}},
		{"every prefill pod extrapolated", ranking([][]int{{3, 1}, {0, 2}}, []int{4, 5}, []bool{true, true}, false),
			[2]int{1, 0}, [2]bool{true, true}, ReasonExtrapolated, []bool{true, true}, []bool{false, false}},
		{"an extrapolated decode pod not competing alone", ranking([][]int{{3, 1}, {0, 2}}, []int{4, 5}, []bool{true, true}, false),
			[2]int{1, 0}, [2]bool{true, true}, "", []bool{false, false}, []bool{true, true}},
		{"an extrapolated decode pod alone, ranked below the best pair", ranking([][]int{{3, 1}, {0, 2}}, []int{4, 5}, []bool{true, false}, false),
			[2]int{1, 5}, [2]bool{true, false}, "", []bool{false, false}, []bool{false, true}},
		{"an extrapolated decode pod alone, the best option", ranking([][]int{{3, 1}, {1, 2}}, []int{4, 0}, []bool{true, false}, false),
			[2]int{1, 0}, [2]bool{true, false}, ReasonExtrapolated, []bool{false, false}, []bool{false, true}},
		{"decideSplit: an extrapolated decode pod alone, ranked below", ranking([][]int{{3, 1}, {0, 2}}, []int{4, 5}, []bool{true, true}, true),
			[2]int{1, 0}, [2]bool{true, true}, "", []bool{false, false}, []bool{true, true}},
		{"decideSplit: an extrapolated decode pod alone, the best option", ranking([][]int{{3, 1}, {1, 2}}, []int{4, 0}, []bool{true, true}, true),
			[2]int{1, 0}, [2]bool{true, false}, ReasonExtrapolated, []bool{false, false}, []bool{false, true}},
		{"no pair estimates where the decider splits", ranking([][]int{{-1, -1}, {-1, -1}}, []int{4, 5}, []bool{true, true}, false),
			[2]int{math.MaxInt, math.MaxInt}, [2]bool{}, ReasonNoOption, []bool{false, false}, []bool{false, false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for j := range 2 {
				rank, split := tt.r.best(j)
				if rank != tt.rank[j] || split != tt.split[j] {
					t.Errorf("best(d%d) = %d, %v; want %d, %v", j, rank, split, tt.rank[j], tt.split[j])
				}
			}
			tt.r.decideFallback(tt.prefillXtra, tt.decodeXtra, false)
			if tt.r.Fallback != tt.fallback {
				t.Errorf("fallback %q, want %q", tt.r.Fallback, tt.fallback)
			}
			trusting := *tt.r
			trusting.Fallback = ""
			trusting.decideFallback(tt.prefillXtra, tt.decodeXtra, true)
			if trusting.Fallback == ReasonExtrapolated {
				t.Errorf("fell back on extrapolation while trusting it")
			}
		})
	}
}

func TestRankingPrefillAndSplit(t *testing.T) {
	r := ranking([][]int{{3, 1}, {0, -1}}, []int{2, 0}, []bool{true, true}, false)
	eps := named("p0", "p1", "p2")
	scores, ok := r.prefillScores("/d0", eps)
	if !ok || scores[eps[0]] != 0.5 || scores[eps[1]] != 1 || scores[eps[2]] != 0 {
		t.Errorf("prefill scores with d0: %v, %v", scores, ok)
	}
	if scores, ok = r.prefillScores("/d1", eps); !ok || scores[eps[0]] != 1 || scores[eps[1]] != 0 {
		t.Errorf("prefill scores with d1: %v", scores)
	}
	if _, ok := r.prefillScores("/d9", eps); ok {
		t.Error("an unranked peer scored")
	}
	// d0: its best pair (rank 1) beats it alone (2); d1 alone (0) ties its
	// best pair (0): a tie does not split.
	if alone, ok := r.aloneIsBetter("/d0"); alone || !ok {
		t.Errorf("d0 alone better: %v %v", alone, ok)
	}
	if alone, ok := r.aloneIsBetter("/d1"); !alone || !ok {
		t.Errorf("d1 alone better: %v %v", alone, ok)
	}
	if got := r.predictedTTFT("/p1", "/d0"); got != 2 {
		t.Errorf("predicted TTFT of (p1, d0) = %v", got)
	}
	if got := r.predictedTTFT("", "/d1"); got != 6 {
		t.Errorf("predicted TTFT of d1 alone = %v", got)
	}
}
