package demo

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
)

func TestProbe(t *testing.T) {
	ctx := context.Background()
	// Enough requests (over 100) that the trainer fits trees, not only its
	// deliberately cautious early-life line.
	reqs, err := Workload(40*time.Second, 4, 1, 7)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.DefaultConfig()
	p, err := NewProbe(ctx, cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if p.Len() != len(reqs) {
		t.Fatalf("probe has %d observations, want one per request (%d)", p.Len(), len(reqs))
	}
	// Round-robin spreads the sessions: the probe holds both cache hits
	// and misses.
	var hit, miss int
	for _, r := range p.rows {
		if r.PrefixCacheScore > 0.9 {
			hit++
		}
		if r.PrefixCacheScore < 0.6 {
			miss++
		}
	}
	if hit == 0 || miss == 0 {
		t.Errorf("probe rows: %d well cached, %d mostly uncached; want some of each", hit, miss)
	}

	svc, client := startTestService(t, true)
	m, err := p.Measure(ctx, client)
	if err != nil || !math.IsNaN(m.TTFT) || !math.IsNaN(m.TPOT) {
		t.Fatalf("before a model: %+v, %v; want NaN", m, err)
	}
	// Train on the probe itself: the error must then be small, and it is
	// the error of the served predictions against the probe's labels.
	var entries []features.Sample
	for i, r := range p.rows {
		r.NumTokensGenerated = 0
		entries = append(entries, features.Sample{Row: r, ActualTTFTMs: p.ttft[i]})
		if p.tpot[i] > 0 {
			entries = append(entries, features.Sample{Row: r, ActualTPOTMs: p.tpot[i]})
		}
	}
	if _, err := client.AddTrainingData(ctx, entries); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Retrain(ctx); err != nil {
		t.Fatal(err)
	}
	m, err = p.Measure(ctx, client)
	if err != nil || !(m.TTFT > 0 && m.TTFT < 30) || !(m.TPOT > 0 && m.TPOT < 30) {
		t.Errorf("after training on the probe: MAPE %+v, %v; want finite and small", m, err)
	}
}
