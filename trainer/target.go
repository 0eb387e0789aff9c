package trainer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
)

// A target is one latency the trainer learns, one of features.Targets: a
// stream of the store and a model of the bundle. Every target lives the
// same life, whatever its model, and lifecycle is that life, written once:
// a retrain asks whether the target is due (samples changed since the last
// fit, and enough of them), fits a candidate on a snapshot of its stream,
// has the publication gate judge the candidate against the model in
// service, installs it into the bundle, and rolls it back when the bundle
// is not published; samples that arrive are scored against the model in
// service (live error). What differs between targets is only their model:
// a models instance says how one is fitted, what it predicts on the gate's
// evidence and on arriving samples, and where it sits in a bundle.
//
// A new target is one new constant in features.Targets, one new model in
// model.Bundle, and one new models instance in newTargets; nothing of the
// lifecycle, the gate, the live tracking or the retrain loop changes.
type target interface {
	id() features.Target
	// firstModels reports whether the target's first model is fitted the
	// moment it has samples, a line first then its trees (coldstart.go).
	firstModels() bool
	// has reports whether b holds a model of the target; upgradable
	// whether that model is a line the next full fit gives trees.
	has(b *model.Bundle) bool
	upgradable(b *model.Bundle) bool

	// One retrain (Trainer.retrain) calls these in order, from one
	// goroutine per target: fit, then, when any target fitted a
	// candidate, install, gate and settle.
	fit(ctx context.Context, p pass, prev *model.Bundle) error
	fitted() bool
	install(next *model.Bundle)
	gate(next, prev *model.Bundle) (refused bool)
	changed(next, prev *model.Bundle) bool
	settle(next *model.Bundle, published bool, err error)

	// observe scores arriving samples against b's model; it reports
	// whether the live error is well above the model's holdout error.
	observe(samples []features.Sample, b *model.Bundle) (drifting bool)
	report() TargetStatus
	resume(b *model.Bundle)
	afterDrift()
	// observeBundle exports b's model's figures (metrics).
	observeBundle(b *model.Bundle)
}

// models is what one target's model is: how it is fitted on a snapshot of
// the target's stream, what it predicts on samples and probes for the
// gate, how arriving samples are scored against it, and where it sits in
// a bundle. M is the model's type, a pointer; its zero value is "no
// model".
type models[M comparable] interface {
	// of is b's model (the zero M for a nil b or none); put sets it.
	of(b *model.Bundle) M
	put(b *model.Bundle, m M)
	// fit fits a candidate on the snapshot in job. A model beside an
	// error is usable but degraded (a line where the trees failed);
	// errWaiting marks a fit that cannot succeed on these samples, a wait
	// rather than a failure.
	fit(ctx context.Context, job fitJob[M]) (M, error)
	// keepDegraded reports whether a degraded candidate may replace
	// served under pass p.
	keepDegraded(served M, p pass) bool
	facts(m M) modelFacts
	setGeneration(m M, gen uint64)
	// predict predicts samples that carry the target's label: pred and
	// actual per sample, actual 0 where m cannot predict one (the gate
	// and Measure skip it). probes are the further points the gate checks
	// m's predictions at.
	predict(m M, samples []features.Sample) (pred, actual []float64)
	// quantiles is predict with m's q quantile beside each prediction,
	// the bound the service serves.
	quantiles(m M, samples []features.Sample, q float64) (pred, actual, quant []float64)
	probes(m M) []gateProbe
	// score scores arriving samples against m into live, under live's
	// lock (changed: m was not in service at the last call), and reports
	// whether the live error is well above m's holdout error and an early
	// retrain is wanted.
	score(live *targetLive, m M, changed bool, samples []features.Sample) (drifting bool)
	// resume takes what a loaded model says of the target's state
	// (a configuration choice); afterDrift asks the target to choose its
	// configuration again at its next fit.
	resume(m M)
	afterDrift()
	// upgradable reports whether a full fit would give m trees.
	upgradable(m M) bool
	// observe exports figures of a newly published model beyond
	// modelFacts (the transfer law's per-class figures).
	observe(metrics *Metrics, m M)
}

