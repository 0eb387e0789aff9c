// Package simtest holds what the tests of several packages share about the
// simulator; like net/http/httptest, it exists for tests only.
package simtest

import (
	"testing"

	"github.com/headroomhq/headroom/lab/sim"
)

// BenchmarkLookahead runs one simulation per iteration of b and reports what
// its router's lookaheads cost per routing decision: wall time, engines
// forked and engine steps simulated.
func BenchmarkLookahead(b *testing.B, run func() (*sim.Fleet, error)) {
	var st sim.LookaheadStats
	for b.Loop() {
		f, err := run()
		if err != nil {
			b.Fatal(err)
		}
		s := f.LookaheadStats()
		st.Decisions += s.Decisions
		st.Forks += s.Forks
		st.Steps += s.Steps
	}
	d := float64(st.Decisions)
	b.ReportMetric(float64(b.Elapsed().Microseconds())/d, "µs/decision")
	b.ReportMetric(float64(st.Forks)/d, "forks/decision")
	b.ReportMetric(float64(st.Steps)/d, "steps/decision")
}
