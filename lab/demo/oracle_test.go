package demo

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/lab/sim/simtest"
)

// Where the predictions rank the candidates as the foresight does there is
// nothing to explain; where one target's error flips the choice, that
// target is named, with the cache relation of the two servers and the
// latency the wrong choice cost.
func TestRegretNamesThePredictionThatMisled(t *testing.T) {
	busy := sim.ServerState{InFlight: 3, PrefixCacheScore: 0.9}
	cold := sim.ServerState{Index: 1, InFlight: 3}
	tests := []struct {
		name        string
		preds, fore []Prediction
		states      []sim.ServerState
		wantCause   string
		wantTTFTMs  float64
	}{
		{"right ranking, wrong values",
			[]Prediction{{TTFTMs: 80, TPOTMs: 30}, {TTFTMs: 300, TPOTMs: 30}},
			[]Prediction{{TTFTMs: 60, TPOTMs: 25}, {TTFTMs: 200, TPOTMs: 25}},
			[]sim.ServerState{busy, cold}, "", 0},
		{"cached server's TTFT over-predicted",
			[]Prediction{{TTFTMs: 400, TPOTMs: 25}, {TTFTMs: 200, TPOTMs: 25}},
			[]Prediction{{TTFTMs: 60, TPOTMs: 25}, {TTFTMs: 200, TPOTMs: 25}},
			[]sim.ServerState{busy, cold}, "TTFT error, passed over a more cached server", 140},
		{"TPOT error between equally cached servers",
			[]Prediction{{TTFTMs: 100, TPOTMs: 20}, {TTFTMs: 100, TPOTMs: 40}},
			[]Prediction{{TTFTMs: 100, TPOTMs: 40}, {TTFTMs: 100, TPOTMs: 20}},
			[]sim.ServerState{{InFlight: 2}, {Index: 1, InFlight: 2}}, "TPOT error, between equally cached servers", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &regretRecorder{}
			c := Pick(Score(tt.preds, tt.states, SLO{}), tt.states)
			r.record(tt.preds, tt.fore, tt.states, c)
			rep := r.report()
			if rep.Decisions != 1 || len(rep.Errors) == 0 {
				t.Fatalf("report %+v", rep)
			}
			if tt.wantCause == "" {
				if rep.Disagreements != 0 || len(rep.ByCause) != 0 {
					t.Errorf("disagreement where the ranking was right: %+v", rep)
				}
				return
			}
			if rep.Disagreements != 1 || len(rep.ByCause) != 1 || rep.ByCause[0].Cause != tt.wantCause ||
				rep.TTFTMs != tt.wantTTFTMs || rep.ByCause[0].TTFTMs != tt.wantTTFTMs {
				t.Errorf("report %+v, want one disagreement from %q costing %v ms", rep, tt.wantCause, tt.wantTTFTMs)
			}
		})
	}
}

// scriptedFirst sends the requests it names to fixed servers and asks the
// oracle about the rest.
type scriptedFirst struct {
	to     map[int]int
	oracle *OracleRouter
}

func (s scriptedFirst) Route(req *sim.Request, states []sim.ServerState) int { return s.to[req.ID] }

func (s scriptedFirst) RouteLookahead(req *sim.Request, states []sim.ServerState, la *sim.Lookahead) int {
	if i, ok := s.to[req.ID]; ok {
		return i
	}
	return s.oracle.RouteLookahead(req, states, la)
}

// A turn whose history is cached on one idle server, every server idle: the
// oracle foresees the shortest TTFT there, and the request gets exactly
// what it foresaw (nothing else arrives).
func TestOracleRouterFollowsTheCache(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.Servers = 3
	hashes := sim.ChainBlocks([]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	first := &sim.Request{ID: 1, PromptTokens: 300, OutputTokens: 10, BlockHashes: hashes[:300/sim.BlockSize]}
	turn := &sim.Request{ID: 2, After: 1, Think: time.Second, PromptTokens: 330, OutputTokens: 20, BlockHashes: hashes[:330/sim.BlockSize]}
	oracle := &OracleRouter{}
	var foresaw Prediction
	f, err := sim.NewFleet(cfg, sim.FleetOptions{Router: scriptedFirst{to: map[int]int{1: 2}, oracle: oracle},
		Hooks: sim.Hooks{OnDispatch: func(o *sim.Outcome, _ []sim.ServerState) {
			if o.Request == turn {
				foresaw = oracle.Foresight()
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Submit(first, turn); err != nil {
		t.Fatal(err)
	}
	if err := f.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	o := f.Outcomes()[1]
	if o.Server != 2 || o.PrefixHitTokens == 0 {
		t.Errorf("turn went to server %d with %d tokens cached, want server 2 where its history is", o.Server, o.PrefixHitTokens)
	}
	if foresaw.TTFTMs != ms(o.TTFT()) || foresaw.TPOTMs != ms(o.TPOT()) {
		t.Errorf("foresaw %+v, got TTFT %v TPOT %v", foresaw, o.TTFT(), o.TPOT())
	}
}

func TestPoliciesFor(t *testing.T) {
	if got := PoliciesFor(SLO{}); len(got) != len(Policies) || got[len(got)-1] != OracleTTFT {
		t.Errorf("without SLOs: %v", got)
	}
	if got := PoliciesFor(SLO{TTFTMs: 100}); len(got) != len(Policies)+1 || got[len(got)-1] != OracleSLO {
		t.Errorf("with an SLO: %v", got)
	}
}

// BenchmarkOracle: the oracle policy (every candidate foreseen to the
// request's last token) on the demo's default fleet and traffic, 2
// simulated minutes, at three loads; reports the wall time and simulation
// work per routing decision.
func BenchmarkOracle(b *testing.B) {
	for _, rate := range []float64{8, 16, 32} {
		b.Run(fmt.Sprintf("rate=%g", rate), func(b *testing.B) {
			reqs, err := Workload(DefaultOptions().Duration, rate, DefaultOptions().Burstiness, 1)
			if err != nil {
				b.Fatal(err)
			}
			cfg := sim.DefaultConfig()
			cfg.Servers = DefaultOptions().Servers
			simtest.BenchmarkLookahead(b, func() (*sim.Fleet, error) {
				return sim.Simulate(context.Background(), cfg, sim.FleetOptions{Router: &OracleRouter{}}, reqs...)
			})
		})
	}
}