// fitJob is one fit's inputs: the snapshot of the target's stream, the
// model in service, and how the retrain runs.
type fitJob[M comparable] struct {
	train, holdout []features.Sample
	served         M
	gen            uint64
	pass           pass
	live           *targetLive // the target's live state; lock it to read
}

// modelFacts are what the lifecycle reads of any model: for the gate, the
// status, the history and the metrics.
type modelFacts struct {
	kind            model.Kind // "" for a model of no Kind
	trainSamples    int
	storeGeneration uint64
	holdout         model.Quality
	holdoutLinear   *model.Quality // its line alone, for a model with one
	coverage        *model.QuantileCoverage
}

// errWaiting marks a fit that cannot succeed on the samples it was given
// (a transfer law without enough samples of any one link class): the
// target waits for more, and that is not a failure.
var errWaiting = errors.New("waiting for samples")

// lifecycle is one target's life: its status, the evidence its newest
// candidate was measured on, its live window, and the candidate a retrain
// is publishing. A retrain's calls (fit to settle) come one at a time
// (Trainer.retrainMu); observe, report and the status they share are
// guarded by mu.
type lifecycle[M comparable] struct {
	tg     features.Target
	models models[M]
	t      *Trainer
	// beforeBurst is the model in service when the bursts going on began
	// (gate), the zero M when none is; driftSince the start of the newest
	// drift judged. Only gate touches them, one retrain at a time.
	beforeBurst M
	driftSince  time.Time
	how         targetOptions

	mu     sync.Mutex
	status TargetStatus
	// tried says that a fit of store generation triedGen gave its answer:
	// a candidate (in service or refused by the gate) or a wait. The same
	// samples are not fitted again for the same answer; a pass that
	// upgrades does fit them again.
	tried    bool
	triedGen uint64
	// evidence is what the newest candidate was measured on.
	evidence gateEvidence

	// candidate is the newest fit's model while a retrain publishes it,
	// before what the status and tried said when that retrain began, for
	// its rollback. Only the retrain touches them.
	candidate M
	before    lifecycleState

	recent recentSamples
	live   targetLive
	// liveModel is the model live rows were last scored against; guarded
	// by live.mu.
	liveModel M
}

// lifecycleState is what a rollback restores.
type lifecycleState struct {
	status   TargetStatus
	tried    bool
	triedGen uint64
}

// targetOptions say how a target's life differs from the others'.
type targetOptions struct {
	// firstModels: the target's first model is fitted the moment it has
	// samples, a line then its trees (coldstart.go), because until then
	// predictors answer 503 for it.
	firstModels bool
	// liveGate: the gate also compares candidates on the newest live
	// samples (GateConfig.RecentRows), not on the holdout alone.
	liveGate bool
}

func newLifecycle[M comparable](t *Trainer, tg features.Target, m models[M], how targetOptions) *lifecycle[M] {
	l := &lifecycle[M]{tg: tg, models: m, t: t, how: how}
	if how.liveGate {
		l.recent.size, l.recent.spread = t.cfg.Gate.RecentRows, t.cfg.Gate.RecentSpread
	}
	l.live = newTargetLive(t.drift.cfg.Window)
	return l
}

func (l *lifecycle[M]) id() features.Target             { return l.tg }
func (l *lifecycle[M]) firstModels() bool               { return l.how.firstModels }
func (l *lifecycle[M]) has(b *model.Bundle) bool        { return !l.none(l.models.of(b)) }
func (l *lifecycle[M]) upgradable(b *model.Bundle) bool { return l.models.upgradable(l.models.of(b)) }
func (l *lifecycle[M]) fitted() bool                    { return !l.none(l.candidate) }
func (l *lifecycle[M]) none(m M) bool {
	var zero M
	return m == zero
}

func (l *lifecycle[M]) setStatus(f func(*TargetStatus)) {
	l.mu.Lock()
	f(&l.status)
	l.mu.Unlock()
}

