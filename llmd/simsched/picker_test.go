package simsched

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
)

// candidates are n endpoints, the first ties of them sharing the top
// score, listed in the order perm gives.
func candidates(n, ties int, perm []int) []*fwksched.ScoredEndpoint {
	out := make([]*fwksched.ScoredEndpoint, n)
	for i, k := range perm {
		meta := &fwkdl.EndpointMetadata{ID: types.NamespacedName{Namespace: namespace, Name: fmt.Sprintf("pod-%d", k)}}
		score := 0.5 - float64(k)/100
		if k < ties {
			score = 1
		}
		out[i] = &fwksched.ScoredEndpoint{Endpoint: fwksched.NewEndpoint(meta, fwkdl.NewMetrics(), nil), Score: score}
	}
	return out
}

// TestSeededPickerIsTheSeedsAlone: one seed picks the same sequence of
// endpoints whatever order the profile lists them in (llm-d's lists them
// in a map's order), always one of the highest scored; the seeds between
// them break a tie every way.
func TestSeededPickerIsTheSeedsAlone(t *testing.T) {
	const n, ties, picks = 8, 4, 64
	shuffle := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	for seed := uint64(1); seed <= 8; seed++ {
		var want []string
		for order := 0; order < 5; order++ {
			p := newSeededPicker("max-score-picker", 1, seed)
			var got []string
			for i := 0; i < picks; i++ {
				perm := shuffle.Perm(n)
				r := p.Pick(context.Background(), candidates(n, ties, perm))
				if len(r.TargetEndpoints) != 1 {
					t.Fatalf("seed %d: %d targets, want 1", seed, len(r.TargetEndpoints))
				}
				name := r.TargetEndpoints[0].GetMetadata().ID.Name
				if r.TargetEndpoints[0].(*fwksched.ScoredEndpoint).Score != 1 {
					t.Fatalf("seed %d: picked %s, not one of the highest scored", seed, name)
				}
				got = append(got, name)
				seen[name] = true
			}
			if want == nil {
				want = got
				continue
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("seed %d, candidates in another order: pick %d is %s, want %s", seed, i, got[i], want[i])
				}
			}
		}
	}
	if len(seen) != ties {
		t.Errorf("ties broken towards %d of the %d tied endpoints, want all", len(seen), ties)
	}
}

// TestSeededPickerKeepsMaxEndpoints: maxNumOfEndpoints of the highest.
func TestSeededPickerKeepsMaxEndpoints(t *testing.T) {
	p := newSeededPicker("max-score-picker", 3, 7)
	r := p.Pick(context.Background(), candidates(6, 1, []int{5, 3, 1, 0, 2, 4}))
	var got []string
	for _, e := range r.TargetEndpoints {
		got = append(got, e.GetMetadata().ID.Name)
	}
	if fmt.Sprint(got) != "[pod-0 pod-1 pod-2]" {
		t.Errorf("picked %v, want [pod-0 pod-1 pod-2]", got)
	}
}
