package demo

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
)

// Both demos run every policy on a sim.PDFleet: the single-pool demo's on
// sim.SinglePool behind sim.DecodeOnly, the P/D demo's on its two pools.
// What differs between them is a learning policy's router and the entries
// its sidecar reports (a learning), and the names of the policies that
// never call the service (comparison).

// estimate is what a router expected of the route it chose for a request:
// predicted by the service, or foreseen by an oracle.
type estimate struct {
	TTFTMs, TPOTMs, TransferMs float64
}

// learning is a policy that predicts from the service and reports to it.
type learning struct {
	router sim.PDRouter
	// estimate is what the router expected of o's route, read at dispatch;
	// false when it routed without an estimate (a fallback).
	estimate func(o *sim.PDOutcome) (estimate, bool)
	// stats is what the router has done so far.
	stats func() RouterStats
	// The entries the router (and, for P/D, its sidecar) reports at the
	// first token and at the end; tpotEntry's false means none. Both nil:
	// the router reports its own (a flusher).
	ttftEntry func(o *sim.PDOutcome, at time.Time) features.Sample
	tpotEntry func(o *sim.PDOutcome, at time.Time) (features.Sample, bool)
	// liveAgainstLabel measures the live TTFT error against the entry's
	// label (whole milliseconds, what the trainer learns) rather than the
	// exact TTFT: the single-pool demo's figure since it was first
	// published, kept so that its results stay comparable.
	liveAgainstLabel bool
	// transfers says the run reports the KV-transfer target too.
	transfers bool
	// finish completes the policy's result from its router after the run
	// (the regret of the predicted policy).
	finish func(pr *PolicyResult)
}

// fleetObserver is a router that watches the fleet it routes (llm-d's
// scheduler in the loop, llmd.go): it needs the simulated time (now, the
// fleet's; stamp, a time of the run as the time of day its entries carry)
// and what its EPP sees of each response. A router that also reports
// entries of its own to the trainer is a flusher.
type fleetObserver interface {
	attach(now func() time.Duration, stamp func(time.Duration) time.Time)
	firstToken(o *sim.PDOutcome)
	finished(o *sim.PDOutcome)
}

// flusher posts entries a router reports to the trainer itself.
type flusher interface {
	flush(ctx context.Context) error
}

// observed are hooks with router's fleetObserver calls, when it is one,
// after them, and how to attach it to the fleet the hooks are for.
func observed(router sim.PDRouter, hooks sim.PDHooks, stamp func(time.Duration) time.Time) (sim.PDHooks, func(f *sim.PDFleet)) {
	ob, ok := router.(fleetObserver)
	if !ok {
		return hooks, func(*sim.PDFleet) {}
	}
	first, finish := hooks.OnFirstToken, hooks.OnFinish
	hooks.OnFirstToken = func(o *sim.PDOutcome) {
		if first != nil {
			first(o)
		}
		ob.firstToken(o)
	}
	hooks.OnFinish = func(o *sim.PDOutcome) {
		if finish != nil {
			finish(o)
		}
		ob.finished(o)
	}
	return hooks, func(f *sim.PDFleet) { ob.attach(f.Now, stamp) }
}

// live collects the error of what a router expected on the route it chose
// against what then happened, since the last report and over the run.
type live struct {
	expected                  map[int]estimate // by request ID
	ttft, tpot, transfer      []float64        // absolute percentage errors since the last report
	allTTFT, allTPOT, allXfer []float64
	points                    []TTFTPoint
}

func newLive() *live { return &live{expected: make(map[int]estimate)} }

func (lv *live) reset() { lv.ttft, lv.tpot, lv.transfer = lv.ttft[:0], lv.tpot[:0], lv.transfer[:0] }

// firstToken records o's TTFT error (against actualMs) and its transfer's.
func (lv *live) firstToken(o *sim.PDOutcome, actualMs float64) {
	e, ok := lv.expected[o.Request.ID]
	if !ok {
		return
	}
	a := ape(e.TTFTMs, actualMs)
	lv.ttft, lv.allTTFT = append(lv.ttft, a), append(lv.allTTFT, a)
	lv.points = append(lv.points, TTFTPoint{ExpectedMs: e.TTFTMs, ActualMs: ms(o.Decode.TTFT())})
	if x := ms(o.KVTransferTime()); x > 0 && e.TransferMs > 0 {
		a := ape(e.TransferMs, x)
		lv.transfer, lv.allXfer = append(lv.transfer, a), append(lv.allXfer, a)
	}
}

