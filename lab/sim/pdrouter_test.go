package sim

import (
	"testing"

	"github.com/headroomhq/headroom/features"
)

func pod(i int, topo features.Topology, waiting, running int, prefix float64) PodState {
	return PodState{ServerState: ServerState{Index: i, NumRequestWaiting: waiting, NumRequestRunning: running,
		PrefixCacheScore: prefix}, Topology: topo}
}

func TestPDRouters(t *testing.T) {
	a := place("a", "r1", "z1", "eu")
	b := place("b", "r1", "z1", "eu")
	far := place("x", "r9", "z2", "eu")
	req := &Request{ID: 1, PromptTokens: 1000, OutputTokens: 10}
	decode := []PodState{pod(0, far, 3, 10, 0), pod(1, a, 0, 4, 0), pod(2, b, 1, 8, 0)}
	// The far prefill pod holds most of the prompt; the one on the decode
	// pod's node a little less.
	prefill := []PodState{pod(0, far, 0, 2, 0.9), pod(1, a, 0, 2, 0.6), pod(2, b, 0, 1, 0)}
	for _, tc := range []struct {
		name    string
		router  PDRouter
		prefill []PodState
		want    PDChoice
	}{
		// D by load (pod 1), then P by load and prefix alone: the far pod.
		{"greedy", &Greedy{}, prefill, PDChoice{Prefill: 0, Decode: 1}},
		// The same-node bonus (1.0) outweighs the prefix difference.
		{"topology-constant", &TopologyConstant{}, prefill, PDChoice{Prefill: 1, Decode: 1}},
		// A small weight does not.
		{"topology-constant, weight 0.1", &TopologyConstant{Weight: 0.1}, prefill, PDChoice{Prefill: 0, Decode: 1}},
		{"greedy under its threshold", &Greedy{SplitThreshold: 1001}, prefill, PDChoice{Prefill: NoSplit, Decode: 1}},
		{"greedy at its threshold", &Greedy{SplitThreshold: 1000}, prefill, PDChoice{Prefill: 0, Decode: 1}},
		{"greedy without prefill pods", &Greedy{}, nil, PDChoice{Prefill: NoSplit, Decode: 1}},
		{"decode-only", &DecodeOnly{Router: LeastQueue{}}, prefill, PDChoice{Prefill: NoSplit, Decode: 1}},
	} {
		if got := tc.router.RoutePD(req, tc.prefill, decode); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	for _, name := range PDRouterNames {
		if r, ok := NewPDRouter(name); !ok || r == nil {
			t.Errorf("NewPDRouter(%q) = %v, %v", name, r, ok)
		}
	}
	if _, ok := NewPDRouter("joint"); ok {
		t.Error("NewPDRouter accepts a name it does not build")
	}
}

func TestTopologyScoreIsLLMDs(t *testing.T) {
	a := place("a", "r1", "z1", "eu")
	for _, tc := range []struct {
		b    features.Topology
		want float64
	}{
		{a, 1.0},
		{place("b", "r1", "z1", "eu"), 0.2},
		{place("b", "r2", "z1", "eu"), 0.05},
		{place("b", "r2", "z2", "eu"), 0.02},
		{place("b", "r2", "z2", "us"), 0},
	} {
		if got := TopologyScore(a, tc.b); got != tc.want {
			t.Errorf("%v to %v: %g, want %g", a, tc.b, got, tc.want)
		}
	}
}