// fit fits a candidate when the target is due under p, and leaves it for
// install; none when the target is not due or the fit failed (the error).
func (l *lifecycle[M]) fit(ctx context.Context, p pass, prev *model.Bundle) error {
	var zero M
	l.candidate = zero
	l.mu.Lock()
	l.before = lifecycleState{status: l.status, tried: l.tried, triedGen: l.triedGen}
	l.mu.Unlock()
	if !p.includes(l.tg) {
		return nil
	}
	job := fitJob[M]{served: l.models.of(prev), gen: l.t.db.Generation(l.tg), pass: p, live: &l.live}
	if !l.due(job) {
		return nil
	}
	m, err := l.attempt(ctx, job)
	if l.none(m) || (err != nil && !l.models.keepDegraded(job.served, p)) {
		if err == nil || errors.Is(err, errWaiting) {
			return nil
		}
		return fmt.Errorf("%s: %w", l.tg, err)
	}
	l.models.setGeneration(m, job.gen)
	l.candidate = m
	l.mu.Lock()
	l.tried, l.triedGen = true, job.gen
	l.status.LastSuccess = l.status.LastAttempt
	l.status.TrainedOnGen = job.gen
	l.status.ServingLinear = l.models.facts(m).kind == model.KindLinear
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w", l.tg, err)
	}
	return nil
}

// due reports whether the target is to be fitted: its samples changed
// since the last fit gave its answer (an upgrade fits them again), and it
// has enough of them (Config.MinSamplesFresh for a first model,
// retrainNeeds training samples after). It says why not in the status.
func (l *lifecycle[M]) due(job fitJob[M]) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tried && l.triedGen == job.gen && !job.pass.upgrade {
		l.status.LastSkipReason = "no new samples"
		return false
	}
	fresh := l.none(job.served) || job.pass.upgrade
	var servedOn int
	if !l.none(job.served) {
		servedOn = l.models.facts(job.served).trainSamples
	}
	if have, need, what := l.t.samplesFor(l.tg, fresh, servedOn); have < need {
		l.status.WaitingFor = need - have
		l.status.LastSkipReason = fmt.Sprintf("%d %s, need %d", have, what, need)
		return false
	}
	return true
}

// attempt fits a model on a snapshot of the target's stream, keeps what it
// was measured on for the gate, and records the run: in the metrics, the
// history and the status. A fit that found too few samples (errWaiting)
// is a wait, recorded as one.
func (l *lifecycle[M]) attempt(ctx context.Context, job fitJob[M]) (M, error) {
	cfg := &l.t.cfg
	start := cfg.Now()
	var m M
	train, holdout, err := l.t.db.SnapshotNewest(ctx, l.tg, cfg.MaxTrainRows)
	if err != nil {
		err = fmt.Errorf("snapshot: %w", err)
	} else {
		l.mu.Lock()
		l.evidence = gateEvidence{holdout: holdout, labels: labelsOf(train, l.tg)}
		l.mu.Unlock()
		job.train, job.holdout = train, holdout
		m, err = l.models.fit(ctx, job)
	}
	dur := time.Since(start)
	if errors.Is(err, errWaiting) {
		l.mu.Lock()
		l.status.WaitingFor, l.status.LastSkipReason = 1, err.Error()
		l.tried, l.triedGen = true, job.gen
		l.mu.Unlock()
		return m, err
	}
	cfg.Metrics.observeRun(l.tg, dur, err)
	l.t.history.add(l.record(start, dur, m, err))
	if err != nil {
		cfg.Logger.Warn("training failed", "target", l.tg, "error", err, "seconds", dur.Seconds())
	}
	l.setStatus(func(s *TargetStatus) {
		s.LastAttempt = start.UTC()
		s.LastDurationS = dur.Seconds()
		s.Runs++
		s.WaitingFor = 0
		s.LastSkipReason = ""
		if err != nil {
			s.Failures++
			s.LastError = err.Error()
			s.LastErrorAt = start.UTC()
		}
	})
	return m, err
}

