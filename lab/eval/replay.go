package eval

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
	"github.com/headroomhq/headroom/trainer/fit"
	"github.com/headroomhq/headroom/wire"
	"github.com/headroomhq/headroom/xgboost"
)

// Options configure a replay. Zero fields take the service's defaults, so
// that the zero Options (with XGBoost set) measure the service as shipped.
type Options struct {
	// XGBoost runs the xgboost CLI for Headroom's trees and for the XGBoost
	// baseline.
	XGBoost xgboost.CLI
	// Fit is Headroom's fit configuration; a zero Kind means
	// fit.DefaultOptions. Its XGBoost field is ignored: XGBoost above
	// is used.
	Fit fit.Options
	// Select is the trainer's self-tuning (its zero value: the service's,
	// but for MinInterval: a replay runs far faster than the service's
	// clock, so unless set its trainers choose by rows and retrains only,
	// as the service does whenever its store grows slower than twice a
	// minute).
	Select trainer.SelectConfig
	// Store options for Headroom's store (and so for the rows every model
	// trains on). NoSync is always set: a replay needs no durability.
	Store store.Options
	// Columns are Headroom's feature columns per target; a target not in
	// the map takes features.DefaultColumns.
	Columns map[features.Target][]string
	// Drift is the trainer's live tracking, whose forward samples also
	// calibrate and weigh later models; its Quantile is set from Quantile.
	Drift trainer.DriftConfig
	// MinSamplesFresh and MinSamples are the trainer's thresholds.
	MinSamplesFresh, MinSamples int
	// Quantile is the q whose coverage is reported; default 0.9.
	Quantile float64
	// TempDir holds the replay's stores; "" means os.TempDir().
	TempDir string
	// Logger gets the trainers' messages (nil discards them).
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Quantile == 0 {
		o.Quantile = model.DefaultQuantile
	}
	o.Drift.Quantile = o.Quantile
	if o.Store.Scheme.IsZero() {
		o.Store.Scheme = store.DefaultScheme()
	}
	o.Store.NoSync = true
	return o
}

// ReferenceXGBoostParams are llm-d's reference latency predictor's
// hyper-parameters (docs/PROTOCOL.md §8.2), for the baseline. They are fixed here, not
// taken from xgboost.DefaultParams, so that tuning the service never
// moves the baseline it is compared with.
func ReferenceXGBoostParams() xgboost.Params {
	return xgboost.Params{
		Rounds: 200, MaxDepth: 6, Eta: 0.05, Subsample: 0.8, ColsampleBytree: 0.8,
		MinChildWeight: 5, Gamma: 0.2, Lambda: 0.1, Alpha: 0.01,
	}
}

// ReferenceTrees fits the plain XGBoost baselines on X and labels y in ms
// (positive): the reference's hyper-parameters on raw ms and on ln(ms),
// each from its labels' mean as base score. The log model answers ln(ms).
func ReferenceTrees(ctx context.Context, cli xgboost.CLI, X [][]float64, y []float64) (raw, logMs *model.Trees, err error) {
	if raw, err = cli.Train(ctx, X, y, mean(y), ReferenceXGBoostParams()); err != nil {
		return nil, nil, fmt.Errorf("xgboost on ms: %w", err)
	}
	if logMs, err = ReferenceLogTrees(ctx, cli, X, y); err != nil {
		return nil, nil, err
	}
	return raw, logMs, nil
}

// ReferenceLogTrees is ReferenceTrees' model on ln(ms) alone.
func ReferenceLogTrees(ctx context.Context, cli xgboost.CLI, X [][]float64, y []float64) (*model.Trees, error) {
	logY := make([]float64, len(y))
	for i, v := range y {
		logY[i] = math.Log(v)
	}
	trees, err := cli.Train(ctx, X, logY, mean(logY), ReferenceXGBoostParams())
	if err != nil {
		return nil, fmt.Errorf("xgboost on ln(ms): %w", err)
	}
	return trees, nil
}

func mean(v []float64) float64 {
	var sum float64
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}

// Reference tree-model columns (docs/PROTOCOL.md §8.1) in Headroom's names. The
// reference's TPOT list also has num_tokens_generated, which it zeroes in
// training rows; it carries no information there and is left out.
var (
	referenceTTFTColumns = []string{
		"is_queued", "kv_cache_percentage", "input_token_length", "num_request_waiting", "num_request_running",
		"prefill_tokens_in_flight", "decode_tokens_in_flight", "encoder_matched_size", "encoder_input_size",
		"prefix_cache_score", "effective_input_tokens", "prefill_score_bucket", "pod_type",
	}
	referenceTPOTColumns = []string{
		"is_queued", "kv_cache_percentage", "input_token_length", "num_request_waiting", "num_request_running",
		"prefill_tokens_in_flight", "decode_tokens_in_flight", "pod_type",
	}
)

