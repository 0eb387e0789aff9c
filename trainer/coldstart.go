package trainer

import (
	"context"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
)

// A target's first model is trained the moment the target has
// MinSamplesFresh samples, not on the next tick, and in two steps: a
// linear model first, fitted and published in milliseconds, then, when
// trees are possible, the full model, published when its xgboost runs are
// done. Until then predictors answer 503 (there is no model), so every
// second before the first model is a second of routing without
// predictions; a line from the first samples is already far better than
// none. Both steps publish through Retrain's path (publish), and later
// models keep the cadence and thresholds of Config.

// wakeForFirstModels wakes Run when samples were stored while some target
// of b has no model. It never blocks: one pending wake-up is enough.
func (t *Trainer) wakeForFirstModels(b *model.Bundle) {
	if b.Target(features.TTFT) != nil && b.Target(features.TPOT) != nil {
		return
	}
	select {
	case t.arrived <- struct{}{}:
	default:
	}
}

// firstModelsDue returns the targets without a model that have enough
// training samples for one.
func (t *Trainer) firstModelsDue() (due [2]bool, any bool) {
	var cur *model.Bundle
	if pub := t.current.Load(); pub != nil {
		cur = pub.Bundle
	}
	for _, tg := range features.Targets {
		if have, need := t.samplesFor(tg, true); cur.Target(tg) == nil && have >= need {
			due[tg], any = true, true
		}
	}
	return due, any
}

// samplesFor returns the samples tg has and needs for a model: a first
// (fresh) model counts held-out samples too (Config.MinSamplesFresh) but
// needs one training sample at least; a retrain counts training samples.
func (t *Trainer) samplesFor(tg features.Target, fresh bool) (have, need int) {
	counts := t.db.Counts()
	if !fresh {
		return counts.Train(tg), t.cfg.MinSamples
	}
	if counts.Train(tg) == 0 {
		return 0, max(t.cfg.MinSamplesFresh, 1)
	}
	return counts.Train(tg) + counts.Holdout(tg), t.cfg.MinSamplesFresh
}

// firstModels trains the first model of every target that is due one: a
// linear model at once, then, for targets with enough rows for trees and
// an xgboost to grow them, the full model. Failures are logged; the next
// wake-up or tick tries again.
func (t *Trainer) firstModels(ctx context.Context) {
	due, ok := t.firstModelsDue()
	if !ok {
		return
	}
	pub, err := t.retrain(ctx, pass{targets: due, linearOnly: true})
	if err != nil && ctx.Err() == nil {
		t.cfg.Logger.Warn("first linear model failed", "error", err)
	}
	if pub == nil {
		return
	}
	t.cfg.Logger.Info("first model in service: linear, trees to follow where possible",
		"version", pub.Bundle.Version, "ttft", due[features.TTFT], "tpot", due[features.TPOT])
	var upgrade [2]bool
	anyUpgrade := false
	for _, tg := range features.Targets {
		if m := pub.Bundle.Target(tg); due[tg] && m != nil && t.treesPossible(m) {
			upgrade[tg], anyUpgrade = true, true
		}
	}
	if !anyUpgrade {
		return
	}
	if _, err := t.retrain(ctx, pass{targets: upgrade, upgrade: true}); err != nil && ctx.Err() == nil {
		t.cfg.Logger.Warn("trees for the first model failed; the linear model stays in service", "error", err)
	}
}

// treesPossible reports whether a full fit would give m, a linear model,
// trees: xgboost is there, the configured kind has trees, and m was
// trained on enough rows for them.
func (t *Trainer) treesPossible(m *model.TargetModel) bool {
	return m.Kind == model.KindLinear && t.xgbErr == nil && t.cfg.Fit.XGBoost != nil &&
		t.cfg.Fit.Kind != model.KindLinear && m.TrainSamples >= t.cfg.Fit.MinTreeRows
}
