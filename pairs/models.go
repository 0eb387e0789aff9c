// Package pairs predicts prefill/decode pairs for disaggregated serving:
// for one request, every prefill candidate P and decode candidate D, the
// time to first token if P runs the prompt, its KV cache moves to D and D
// decodes, and the time per output token on D; and, on the same scale, the
// option of not splitting, D running its own prefill. llm-d's P/D
// scheduler picks D on predicted TPOT, then P on predicted TTFT, neither
// knowing what the KV transfer between them costs; ranking the pair is how
// Headroom avoids the fast prefill pod across a slow link.
//
// The package has no HTTP in it: the predictor's /predict/pairs route and
// the simulator's joint routers both call Rank.
package pairs

import (
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/predictor"
)

// TransferModel predicts a KV-cache transfer: the learned bandwidth law of
// each link class. *model.TransferModel implements it; tests use fakes.
type TransferModel interface {
	// Predict is the central estimate of moving tokens tokens' KV cache
	// (bytesPerToken each; 0: the pool setting the model was trained
	// with) over a link of class c shared by concurrent transfers (0:
	// unknown). ok is false when the model knows nothing of the class.
	Predict(c features.LinkClass, tokens int64, bytesPerToken float64, concurrent int64) (ms float64, ok bool)
	// Quantile scales a central estimate for class c to quantile q of the
	// calibrated error.
	Quantile(c features.LinkClass, central, q float64) float64
	// SharedMs is the part of the law's label common to every link
	// class on the prefill pod's row r (the split-TTFT law's prefill), 0
	// for a law without one; buf is scratch for its columns.
	SharedMs(r *features.Row, buf []float64) float64
}

// Models are what a ranking reads, all from one bundle so that a ranking
// never mixes model generations.
type Models struct {
	TTFT, TPOT *model.TargetModel
	// Transfer is nil when the bundle has no transfer model: then no split
	// pair can be predicted and only the no-split options are ranked.
	Transfer TransferModel
	// SplitTTFT, the split-TTFT law (features.SplitTTFT), predicts a
	// pair's whole TTFT per link class when there is no Transfer: what a
	// bundle learned from entries that do not time the transfer, as
	// llm-d's do not. nil when the bundle has none.
	SplitTTFT TransferModel
	// Statistic is what every part reports, as on every other prediction
	// route: the central estimate or the configured quantile.
	Statistic predictor.Statistic
}

// FromBundle returns the models of b, reporting stat.
func FromBundle(b *model.Bundle, stat predictor.Statistic) Models {
	m := Models{Statistic: stat}
	if b == nil {
		return m
	}
	m.TTFT, m.TPOT = b.TTFT, b.TPOT
	if b.Transfer != nil { // a nil *model.TransferModel in the interface would not be nil
		m.Transfer = b.Transfer
	}
	if b.SplitTTFT != nil {
		m.SplitTTFT = b.SplitTTFT
	}
	return m
}

// law is the model a pair's link term comes from, and whether it is the
// split-TTFT law: the transfer model when there is one (its pairs are
// composed from parts that each model learned apart, as when the
// transfer is timed), else the split-TTFT law; nil with neither.
func (m *Models) law() (TransferModel, bool) {
	if m.Transfer != nil || m.SplitTTFT == nil {
		return m.Transfer, false
	}
	return m.SplitTTFT, true
}

// linkDistribution is a law's error distribution on one link class, in
// the shape predictor.Statistic reads.
type linkDistribution struct {
	m TransferModel
	c features.LinkClass
}

func (d linkDistribution) Quantile(central, q float64) float64 { return d.m.Quantile(d.c, central, q) }