func referenceSchema(t features.Target) features.Schema {
	if t == features.TPOT {
		return features.MustSchema(referenceTPOTColumns...)
	}
	return features.MustSchema(referenceTTFTColumns...)
}

// replica is one service instance in process: a store, a trainer over it,
// a predictor per objective fed through the bundle's encoding, and the
// baselines trained on exactly the rows the trainer trained on.
type replica struct {
	opts  Options
	dir   string
	db    *store.DB
	tr    *trainer.Trainer
	mean  *predictor.Predictor // objective mean
	quant *predictor.Predictor // objective quantile at opts.Quantile
	// bundle is the decoded bundle the predictors serve.
	bundle    *model.Bundle
	baselines [features.NumTargets]baseline
	stats     runStats
}

// runStats is what one replica's trainer did: the bundles it published and,
// per target, how many new models each configuration it chose was fitted
// as ("-" for models without a choice).
type runStats struct {
	retrains int
	chosen   [features.NumTargets]map[string]int
}

// baseline holds the comparison models of one target.
type baseline struct {
	generation uint64       // store generation they were trained on; 0 = none yet
	xgb        *model.Trees // on raw ms
	xgbLog     *model.Trees // on ln(ms)
	constant   float64
}

func newReplica(opts Options) (*replica, error) {
	if _, err := opts.XGBoost.Available(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(opts.TempDir, "headroom-eval-")
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	r := &replica{opts: opts, dir: dir}
	if r.db, err = store.Open(filepath.Join(dir, "samples.db"), replayStore(opts.Store)); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("eval: %w", err)
	}
	fitOpts := opts.Fit
	if fitOpts.Kind == "" {
		fitOpts = fit.DefaultOptions()
	}
	xgb := opts.XGBoost
	fitOpts.XGBoost = &xgb
	// A replay retrains seconds apart where the service would minutes
	// apart: every retrain may measure its extrapolation, as the
	// service's would at its pace.
	fitOpts.Support.MinInterval = 0
	r.tr, err = trainer.New(trainer.Config{
		Fit:             fitOpts,
		Select:          replaySelect(opts.Select),
		MinSamplesFresh: opts.MinSamplesFresh,
		MinSamples:      opts.MinSamples,
		Columns:         opts.Columns,
		Drift:           replayDrift(opts.Drift),
		Gate:            replayGate(),
		Logger:          opts.Logger,
	}, r.db)
	if err == nil {
		r.mean, err = predictor.New(predictor.Mean, opts.Quantile)
	}
	if err == nil {
		r.quant, err = predictor.New(predictor.Quantile, opts.Quantile)
	}
	if err != nil {
		r.close()
		return nil, fmt.Errorf("eval: %w", err)
	}
	return r, nil
}

// replayStore is a replay's store options: repeatable (the holdout by
// the trace's clock under a fixed secret), and without the bound on what
// one minute of arrivals may put into the holdout. A recording is trusted,
// and a trace without timestamps is stamped a millisecond a row, under
// which the whole of it arrives in a few seconds: bounded as a burst, its
// holdout would be a tenth of its capacity, and the replay would measure
// another service than the one the recording came from.
func replayStore(o store.Options) store.Options {
	o = o.ForReplay()
	o.HoldoutSpread = 1
	return o
}

// replayDrift is a replay's live tracking: a burst's forward samples
// calibrate its fits, and the bounds of the models fitted during it may
// widen, as in any other minute (replayStore).
func replayDrift(d trainer.DriftConfig) trainer.DriftConfig {
	d.TrustBursts = true
	return d
}

// replayGate is a replay's publication gate: its live window unbounded per
// minute of arrivals, which a replay's are not (replayStore).
func replayGate() trainer.GateConfig { return trainer.GateConfig{RecentSpread: 1} }

func (r *replica) close() {
	_ = r.db.Close()
	_ = os.RemoveAll(r.dir)
}

func (r *replica) add(samples []features.Sample) error {
	if len(samples) == 0 {
		return nil
	}
	if _, err := r.db.Add(samples); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	// As the api does after every stored batch: live error tracking, which
	// also feeds the next fit's calibration and tree weight.
	r.tr.ObserveServed(samples)
	return nil
}

