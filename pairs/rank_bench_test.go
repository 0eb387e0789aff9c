package pairs

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/model/modeltest"
)

// cpuTime is the process's CPU time so far, user and system, in ns: on a
// shared machine CPU time per op moves much less than wall time.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchCandidates returns n candidates spread over two zones of four racks
// of two nodes, with loads and prefix scores of a busy pool.
func benchCandidates(r *rand.Rand, role string, n int) []Candidate {
	cs := make([]Candidate, n)
	for i := range cs {
		cs[i] = Candidate{
			Pod:      fmt.Sprintf("%s-%d", role, i),
			Topology: place("eu", fmt.Sprintf("z%d", i%2), fmt.Sprintf("r%d", i%4), fmt.Sprintf("%s-n%d", role, i%8)),
			Row: features.Row{KVCachePercentage: r.Float64(), NumRequestWaiting: r.Int64N(4), NumRequestRunning: 1 + r.Int64N(48),
				PrefixCacheScore: r.Float64(), PrefillTokensInFlight: r.Int64N(20000), DecodeTokensInFlight: r.Int64N(40000)},
		}
	}
	return cs
}

// benchTreeModels gives the line of testModels 200 complete trees of depth
// 6 per target, the size the handler figures in docs/PERFORMANCE.md use
// (the default is depth 3, so this is the slower case).
func benchTreeModels(b *testing.B, r *rand.Rand, rows []features.Row) Models {
	m := testModels(b, links())
	for _, tm := range []*model.TargetModel{m.TTFT, m.TPOT} {
		trees, err := modeltest.CompleteTrees(r, tm.Schema(), rows, 200, 6)
		if err != nil {
			b.Fatal(err)
		}
		tm.Kind, tm.Trees = model.KindResidual, trees
		if err := tm.Prepare(); err != nil {
			b.Fatal(err)
		}
	}
	return m
}

// BenchmarkRank is one ranking of P × D candidates, without decoding or
// encoding: 2·D + P tree-model estimates and P·D transfer estimates, sorted.
func BenchmarkRank(b *testing.B) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, n := range []int{4, 16, 64} {
		req := &Request{InputTokenLength: 3000, TTFTSLOMs: 800, Prefill: benchCandidates(r, "p", n), Decode: benchCandidates(r, "d", n)}
		var rows []features.Row
		for i := range n {
			rows = append(rows, row(req, &req.Prefill[i], "prefill"), row(req, &req.Decode[i], "decode"))
		}
		m := benchTreeModels(b, r, rows)
		b.Run(fmt.Sprintf("%dx%d", n, n), func(b *testing.B) {
			var res Result
			b.ReportAllocs()
			cpu0 := cpuTime()
			i := 0
			for b.Loop() {
				if err := Rank(&m, req, &res); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(i), "cpu-ns/op")
		})
	}
}