// record is one fit's line in the history.
func (l *lifecycle[M]) record(start time.Time, d time.Duration, m M, err error) RetrainRecord {
	r := RetrainRecord{Target: l.tg, Start: start.UTC(), Duration: d}
	if err != nil {
		r.Err = err.Error()
	}
	if !l.none(m) {
		f := l.models.facts(m)
		r.Fitted, r.Kind, r.TrainRows, r.HoldoutMAPE = true, f.kind, f.trainSamples, f.holdout.MAPE
		if f.holdoutLinear != nil {
			r.LinearMAPE = f.holdoutLinear.MAPE
		}
	}
	if live := l.liveStatus(); live != nil && live.Model != nil {
		r.LiveMAPE, r.HasLive = live.Model.MAPE, true
	}
	return r
}

// install puts the candidate, if any, into the bundle to publish.
func (l *lifecycle[M]) install(next *model.Bundle) {
	if l.fitted() {
		l.models.put(next, l.candidate)
	}
}

// changed reports whether next's model differs from prev's.
func (l *lifecycle[M]) changed(next, prev *model.Bundle) bool {
	return l.models.of(next) != l.models.of(prev)
}

// gate judges next's model when it is a new one, puts prev's back in its
// place when the gate refuses it, and records the verdict.
func (l *lifecycle[M]) gate(next, prev *model.Bundle) (refused bool) {
	cand, served := l.models.of(next), l.models.of(prev)
	if l.none(cand) || cand == served {
		return false
	}
	cfg := &l.t.cfg
	l.mu.Lock()
	ev := l.evidence
	l.mu.Unlock()
	ev.recent = l.recent.get()
	l.live.mu.Lock()
	st, burstAt, driftAt := l.t.drift.shiftOf(&l.live), l.live.lastBurst, l.live.lastDrift
	l.live.mu.Unlock()
	// The newest drift judged is kept across the models that follow it
	// (each starts its own judgment afresh): the held-out rows before it
	// would hold back every step of following it, until they are evicted.
	if st.Judgment == ShiftDrift {
		l.driftSince = st.Since
	}
	ev.driftSince = l.driftSince
	ev.quantile = l.t.drift.cfg.Quantile
	ev.boundsMayWiden = boundsMayWiden(l.t.drift.cfg, driftAt, cfg.Now())
	// The model in service when a burst began is kept while bursts go on
	// (within a ShiftSpan of the newest), across the models published
	// meanwhile; a drift, a followed change, lets it go.
	var zero M
	switch {
	case st.Judgment == ShiftDrift || burstAt.IsZero() || cfg.Now().Sub(burstAt) > l.t.drift.cfg.ShiftSpan:
		l.beforeBurst = zero
	case l.beforeBurst == zero:
		l.beforeBurst = served
	}
	v := judge(cfg.Gate, l.models, cand, served, l.beforeBurst, l.tg, ev)
	v.At = cfg.Now().UTC()
	v.Forced = !v.Passed && cfg.Gate.Force
	v.Published = v.Passed || v.Forced
	if !v.Passed {
		cfg.Metrics.gateRejected(l.tg, v.Reason)
		cfg.Logger.Warn("publication gate refused a candidate model", "target", l.tg, "reason", v.Reason,
			"detail", v.Detail, "forced", v.Forced)
	}
	if !v.Published {
		l.models.put(next, served)
	}
	l.setStatus(func(s *TargetStatus) {
		s.Gate = &v
		if !v.Passed {
			s.GateRejections++
			s.Rejected = &v
		}
	})
	return !v.Published
}