// finished records o's TPOT error against actualMs; expected TPOTs of 0
// (an oracle that looked ahead only to the first token) are not errors.
func (lv *live) finished(o *sim.PDOutcome, actualMs float64) {
	if e, ok := lv.expected[o.Request.ID]; ok && e.TPOTMs > 0 {
		a := ape(e.TPOTMs, actualMs)
		lv.tpot, lv.allTPOT = append(lv.tpot, a), append(lv.allTPOT, a)
	}
}

// mape is the run's live error per target, NaN where there was none.
func (lv *live) mape() (*TargetPair, float64) {
	return &TargetPair{TTFT: mean(lv.allTTFT), TPOT: mean(lv.allTPOT)}, mean(lv.allXfer)
}

// learner runs fleets whose router predicts from and reports to the
// service, and drives the service's timers in simulated time.
type learner struct {
	opts   *Options
	cfg    sim.PDConfig
	svc    *Service
	client *Client
	rep    *Reporter
	probe  *Probe // nil: no probe (the P/D demo)
	start  time.Time
	res    *Result

	offset time.Duration // simulated time of earlier runs, so timestamps keep rising
}

// learn routes reqs with p's router, reporting every entry, flushing every
// FlushEvery and retraining every RetrainEvery of simulated time.
func (l *learner) learn(ctx context.Context, phase string, reqs []*sim.Request, p learning) (PolicyResult, error) {
	lv := newLive()
	stamp := func(t time.Duration) time.Time { return l.opts.Epoch.Add(l.offset + t) }
	hooks, attach := observed(p.router, sim.PDHooks{
		OnDispatch: func(o *sim.PDOutcome, _, _ []sim.PodState) {
			if e, ok := p.estimate(o); ok {
				lv.expected[o.Request.ID] = e
			}
		},
		OnFirstToken: func(o *sim.PDOutcome) {
			actual := ms(o.Decode.TTFT())
			if p.ttftEntry != nil {
				e := p.ttftEntry(o, stamp(o.Decode.FirstToken))
				l.rep.Add(e)
				if p.liveAgainstLabel {
					actual = e.ActualTTFTMs
				}
			}
			lv.firstToken(o, actual)
		},
		OnFinish: func(o *sim.PDOutcome) {
			if p.tpotEntry == nil {
				return
			}
			e, ok := p.tpotEntry(o, stamp(o.Decode.Finish))
			if !ok {
				return
			}
			l.rep.Add(e)
			lv.finished(o, e.ActualTPOTMs)
		},
	}, stamp)
	f, err := sim.NewPDFleet(l.cfg, p.router, hooks)
	if err != nil {
		return PolicyResult{}, fmt.Errorf("demo %s: %w", phase, err)
	}
	attach(f)
	if fl, ok := p.router.(flusher); ok {
		l.rep.upstream = fl
		defer func() { l.rep.upstream = nil }()
	}
	if err := f.Submit(reqs...); err != nil {
		return PolicyResult{}, fmt.Errorf("demo %s: %w", phase, err)
	}
	report := func(done bool) error {
		info, err := l.rep.retrain(ctx, l.svc)
		if err != nil {
			return fmt.Errorf("demo %s: %w", phase, err)
		}
		probe := TargetPair{TTFT: math.NaN(), TPOT: math.NaN()}
		if l.probe != nil {
			if probe, err = l.probe.Measure(ctx, l.client); err != nil {
				return fmt.Errorf("demo %s: %w", phase, err)
			}
		}
		st := p.stats()
		pr := Progress{
			Phase: phase, Learning: true, SimTime: f.Now(), Done: done,
			Dispatched: st.Routed + st.NotReady + st.Failed, Completed: completed(f),
			Samples: l.rep.Sent(), Bundle: info.Version,
			HoldoutMAPE: TargetPair{TTFT: mapeOrNaN(info.TTFT), TPOT: mapeOrNaN(info.TPOT)},
			ProbeMAPE:   probe,
			LiveMAPE:    TargetPair{TTFT: mean(lv.ttft), TPOT: mean(lv.tpot)},
		}
		if p.transfers {
			pr.TransferMAPE = &TransferMAPE{Holdout: finite(mapeOrNaN(info.Transfer)), Live: finite(mean(lv.transfer))}
		}
		lv.reset()
		pr.Wall = time.Since(l.start)
		l.res.History = append(l.res.History, pr)
		l.progress(pr)
		return nil
	}
	setTime := func(t time.Duration) { l.svc.SetTime(stamp(t)) }
	if err := l.rep.drive(ctx, phase, f, l.opts.FlushEvery, l.opts.RetrainEvery, setTime, report); err != nil {
		return PolicyResult{}, err
	}
	l.offset += f.Now() + time.Second
	pr := policyResult(phase, f, l.opts.SLO)
	st := p.stats()
	pr.Router = &st
	pr.LiveMAPE, pr.LiveTransferMAPE = lv.mape()
	pr.Points = lv.points
	if p.finish != nil {
		p.finish(&pr)
	}
	return pr, nil
}

