package sim

import (
	"math"
	"testing"
)

func TestRoundRobin(t *testing.T) {
	r := &RoundRobin{}
	states := make([]ServerState, 3)
	for i, want := range []int{0, 1, 2, 0, 1} {
		if got := r.Route(nil, states); got != want {
			t.Fatalf("call %d: server %d, want %d", i, got, want)
		}
	}
}

func TestLeastQueue(t *testing.T) {
	tests := []struct {
		name   string
		states []ServerState
		want   int
	}{
		{"fewest waiting+running", []ServerState{{NumRequestWaiting: 2, NumRequestRunning: 1}, {NumRequestRunning: 2}, {NumRequestWaiting: 1, NumRequestRunning: 3}}, 1},
		{"tie broken by in flight", []ServerState{{NumRequestRunning: 1, InFlight: 3}, {NumRequestRunning: 1, InFlight: 1}}, 1},
		{"full tie goes to the first", []ServerState{{InFlight: 1}, {InFlight: 1}}, 0},
	}
	for _, tt := range tests {
		if got := (LeastQueue{}).Route(nil, tt.states); got != tt.want {
			t.Errorf("%s: server %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestLoadPrefixScore(t *testing.T) {
	p := LoadPrefix{WKV: 1, WQueue: 2, WPrefix: 1}
	s := ServerState{KVCachePercentage: 0.25, NumRequestWaiting: 1, NumRequestRunning: 1, PrefixCacheScore: 0.5}
	// (1·0.75 + 2·(4−2)/4 + 1·0.5) / 4
	if got, want := p.Score(s, 4), (0.75+1+0.5)/4; math.Abs(got-want) > 1e-12 {
		t.Errorf("score %v, want %v", got, want)
	}
	// With every queue empty the queue term is full: (1 + 2 + 0) / 4.
	if got := p.Score(ServerState{}, 0); got != 0.75 {
		t.Errorf("idle server with all queues empty scores %v, want 0.75", got)
	}
}

func TestLoadPrefixRoute(t *testing.T) {
	p := DefaultLoadPrefix()
	tests := []struct {
		name   string
		states []ServerState
		want   int
	}{
		{"prefix wins at equal load", []ServerState{{NumRequestRunning: 2}, {NumRequestRunning: 2, PrefixCacheScore: 0.9}}, 1},
		{"empty server wins without prefix", []ServerState{{NumRequestRunning: 5, KVCachePercentage: 0.5}, {}}, 1},
		// A full prefix hit outweighs a queue of 3 against 1 and more KV use.
		{"prefix outweighs a short queue", []ServerState{{NumRequestRunning: 1}, {NumRequestRunning: 3, KVCachePercentage: 0.1, PrefixCacheScore: 1}}, 1},
		// A busy server gets nothing for its prefix when the other is idle
		// and the hit is small.
		{"load outweighs a small prefix", []ServerState{{NumRequestRunning: 10, KVCachePercentage: 0.6, PrefixCacheScore: 0.2}, {}}, 1},
		{"tie broken by in flight", []ServerState{{InFlight: 2}, {InFlight: 1}}, 1},
	}
	for _, tt := range tests {
		if got := p.Route(nil, tt.states); got != tt.want {
			t.Errorf("%s: server %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestServerStateRow(t *testing.T) {
	s := ServerState{KVCachePercentage: 0.3, NumRequestWaiting: 2, NumRequestRunning: 5, PrefixCacheScore: 0.5,
		InFlight: 7, PrefillTokensInFlight: 900}
	row := s.Row(&Request{PromptTokens: 321})
	if row.KVCachePercentage != 0.3 || row.InputTokenLength != 321 || row.NumRequestWaiting != 2 ||
		row.NumRequestRunning != 7 || row.PrefixCacheScore != 0.5 || row.PrefillTokensInFlight != 900 {
		t.Errorf("row %+v", row)
	}
}

func TestNewRouter(t *testing.T) {
	for _, name := range RouterNames {
		if r, ok := NewRouter(name); !ok || r == nil {
			t.Errorf("NewRouter(%q) failed", name)
		}
	}
	if _, ok := NewRouter("random"); ok {
		t.Error("unknown name accepted")
	}
}
