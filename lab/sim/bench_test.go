package sim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/lab/sim/simtest"
	"github.com/headroomhq/headroom/lab/sim/workload"
)

// benchmarkRun reports simulated requests and engine steps per wall-clock
// second for one workload on the default two-server fleet.
func benchmarkRun(b *testing.B, reqs []*sim.Request) {
	steps := 0
	for b.Loop() {
		f, err := sim.NewFleet(sim.DefaultConfig(), sim.FleetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Submit(reqs...); err != nil {
			b.Fatal(err)
		}
		if err := f.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
		steps += f.Steps()
	}
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(len(reqs)*b.N)/secs, "requests/s")
	b.ReportMetric(float64(steps)/secs, "steps/s")
}

// BenchmarkChat: 3 720 ShareGPT-like requests, the shared trace's load (1 to
// 16 requests/s over 10 simulated minutes).
func BenchmarkChat(b *testing.B) {
	var reqs []*sim.Request
	for i, rate := range []float64{1, 2, 4, 8, 16} {
		o := workload.DefaultChat(int(rate*120), rate)
		o.Seed = uint64(i)
		stage, err := workload.Chat(o)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range stage {
			r.ID += len(reqs)
			r.Arrival += time.Duration(i) * 120 * time.Second
		}
		reqs = append(reqs, stage...)
	}
	benchmarkRun(b, reqs)
}

// BenchmarkAgentic: the default agentic workload, 192 requests with prompts
// up to several thousand tokens, most of them prefix hits.
func BenchmarkAgentic(b *testing.B) {
	reqs, err := workload.Agentic(workload.DefaultAgentic(4))
	if err != nil {
		b.Fatal(err)
	}
	benchmarkRun(b, reqs)
}

// BenchmarkOracle: the oracle routing the demo's traffic (agent sessions,
// bursty arrivals, 8 default servers, 2 simulated minutes) at three loads;
// reports the wall time and the simulation work per routing decision.
func BenchmarkOracle(b *testing.B) {
	for _, rate := range []float64{8, 16, 32} {
		b.Run(fmt.Sprintf("rate=%g", rate), func(b *testing.B) {
			o := workload.DefaultAgentic(rate)
			n := int(rate * 120)
			o.Sessions = (n + o.Turns - 1) / o.Turns
			o.Arrivals = workload.Arrivals{Rate: rate, Burstiness: 0.5}
			reqs, err := workload.Agentic(o)
			if err != nil {
				b.Fatal(err)
			}
			cfg := sim.DefaultConfig()
			cfg.Servers = 8
			simtest.BenchmarkLookahead(b, func() (*sim.Fleet, error) {
				return sim.Simulate(context.Background(), cfg, sim.FleetOptions{Router: &sim.TTFTOracle{}}, reqs...)
			})
		})
	}
}