func (l *learner) progress(p Progress) { p.send(l.opts.Progress, l.opts.Rate, l.start) }

// runFixed runs reqs under a router that never calls the service (a
// heuristic, or an oracle whose foresight, when given, is read at every
// dispatch and compared with what happened), reporting its end.
func (l *learner) runFixed(ctx context.Context, name string, reqs []*sim.Request, router sim.PDRouter, foresight func() (estimate, bool)) (PolicyResult, error) {
	lv := newLive()
	var hooks sim.PDHooks
	stamp := func(t time.Duration) time.Time { return l.opts.Epoch.Add(l.offset + t) }
	if foresight != nil {
		hooks = sim.PDHooks{
			OnDispatch: func(o *sim.PDOutcome, _, _ []sim.PodState) {
				if e, ok := foresight(); ok {
					lv.expected[o.Request.ID] = e
				}
			},
			OnFirstToken: func(o *sim.PDOutcome) { lv.firstToken(o, ms(o.Decode.TTFT())) },
			OnFinish: func(o *sim.PDOutcome) {
				if o.Decode.Done && o.Request.OutputTokens > 1 {
					lv.finished(o, ms(o.Decode.TPOT()))
				}
			},
		}
	}
	start := time.Now()
	hooks, attach := observed(router, hooks, stamp)
	f, err := sim.NewPDFleet(l.cfg, router, hooks)
	if err == nil {
		attach(f)
		if err = f.Submit(reqs...); err == nil {
			err = f.Run(ctx)
		}
	}
	if err != nil {
		return PolicyResult{}, fmt.Errorf("demo %s: %w", name, err)
	}
	pr := policyResult(name, f, l.opts.SLO)
	if foresight != nil {
		pr.LiveMAPE, pr.LiveTransferMAPE = lv.mape()
		pr.Points = lv.points
		st := f.LookaheadStats()
		pr.Lookahead = &st
		if st.Decisions > 0 {
			pr.MsPerDecision = float64(time.Since(start).Microseconds()) / 1e3 / float64(st.Decisions)
		}
	}
	l.progress(Progress{Phase: name, SimTime: pr.SimTime, Done: true, Dispatched: len(reqs),
		Completed: pr.Completed, TTFTP95Ms: pr.TTFTP95Ms})
	return pr, nil
}

// policyResult is a finished run's figures.
func policyResult(name string, f *sim.PDFleet, slo SLO) PolicyResult {
	return summaryResult(name, f.Summary(), f.Outcomes(), f.Now(), slo)
}

// summaryResult is the figures of a run that ended at simTime with
// summary s and outcomes outs.
func summaryResult(name string, s sim.PDSummary, outs []*sim.PDOutcome, simTime time.Duration, slo SLO) PolicyResult {
	pr := PolicyResult{
		Name: name, Summary: s, SimTime: simTime, Requests: s.Requests, Completed: s.Completed,
		TTFTP50Ms: s.TTFT.P50, TTFTP95Ms: s.TTFT.P95, TPOTP50Ms: s.TPOT.P50, TPOTP95Ms: s.TPOT.P95,
		E2EP50Ms: s.E2E.P50, E2EP95Ms: s.E2E.P95, PrefixHitRate: s.PrefixHitRate,
		KVTransferP50Ms: s.KVTransfer.P50, KVTransferP95Ms: s.KVTransfer.P95,
		SplitRate: s.SplitRate, PrefillFailures: s.PrefillFailed, KVMovedGiB: s.KVTransferMiB / 1024,
		Links: make(map[string]int),
	}
	met := 0
	for _, o := range outs {
		if x := o.Transfer; x != nil && x.End != 0 {
			pr.Links[x.Class.String()]++
		}
		if slo.Met(o.Decode) {
			met++
		}
	}
	if slo.Set() && len(outs) > 0 {
		a := float64(met) / float64(len(outs))
		pr.SLOAttainment = &a
	}
	return pr
}

func completed(f *sim.PDFleet) int {
	n := 0
	for _, o := range f.Outcomes() {
		if o.Decode.Done {
			n++
		}
	}
	return n
}

func mapeOrNaN(t TargetInfo) float64 {
	if !t.Ready || t.Holdout.Rows == 0 {
		return math.NaN()
	}
	return t.Holdout.MAPE
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func ape(predicted, actual float64) float64 { return 100 * math.Abs(predicted-actual) / actual }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
