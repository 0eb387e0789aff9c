package trainer

import (
	"context"
	"errors"
	"fmt"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/trainer/fit"
)

// transferModels are the models of a target predicted per pair of pods by
// a law per link class (fit.Law): the KV transfer's bandwidth law, and the
// split TTFT's, the whole TTFT of a disaggregated request, which is what
// /predict/pairs has when the transfer is not timed. Its fit takes
// milliseconds, so it retrains whenever samples arrive; it requests no
// early retrain, and first-model passes leave it to the next full one
// (until then /predict/pairs ranks the no-split options alone).
type transferModels struct {
	tg features.Target // KVTransfer or SplitTTFT
	t  *Trainer
}

func (k *transferModels) of(b *model.Bundle) *model.TransferModel     { return b.Law(k.tg) }
func (k *transferModels) put(b *model.Bundle, m *model.TransferModel) { b.SetLaw(k.tg, m) }
func (k *transferModels) setGeneration(m *model.TransferModel, gen uint64) {
	m.StoreGeneration = gen
}
func (k *transferModels) keepDegraded(*model.TransferModel, pass) bool { return false }
func (k *transferModels) upgradable(*model.TransferModel) bool         { return false }
func (k *transferModels) resume(*model.TransferModel)                  {}
func (k *transferModels) afterDrift()                                  {}

func (k *transferModels) facts(m *model.TransferModel) modelFacts {
	return modelFacts{trainSamples: m.TrainSamples, storeGeneration: m.StoreGeneration, holdout: m.Holdout,
		coverage: m.HoldoutCoverage}
}

// observe exports the KV-transfer law's figures per link class; a split
// TTFT's per-byte term is no bandwidth, and its figures are those every
// target has.
func (k *transferModels) observe(metrics *Metrics, m *model.TransferModel) {
	if k.tg == features.KVTransfer {
		metrics.observeTransferClasses(m)
	}
}

// fit fits the laws (fit.Law); too few samples of any one link class is a
// wait.
func (k *transferModels) fit(ctx context.Context, job fitJob[*model.TransferModel]) (*model.TransferModel, error) {
	m, err := fit.Law(ctx, k.tg, job.train, job.holdout, k.t.cfg.Transfer, k.t.drift.cfg.Quantile)
	if errors.Is(err, fit.ErrTooFewTransfers) {
		return nil, fmt.Errorf("%w: %w", errWaiting, err)
	}
	return m, err
}

// predict is m's prediction for each sample's label, with the sample's
// own bytes per token; actual 0 where m cannot bound the sample's class.
func (k *transferModels) predict(m *model.TransferModel, samples []features.Sample) (pred, actual []float64) {
	pred, actual, _ = fit.LawPredictions(m, k.tg, samples, 0.5)
	return pred, actual
}

// quantiles is predict with m's q quantile of each sample.
func (k *transferModels) quantiles(m *model.TransferModel, samples []features.Sample, q float64) (pred, actual, quant []float64) {
	return fit.LawPredictions(m, k.tg, samples, q)
}

// probes span each fitted class's token range, alone on the link and of
// unknown concurrency.
func (k *transferModels) probes(m *model.TransferModel) []gateProbe {
	var out []gateProbe
	for _, c := range m.Classes {
		class, _ := features.ParseLinkClass(c.Class)
		for _, tokens := range [2]float64{c.Tokens.Min, c.Tokens.Max} {
			for _, conc := range [2]int64{1, 0} {
				p, ok := m.Predict(class, int64(tokens), 0, conc)
				out = append(out, gateProbe{where: fmt.Sprintf("at probe %s, %d tokens, %d concurrent", class, int64(tokens), conc),
					ms: p, ok: ok})
			}
		}
	}
	return out
}

// score records arriving samples against m.
func (k *transferModels) score(tl *targetLive, m *model.TransferModel, _ bool, samples []features.Sample) bool {
	if m == nil {
		return false
	}
	d := k.t.drift
	q := d.cfg.Quantile
	pred, actual, quant := fit.LawPredictions(m, k.tg, samples, q)
	if len(pred) == 0 {
		return false
	}
	tl.shift.beginUpload()
	for i, y := range pred {
		if actual[i] > 0 {
			d.scoreModel(tl, y, actual[i], actual[i] <= quant[i], 0)
			d.metrics.observeLive(k.tg, "model")
		}
	}
	d.metrics.observeLiveSummary(k.tg, tl, q)
	d.judge(k.tg, tl) // reported; a law's is never a drift (shift.go)
	return false
}
