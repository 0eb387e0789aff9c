package fidelity

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/headroomhq/headroom/lab/sim"
)

// Predict simulates the run described by spec, with the Roofline step
// model's coefficients coef, and measures it as spec's tool would have:
// per stage, each stage starting when the one before has ended (after
// spec.Interval), on one engine whose prefix cache carries over; an HTTP
// client's requests time out after 300 s.
func Predict(ctx context.Context, spec Spec, coef sim.Coefficients) (Measurement, error) {
	cfg, err := sim.DeploymentConfig(spec.Arch, spec.GPU, spec.Engine, coef)
	if err != nil {
		return Measurement{}, err
	}
	opts := sim.FleetOptions{Router: &sim.RoundRobin{}}
	if spec.Tool == InferencePerf {
		opts.ClientTimeout = inferencePerfTimeout
	}
	f, err := sim.NewFleet(cfg, opts)
	if err != nil {
		return Measurement{}, err
	}
	var m Measurement
	start := time.Duration(0)
	for k, reqs := range spec.Stages {
		if k > 0 {
			start = f.Now() + spec.Interval
		}
		shifted := make([]*sim.Request, len(reqs))
		for i, r := range reqs {
			c := *r
			c.Arrival += start
			shifted[i] = &c
		}
		n := len(f.Outcomes())
		if err := f.Submit(shifted...); err != nil {
			return Measurement{}, fmt.Errorf("stage %d: %w", k, err)
		}
		if err := f.Run(ctx); err != nil {
			return Measurement{}, fmt.Errorf("stage %d: %w", k, err)
		}
		outs := f.Outcomes()[n:]
		m.Stages = append(m.Stages, measureStage(outs, spec.Tool))
		if spec.Tool == EngineLog {
			for _, o := range outs {
				t := RequestTimes{TTFTMs: math.NaN(), E2EMs: math.NaN()}
				if o.Done {
					t = RequestTimes{TTFTMs: ms(o.FirstToken - o.Queued), E2EMs: ms(o.Finish - o.Queued)}
				}
				m.Requests = append(m.Requests, t)
			}
		}
	}
	return m, nil
}

// measureStage measures simulated requests as tool does: from the client's
// send (the dispatch; the frontend included) for inference-perf, from the
// engine's queued time for an engine log.
func measureStage(outs []*sim.Outcome, tool Tool) Stage {
	ls := make([]latency, len(outs))
	first, last := time.Duration(math.MaxInt64), time.Duration(0)
	for i, o := range outs {
		origin := o.Dispatch
		if tool == EngineLog {
			origin = o.Queued
		}
		first = min(first, origin)
		if !o.Done {
			continue
		}
		last = max(last, o.Finish)
		l := latency{ttft: ms(o.FirstToken - origin), e2e: ms(o.Finish - origin), perToken: math.NaN(), ok: true}
		if n := o.Request.OutputTokens; n > 1 {
			l.perToken = ms(o.Finish-o.FirstToken) / float64(n-1)
		}
		ls[i] = l
	}
	window := 0.0
	if last > first {
		window = (last - first).Seconds()
	}
	return stageOf(ls, window)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
