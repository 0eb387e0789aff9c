package predictor

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/model/modeltest"
	"github.com/headroomhq/headroom/wire"
)

// cpuTime is the process's CPU time so far, user and system, in ns. On a
// shared machine a benchmark's wall time per op grows with every other
// tenant; its CPU time per op much less, so benchmarks report both.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchRows returns n rows of a chat workload on busy servers.
func benchRows(n int) []features.Row {
	r := rand.New(rand.NewPCG(5, 6))
	rows := make([]features.Row, n)
	for i := range rows {
		rows[i] = features.Row{
			KVCachePercentage: r.Float64(), InputTokenLength: 16 + r.Int64N(8000),
			NumRequestWaiting: r.Int64N(12) * r.Int64N(2), NumRequestRunning: 1 + r.Int64N(48),
			NumTokensGenerated: 1, PrefixCacheScore: r.Float64(),
			PrefillTokensInFlight: r.Int64N(20000), DecodeTokensInFlight: r.Int64N(40000),
		}
		if i%4 == 0 {
			rows[i].PodType = "decode"
		}
	}
	return rows
}

// treeModel is a linear+log-trees model with numTrees complete trees.
func treeModel(tb testing.TB, t features.Target, numTrees, depth int) *model.TargetModel {
	tb.Helper()
	cols := features.DefaultTTFTColumns
	if t == features.TPOT {
		cols = features.DefaultTPOTColumns
	}
	m := linearModel(tb, cols, 20, 0.5, 0.2)
	m.Kind = model.KindResidual
	trees, err := modeltest.CompleteTrees(rand.New(rand.NewPCG(uint64(t), uint64(numTrees))), m.Schema(), benchRows(512), numTrees, depth)
	if err != nil {
		tb.Fatal(err)
	}
	m.Trees = trees
	if err := m.Prepare(); err != nil {
		tb.Fatal(err)
	}
	return m
}

// BenchmarkPredictRow is the whole per-row cost of a prediction with trees
// for both targets: features, line, trees, calibrated bounds. One op is one
// row. The target is ≤ 10 µs for the default model size: 200 trees of
// depth 3 at the time of writing (xgboost.DefaultParams), 4 and 6
// before; complete trees are the slowest case of a depth.
func BenchmarkPredictRow(b *testing.B) {
	rows := benchRows(1024)
	for _, depth := range []int{3, 4, 6} {
		for _, n := range []int{100, 200, 400} {
			p, _ := New(Mean, 0.9)
			mb := &model.Bundle{Version: 1, CreatedAt: time.Now(),
				TTFT: treeModel(b, features.TTFT, n, depth), TPOT: treeModel(b, features.TPOT, n, depth)}
			p.Swap(&bundle.Published{Bundle: mb}, time.Now())
			b.Run(fmt.Sprintf("trees=%d/depth=%d", n, depth), func(b *testing.B) {
				out := make([]wire.Prediction, len(rows))
				b.ReportAllocs()
				cpu0 := cpuTime()
				i := 0
				for b.Loop() {
					k := i & (len(rows) - 1)
					if _, err := p.Predict(rows[k:k+1], out[k:k+1]); err != nil {
						b.Fatal(err)
					}
					i++
				}
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(i), "cpu-ns/op")
			})
		}
	}
}

// BenchmarkTargetPredict splits the per-row cost by target and by step,
// for 200 complete trees of depth 6.
func BenchmarkTargetPredict(b *testing.B) {
	rows := benchRows(1024)
	for _, t := range features.PodTargets {
		m := treeModel(b, t, 200, 6)
		s := m.Schema()
		x := make([]float64, 0, 64)
		b.Run(t.String()+"/features", func(b *testing.B) {
			i := 0
			for b.Loop() {
				x = s.Build(&rows[i&(len(rows)-1)], x[:0])
				i++
			}
		})
		xs := make([][]float64, len(rows))
		for i := range rows {
			xs[i] = s.Build(&rows[i], nil)
		}
		b.Run(t.String()+"/trees", func(b *testing.B) {
			var sink float64
			i := 0
			for b.Loop() {
				sink += m.Trees.Predict(xs[i&(len(xs)-1)])
				i++
			}
			_ = sink
		})
		b.Run(t.String()+"/model", func(b *testing.B) {
			var sink float64
			i := 0
			for b.Loop() {
				sink += m.Predict(xs[i&(len(xs)-1)])
				i++
			}
			_ = sink
		})
	}
}