// retrain runs the trainer once, as its loop would, and when it publishes,
// serves the bundle through its encoded bytes and trains the baselines of
// every target it retrained on the same store generation. A trainer error
// fails the replay: a replay that silently fell back to a linear model would
// report the wrong model's figures.
func (r *replica) retrain(ctx context.Context) error {
	pub, err := r.tr.Retrain(ctx)
	if err != nil {
		return fmt.Errorf("eval: retrain: %w", err)
	}
	if pub == nil {
		return nil
	}
	r.stats.retrains++
	decoded, err := bundle.Decode(pub.Encoded, nil)
	if err != nil {
		return fmt.Errorf("eval: published bundle does not decode: %w", err)
	}
	served := &bundle.Published{Bundle: decoded, Encoded: pub.Encoded}
	r.mean.Swap(served, time.Time{})
	r.quant.Swap(served, time.Time{})
	r.bundle = decoded

	var wg sync.WaitGroup
	errs := make([]error, features.NumTargets)
	for _, t := range features.PodTargets {
		m := decoded.Target(t)
		if m == nil || m.StoreGeneration == r.baselines[t].generation {
			continue
		}
		r.stats.countChoice(t, m)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[t] = r.fitBaselines(ctx, t, m.StoreGeneration)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fitBaselines trains target t's baselines on the store's training rows,
// which must still be those of generation gen, the ones Headroom's model
// was trained on.
func (r *replica) fitBaselines(ctx context.Context, t features.Target, gen uint64) error {
	snap, err := r.db.SnapshotBuckets(t)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	if snap.Generation != gen {
		return fmt.Errorf("eval: %s store moved from generation %d to %d under the replay", t, gen, snap.Generation)
	}
	var train []features.Sample
	for _, b := range snap.Buckets {
		train = append(train, b.Samples...)
	}
	data := fit.BuildDataset(referenceSchema(t), t, train)
	if len(data.Y) == 0 {
		return fmt.Errorf("eval: %s has no training rows at generation %d", t, gen)
	}
	// Labels are positive (features.Sample.Label), so their logs are finite.
	trees, logTrees, err := ReferenceTrees(ctx, r.opts.XGBoost, data.X, data.Y)
	if err != nil {
		return fmt.Errorf("eval: %s baseline: %w", t, err)
	}
	r.baselines[t] = baseline{generation: gen, xgb: trees, xgbLog: logTrees, constant: fit.Median(data.Y)}
	return nil
}

// modelFor returns Headroom's model for t in service, or nil.
func (r *replica) modelFor(t features.Target) *model.TargetModel { return r.bundle.Target(t) }

// score predicts, with every model, each sample of block that has a label
// for a target with a model in service, and adds the predictions to tl.
// keep, when not nil, selects the samples to score by the serving model.
func (r *replica) score(block []features.Sample, tl *tally, keep func(t features.Target, m *model.TargetModel) bool) error {
	if r.bundle == nil {
		return nil
	}
	rows := make([]features.Row, len(block))
	for i := range block {
		rows[i] = block[i].Row
	}
	mean := make([]wire.Prediction, len(rows))
	quant := make([]wire.Prediction, len(rows))
	if _, err := r.mean.Predict(rows, mean); err != nil {
		return fmt.Errorf("eval: predict: %w", err)
	}
	if _, err := r.quant.Predict(rows, quant); err != nil {
		return fmt.Errorf("eval: predict: %w", err)
	}
	var x []float64
	for _, t := range features.PodTargets {
		m := r.modelFor(t)
		if m == nil || (keep != nil && !keep(t, m)) {
			continue
		}
		b := &r.baselines[t]
		ref := referenceSchema(t)
		for i := range block {
			y, ok := block[i].Label(t)
			if !ok {
				continue
			}
			hm, hq := mean[i].TTFTMs, quant[i].TTFTMs
			if t == features.TPOT {
				hm, hq = mean[i].TPOTMs, quant[i].TPOTMs
			}
			x = m.Schema().Build(&rows[i], x)
			part := ModelHeadroomInRange
			if m.OutOfRange(x) > 0 {
				part = ModelHeadroomOutOfRange
			}
			for _, name := range []string{ModelHeadroom, part} {
				s := tl.scores(t, name)
				s.add(hm, y)
				s.addQuantile(hq)
			}
			tl.scores(t, ModelLinear).add(m.PredictLinear(x), y)
			x = ref.Build(&rows[i], x)
			// The reference clips its raw-ms output at 0.
			tl.scores(t, ModelXGBoost).add(max(b.xgb.Predict(x), 0), y)
			tl.scores(t, ModelXGBoostLog).add(math.Exp(b.xgbLog.Predict(x)), y)
			tl.scores(t, ModelConstant).add(b.constant, y)
		}
	}
	return nil
}

func (s *runStats) countChoice(t features.Target, m *model.TargetModel) {
	name := "-"
	if m.Selection != nil {
		name = m.Selection.Chosen
	}
	if s.chosen[t] == nil {
		s.chosen[t] = map[string]int{}
	}
	s.chosen[t][name]++
}

// replaySelect is sel as a replay's trainers run it (Options.Select).
func replaySelect(sel trainer.SelectConfig) trainer.SelectConfig {
	if sel.MinInterval == 0 {
		sel.MinInterval = -1
	}
	return sel
}
