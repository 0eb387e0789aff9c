package trainer

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer/fit"
)

// podModels are the models of a target predicted per pod from a row
// (features.PodTargets: TTFT, TPOT): a line and trees on the row's
// features (Fit), in the configuration the target chose (chooser), their
// quantiles calibrated on live errors and served at levels the arriving
// samples move (drift.go).
type podModels struct {
	tg     features.Target
	schema features.Schema
	t      *Trainer
	choose *chooser
	// places is the store's scheme: the place a live row comes from, in
	// a shift's evidence (shift.go). The zero Scheme puts every row in one.
	places store.Scheme
}

func (p *podModels) of(b *model.Bundle) *model.TargetModel     { return b.Target(p.tg) }
func (p *podModels) put(b *model.Bundle, m *model.TargetModel) { b.SetTarget(p.tg, m) }
func (p *podModels) setGeneration(m *model.TargetModel, gen uint64) {
	m.StoreGeneration = gen
}
func (p *podModels) resume(m *model.TargetModel)          { p.choose.resume(m) }
func (p *podModels) afterDrift()                          { p.choose.afterDrift() }
func (p *podModels) observe(*Metrics, *model.TargetModel) {}

func (p *podModels) facts(m *model.TargetModel) modelFacts {
	return modelFacts{kind: m.Kind, trainSamples: m.TrainSamples, storeGeneration: m.StoreGeneration,
		holdout: m.Holdout, holdoutLinear: &m.HoldoutLinear, coverage: m.HoldoutCoverage}
}

// keepDegraded: when the trees failed and a tree model is in service, that
// one stays rather than being downgraded to a line; nor is a line
// published again in place of the line an upgrade was to give trees.
func (p *podModels) keepDegraded(served *model.TargetModel, ps pass) bool {
	return served == nil || (served.Kind == model.KindLinear && !ps.upgrade)
}

// upgradable reports whether a full fit would give m, a line, trees:
// xgboost is there, the configured kind has trees, and m was trained on
// enough rows for them.
func (p *podModels) upgradable(m *model.TargetModel) bool {
	t := p.t
	return m != nil && m.Kind == model.KindLinear && t.xgbErr == nil && t.cfg.Fit.XGBoost != nil &&
		t.cfg.Fit.Kind != model.KindLinear && m.TrainSamples >= t.cfg.Fit.MinTreeRows
}

// fit fits the target's next model: the configuration chosen, the live
// window's forward samples and levels, the spreads of the model in
// service.
func (p *podModels) fit(ctx context.Context, job fitJob[*model.TargetModel]) (*model.TargetModel, error) {
	t := p.t
	opts := t.fitConfig(job.served)
	d := t.drift
	in := fit.Inputs{Quantile: d.cfg.Quantile, Previous: job.served}
	switch {
	case job.pass.linearOnly:
		opts.XGBoost = nil
	case job.pass.upgrade && opts.XGBoost != nil:
		x := *opts.XGBoost
		x.Nice, x.Idle = 0, false // see Trainer.retrain
		opts.XGBoost = &x
		opts.CrossFitFolds = firstTreesFolds
		in.CarryOnly = true
	}
	job.live.mu.Lock()
	in.Forward, _ = d.forwardSamples(job.live)
	in.Levels = d.levelAdjustment(job.live)
	in.OutOfRangeLevels = d.outOfRangeLevelAdjustment(job.live)
	job.live.mu.Unlock()
	train := fit.BuildDataset(p.schema, p.tg, job.train)
	// A first model's passes are for speed: they keep the choice in force
	// (the first candidate before any) and make none. A choice costs a
	// full store about 0.9 CPU-s beyond the fit, a measurement of the
	// extrapolation with trees about 0.7: not both in one retrain, which
	// would be over the 2 s budget (docs/PERFORMANCE.md). A retrain that
	// chooses carries the spreads in service; the first retrain after
	// loading a bundle without spreads (an older trainer's), which has
	// none to carry, measures and leaves the choice to the next.
	choose := !job.pass.first()
	if prev := job.served; choose && opts.Support.Folds > 0 && prev != nil && prev == t.loaded.Target(p.tg) &&
		!fit.CarriesSpreads(prev) {
		choose = false
	}
	before := p.choose.choice()
	opts, sel, err := p.choose.tune(ctx, p.schema, train, opts, choose)
	if err != nil {
		return nil, err
	}
	if p.choose.choice() != before {
		in.CarryOnly = true
	}
	m, err := fit.Model(ctx, p.schema, train, fit.BuildDataset(p.schema, p.tg, job.holdout), opts, in)
	if m != nil {
		m.Selection = sel
	}
	return m, err
}

// firstTreesFolds is the cross-fit of a first model's trees: its
// calibration's out-of-fold residuals come from 2 folds, not
// fit.Options.CrossFitFolds, so the trees cost 3 xgboost runs per target
// instead of 6 and are in service in about half the time (1.9-2.4 s with 5
// folds at load average 17 on two cores, where llm-d-router's integration
// test reads them after about 2.5 s). Models fitted on half the rows err
// more than the model itself: its intervals are a little wide until the
// next retrain calibrates it on 5.
const firstTreesFolds = 2

