package trainer

import (
	"context"
	"slices"

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
// that takes first models has none in b. It never blocks: one pending
// wake-up is enough.
func (t *Trainer) wakeForFirstModels(b *model.Bundle) {
	if !slices.ContainsFunc(t.targets, func(tg target) bool { return tg.firstModels() && !tg.has(b) }) {
		return
	}
	select {
	case t.arrived <- struct{}{}:
	default:
	}
}

// firstModelsDue returns the targets that take first models, have none,
// and have enough samples for one.
func (t *Trainer) firstModelsDue() []features.Target {
	var cur *model.Bundle
	if pub := t.current.Load(); pub != nil {
		cur = pub.Bundle
	}
	var due []features.Target
	for _, tg := range t.targets {
		if have, need, _ := t.samplesFor(tg.id(), true, 0); tg.firstModels() && !tg.has(cur) && have >= need {
			due = append(due, tg.id())
		}
	}
	return due
}

// samplesFor returns the samples tg has and needs for a model, and what
// they are: a first (fresh) model counts held-out samples too
// (Config.MinSamplesFresh) but needs one training sample at least; a
// retrain counts training samples (Config.MinSamples, or fewer while the
// model in service, trained on servedOn, is young: retrainNeeds).
func (t *Trainer) samplesFor(tg features.Target, fresh bool, servedOn int) (have, need int, what string) {
	counts := t.db.Counts()
	if !fresh {
		return counts.Train(tg), t.retrainNeeds(servedOn), "training samples"
	}
	if counts.Train(tg) == 0 {
		return 0, max(t.cfg.MinSamplesFresh, 1), "samples"
	}
	return counts.Train(tg) + counts.Holdout(tg), t.cfg.MinSamplesFresh, "samples"
}

// firstModels trains the first model of every target that is due one: a
// linear model at once, then, for targets with enough rows for trees and
// an xgboost to grow them, the full model. Failures are logged; the next
// wake-up or tick tries again.
func (t *Trainer) firstModels(ctx context.Context) {
	due := t.firstModelsDue()
	if len(due) == 0 {
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
		"version", pub.Bundle.Version, "targets", due)
	var upgrade []features.Target
	for _, tg := range t.targets {
		if slices.Contains(due, tg.id()) && tg.upgradable(pub.Bundle) {
			upgrade = append(upgrade, tg.id())
		}
	}
	if len(upgrade) == 0 {
		return
	}
	if _, err := t.retrain(ctx, pass{targets: upgrade, upgrade: true}); err != nil && ctx.Err() == nil {
		t.cfg.Logger.Warn("trees for the first model failed; the linear model stays in service", "error", err)
	}
}

// earlyGrowth is how many times the training samples of a model in
// service a target needs for a retrain before it has Config.MinSamples
// (retrainNeeds).
const earlyGrowth = 2

// retrainNeeds is the training samples a target whose model in service
// was trained on servedOn samples needs for a retrain: Config.MinSamples,
// or earlyGrowth times servedOn when that is fewer (never fewer than
// Config.MinSamplesFresh). The first model comes from about ten samples,
// and held until the hundredth it served the rows of a whole early
// minute or more from its first ten, a warm-up stall among them
// (docs/ACCURACY.md, Loaded pods); refitted each time the samples double,
// a young target is fitted a handful of times more, each a fit of under
// MinSamples rows, and still goes through the publication gate.
func (t *Trainer) retrainNeeds(servedOn int) int {
	return min(t.cfg.MinSamples, max(earlyGrowth*servedOn, t.cfg.MinSamplesFresh))
}
