package demo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
)

// Probe is a fixed set of observations the service never trains on: the
// rows a router saw at dispatch and the latencies that followed. Measuring
// every bundle against the same probe gives a learning curve whose points
// can be compared, which neither the trainer's holdout (it grows and moves
// with the traffic) nor the live error (it is measured on whatever the
// router chose) can give.
type Probe struct {
	rows       []features.Row
	ttft, tpot []float64 // labels; tpot is 0 for one-token answers
}

// NewProbe replays reqs on a fleet of cfg under round-robin, which ignores
// load and cache and so spreads the probe over hits and misses, quiet and
// busy servers, and keeps each request's row and latencies as the router
// measures them.
func NewProbe(ctx context.Context, cfg sim.Config, reqs []*sim.Request) (*Probe, error) {
	p := &Probe{}
	f, err := sim.Simulate(ctx, cfg, sim.FleetOptions{Router: &sim.RoundRobin{}}, reqs...)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	for _, o := range f.Outcomes() {
		if !o.Done {
			continue
		}
		e := TTFTEntry(o, time.Time{})
		var tpot float64
		if t, ok := TPOTEntry(o, time.Time{}); ok {
			tpot = t.ActualTPOTMs
		}
		p.rows = append(p.rows, predictRow(o.Row))
		p.ttft = append(p.ttft, e.ActualTTFTMs)
		p.tpot = append(p.tpot, tpot)
	}
	if len(p.rows) == 0 {
		return nil, errors.New("probe: no request completed")
	}
	return p, nil
}

// Len is the number of observations.
func (p *Probe) Len() int { return len(p.rows) }

// Measure asks the predictor for every probe row in one bulk call and
// returns the mean absolute percentage error per target; NaN for both
// before the first model.
func (p *Probe) Measure(ctx context.Context, c *Client) (TargetPair, error) {
	preds, err := c.Predict(ctx, p.rows)
	if errors.Is(err, ErrNotReady) {
		return TargetPair{TTFT: math.NaN(), TPOT: math.NaN()}, nil
	}
	if err != nil {
		return TargetPair{}, fmt.Errorf("probe: %w", err)
	}
	var ttft, tpot []float64
	for i, pr := range preds {
		if p.ttft[i] > 0 {
			ttft = append(ttft, 100*math.Abs(pr.TTFTMs-p.ttft[i])/p.ttft[i])
		}
		if p.tpot[i] > 0 {
			tpot = append(tpot, 100*math.Abs(pr.TPOTMs-p.tpot[i])/p.tpot[i])
		}
	}
	return TargetPair{TTFT: mean(ttft), TPOT: mean(tpot)}, nil
}
