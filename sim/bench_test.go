package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/headroomhq/headroom/sim"
	"github.com/headroomhq/headroom/sim/workload"
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
		for _, e := range f.Engines() {
			steps += e.Stats().Steps
		}
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