// idleBackoff is how long xgboost runs stay out of the idle class after
// one was starved there: on a machine that stays busy, each idle attempt
// costs a wasted grace period, so one a minute at most.
const idleBackoff = time.Minute

// fitConfig is the fit configuration of the model to replace served. Its
// xgboost runs go to the idle class only once the target has trees in
// service (until then there is nothing to serve, or only the line of a
// first model whose trees are awaited; on a busy machine an idle-class run
// would first wait out its grace for nothing) and not within idleBackoff
// of a starved run.
func (t *Trainer) fitConfig(served *model.TargetModel) fit.Options {
	cfg := t.cfg.Fit
	if t.xgbErr != nil {
		cfg.XGBoost = nil
	}
	if cfg.XGBoost == nil || !cfg.XGBoost.Idle {
		return cfg
	}
	x := *cfg.XGBoost
	cfg.XGBoost = &x
	if served == nil || served.Trees == nil || t.cfg.Now().UnixNano() < t.idleAfter.Load() {
		x.Idle = false
		return cfg
	}
	x.Starved = func() { t.idleAfter.Store(t.cfg.Now().Add(idleBackoff).UnixNano()) }
	return cfg
}

// predict is m's central prediction for each sample, and its label.
func (p *podModels) predict(m *model.TargetModel, samples []features.Sample) (pred, actual []float64) {
	pred, actual = make([]float64, len(samples)), make([]float64, len(samples))
	var buf []float64
	for i := range samples {
		buf = m.Schema().Build(&samples[i].Row, buf[:0])
		pred[i] = m.Predict(buf)
		actual[i], _ = samples[i].Label(p.tg)
	}
	return pred, actual
}

// quantiles is predict with m's q quantile of each sample.
func (p *podModels) quantiles(m *model.TargetModel, samples []features.Sample, q float64) (pred, actual, quant []float64) {
	pred, actual, quant = make([]float64, len(samples)), make([]float64, len(samples)), make([]float64, len(samples))
	var buf []float64
	for i := range samples {
		buf = m.Schema().Build(&samples[i].Row, buf[:0])
		pred[i] = m.Predict(buf)
		quant[i] = m.Quantile(buf, pred[i], q)
		actual[i], _ = samples[i].Label(p.tg)
	}
	return pred, actual, quant
}

// probes are points spanning m's training ranges (probeGrid).
func (p *podModels) probes(m *model.TargetModel) []gateProbe {
	grid := probeGrid(m.Ranges)
	out := make([]gateProbe, len(grid))
	for i, x := range grid {
		out[i] = gateProbe{where: fmt.Sprintf("at probe %v", x), ms: m.Predict(x), ok: true}
	}
	return out
}

// score records arriving samples against m (nil before the target's first
// model): the served predictions the router reported, and m's own, whose
// errors also move the quantile levels and are the next fit's forward
// samples. It reports whether the live error is well above m's holdout
// error (DriftConfig).
func (p *podModels) score(tl *targetLive, m *model.TargetModel, changed bool, samples []features.Sample) bool {
	d, t := p.t.drift, p.tg
	if changed && m != nil {
		if tl.level == 0 {
			tl.level, tl.levelSamples = d.resumedLevel(m.Calibration.Adjustment)
		}
		if a := m.Calibration.OutOfRange; tl.outLevel == 0 && a != nil && a.Quantile == d.cfg.Quantile {
			tl.outLevel, tl.outLevelSamples = d.resumedLevel(a)
		}
	}
	// Of a batch larger than the window only its last Window samples
	// stay in it, so the model is evaluated on those alone and the
	// earlier ones are only counted: at 1,000-sample uploads this
	// spares four fifths of the tree walks the ingest path paid for.
	skip := 0
	if m != nil {
		skip = max(countLabelled(samples, t)-d.cfg.Window, 0)
	}
	d.metrics.observeLiveN(t, "model", skip)
	tl.shift.beginUpload()
	var buf [64]float64
	for i := range samples {
		actual, ok := samples[i].Label(t)
		if !ok {
			continue
		}
		if pred, ok := samples[i].Predicted(t); ok {
			tl.served.add(pred, actual, false)
			d.metrics.observeLive(t, "served")
		}
		if m == nil {
			continue
		}
		if skip > 0 {
			skip--
			tl.model.count()
			continue
		}
		x := m.Schema().Build(&samples[i].Row, buf[:0])
		central := m.Predict(x)
		covered := actual <= m.Quantile(x, central, d.cfg.Quantile)
		d.scoreModel(tl, central, actual, covered, p.places.Index(&samples[i].Row))
		if m.OutOfRange(x) == 0 {
			d.adaptLevel(tl, m, math.Log(actual/central))
		} else {
			d.adaptOutOfRangeLevel(tl, m, x, central, actual)
		}
		d.metrics.observeLive(t, "model")
		tl.pushForward(forwardSample(m, x, central, actual), d.now().Unix()/60, d.cfg.Window)
	}
	d.metrics.observeLiveSummary(t, tl, d.cfg.Quantile)
	return m != nil && d.judge(t, tl)
}