// settle ends a retrain's publication for this target. A candidate the
// gate refused leaves the status of the model in service, but its
// generation, so the same samples are not fitted again for the same
// verdict; a refusal is not a failure, and Status says why (GateVerdict).
// When the bundle could not be published (err), nothing new is in
// service: the status says so, and the last success, generation and kind
// are as they were, so the next cycle trains again even if no sample
// arrives (none will while the disk is full).
func (l *lifecycle[M]) settle(next *model.Bundle, published bool, err error) {
	if !l.fitted() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s, b := &l.status, l.before.status
	switch {
	case err != nil:
		s.LastSuccess, s.TrainedOnGen, s.ServingLinear = b.LastSuccess, b.TrainedOnGen, b.ServingLinear
		l.tried, l.triedGen = l.before.tried, l.before.triedGen
		s.Failures++
		s.LastError, s.LastErrorAt = err.Error(), l.t.cfg.Now().UTC()
	case l.models.of(next) != l.candidate:
		s.LastSuccess, s.ServingLinear = b.LastSuccess, b.ServingLinear
	case published:
		l.t.cfg.Metrics.observeQuality(l.tg, l.models.facts(l.candidate))
		l.models.observe(l.t.cfg.Metrics, l.candidate)
	}
	var zero M
	l.candidate = zero
}

// observeBundle exports the figures of b's model.
func (l *lifecycle[M]) observeBundle(b *model.Bundle) {
	if m := l.models.of(b); !l.none(m) {
		l.t.cfg.Metrics.observeQuality(l.tg, l.models.facts(m))
		l.models.observe(l.t.cfg.Metrics, m)
	}
}

// resume takes a loaded bundle's model as the one trained last.
func (l *lifecycle[M]) resume(b *model.Bundle) {
	m := l.models.of(b)
	if l.none(m) {
		return
	}
	f := l.models.facts(m)
	l.mu.Lock()
	l.status.TrainedOnGen = f.storeGeneration
	l.status.ServingLinear = f.kind == model.KindLinear
	l.tried, l.triedGen = true, f.storeGeneration
	l.mu.Unlock()
	l.models.resume(m)
}

// observe keeps the labelled arrivals for the gate and scores them
// against b's model.
func (l *lifecycle[M]) observe(samples []features.Sample, b *model.Bundle) bool {
	l.recent.add(samples, l.tg, l.t.drift.now())
	m := l.models.of(b)
	l.live.mu.Lock()
	defer l.live.mu.Unlock()
	changed := m != l.liveModel
	if changed {
		l.liveModel = m
		var holdout model.Quality
		if !l.none(m) {
			holdout = l.models.facts(m).holdout
		}
		l.live.modelChanged(holdout, !l.none(m))
	}
	drifting := l.models.score(&l.live, m, changed, samples)
	if drifting {
		l.t.drift.request(l.tg, &l.live)
	}
	return drifting
}

// afterDrift asks the target to choose its configuration again.
func (l *lifecycle[M]) afterDrift() { l.models.afterDrift() }

func (l *lifecycle[M]) liveStatus() *LiveStatus {
	l.live.mu.Lock()
	defer l.live.mu.Unlock()
	return l.t.drift.status(&l.live)
}

// report is the target's status, with its live figures.
func (l *lifecycle[M]) report() TargetStatus {
	live := l.liveStatus()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.status
	s.Live = live
	return s
}

// boundsMayWiden says whether a candidate's bounds may widen past those of
// the model in service when a burst began (the gate's compareBounds): for
// a ShiftSpan after a drift judged at lastDrift, a rise against the models
// that follow it is the drift's (drift.go), and their bounds widen with
// it; and always when bursts are trusted (DriftConfig.TrustBursts), as a
// replay trusts its recording. A replay's rows arrive many minutes' worth
// to the trainer's minute, so no rise in it lasts the minutes a drift
// needs: the bimodal trace's ramp to loaded pods was judged a burst, every
// TTFT model fitted on it was refused for bounds wider than the first
// young model's, and its prequential TTFT went from 9.47% to 18.89%.
func boundsMayWiden(cfg DriftConfig, lastDrift, now time.Time) bool {
	return cfg.TrustBursts || (!lastDrift.IsZero() && now.Sub(lastDrift) <= cfg.ShiftSpan)
}
