// Package eval measures prediction quality by replaying a trace through the
// service's own code, in process: the bbolt store, the trainer, the bundle
// encoding and the predictor. Nothing is re-implemented for the measurement,
// so a figure it prints is a figure the service would show. Traces are read
// by package trace.
//
// Three modes (Split, Prequential, Extrapolate) each report, on the same rows,
// Headroom's model beside three baselines: XGBoost alone with the reference's
// hyper-parameters, on raw milliseconds and on their logarithm, and the
// linear model alone.
package eval

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
)

// Modes.
const (
	ModeSplit       = "split"
	ModePrequential = "prequential"
	ModeExtrapolate = "extrapolate"
)

// EarlyLifeMax is the training-set size below which a model counts as
// early-life in prequential reports: the service's first model comes after
// 10 samples, and 100 is where the reference's chart starts retraining.
const EarlyLifeMax = 100

// earlyLives is the number of early lives replayed: one service started
// empty at each of this many evenly spaced rows of the trace. One start
// alone would measure mostly the trace's first minute (on the shared trace,
// a warm-up stall) and a few dozen rows' luck.
const earlyLives = 6

// earlyStarts returns the rows at which early lives start: evenly spaced,
// each leaving at least earlyLifeRows rows to walk.
func earlyStarts(n int) []int {
	const earlyLifeRows = 4 * EarlyLifeMax
	var out []int
	span := n - earlyLifeRows
	if span <= 0 {
		return []int{0}
	}
	for i := range earlyLives {
		out = append(out, i*span/(earlyLives-1))
	}
	return out
}

// earlyEvery is the retrain cadence, in trace rows, of the early-life walk:
// at the trace's first stage, 1 request per second, about one retrain tick
// of the service.
const earlyEvery = 10

// splitTestFraction is the share of rows each split-mode seed holds out
// for testing.
const splitTestFraction = 0.1

var mainModels = []string{ModelHeadroom, ModelHeadroomInRange, ModelHeadroomOutOfRange, ModelXGBoost, ModelXGBoostLog, ModelLinear}

// Split measures models on random 90/10 splits of the trace: per seed
// (1..seeds), a tenth of the rows is held out, the rest is ingested in
// trace order into a fresh store, the trainer runs once, and every model
// predicts the held-out rows. Figures are the mean over seeds.
func Split(ctx context.Context, samples []features.Sample, opts Options, seeds int) (*Report, error) {
	start := time.Now()
	opts = opts.withDefaults()
	if seeds < 1 {
		return nil, fmt.Errorf("split: %d seeds, want at least 1", seeds)
	}
	if len(samples) < 20 {
		return nil, fmt.Errorf("split: %d rows, want at least 20", len(samples))
	}
	rep := &Report{Mode: ModeSplit, Scheme: opts.Store.Scheme.String(), Quantile: opts.Quantile, Seeds: seeds}
	var perSeed [][]Result
	for seed := 1; seed <= seeds; seed++ {
		train, test := splitRows(samples, uint64(seed))
		tl := newTally(mainModels...)
		stats, err := runOnce(ctx, opts, train, func(r *replica) error { return r.score(test, tl, nil) })
		if err != nil {
			return nil, fmt.Errorf("split seed %d: %w", seed, err)
		}
		rep.count(stats)
		perSeed = append(perSeed, tl.results())
	}
	rep.Results = meanResults(perSeed)
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// splitRows draws a seeded random tenth of the rows as the test set; both
// parts keep trace order.
func splitRows(samples []features.Sample, seed uint64) (train, test []features.Sample) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	nTest := int(float64(len(samples))*splitTestFraction + 0.5)
	isTest := make([]bool, len(samples))
	for _, i := range rng.Perm(len(samples))[:nTest] {
		isTest[i] = true
	}
	for i := range samples {
		if isTest[i] {
			test = append(test, samples[i])
		} else {
			train = append(train, samples[i])
		}
	}
	return train, test
}

// runOnce ingests train into a fresh replica, retrains once and calls
// score. It returns the number of bundles published.
func runOnce(ctx context.Context, opts Options, train []features.Sample, score func(*replica) error) (runStats, error) {
	r, err := newReplica(opts)
	if err != nil {
		return runStats{}, err
	}
	defer r.close()
	if err := r.add(train); err != nil {
		return runStats{}, err
	}
	if err := r.retrain(ctx); err != nil {
		return runStats{}, err
	}
	if r.bundle == nil {
		return runStats{}, errors.New("the trainer published no model: too few training rows")
	}
	return r.stats, score(r)
}

// liveThrough ingests train in blocks of every rows, retraining before
// each block and once after the last, as the service would live through
// them, then calls score with the final model.
func liveThrough(ctx context.Context, opts Options, train []features.Sample, every int, score func(*replica) error) (runStats, error) {
	r, err := newReplica(opts)
	if err != nil {
		return runStats{}, err
	}
	defer r.close()
	if err := r.inBlocks(ctx, train, every, nil); err != nil {
		return runStats{}, err
	}
	if err := r.retrain(ctx); err != nil {
		return runStats{}, err
	}
	if r.bundle == nil {
		return runStats{}, errors.New("the trainer published no model: too few training rows")
	}
	return r.stats, score(r)
}

// inBlocks ingests samples in blocks of every rows, retraining before each
// block but the first, as the service lives through them. before, when
// not nil, sees each block after the retrain and before its ingestion;
// true from it stops the walk there.
func (r *replica) inBlocks(ctx context.Context, samples []features.Sample, every int, before func([]features.Sample) (stop bool, err error)) error {
	for lo := 0; lo < len(samples); lo += every {
		if err := ctx.Err(); err != nil {
			return err
		}
		if lo > 0 {
			if err := r.retrain(ctx); err != nil {
				return fmt.Errorf("at row %d: %w", lo, err)
			}
		}
		block := samples[lo:min(lo+every, len(samples))]
		if before != nil {
			stop, err := before(block)
			if stop || err != nil {
				return err
			}
		}
		if err := r.add(block); err != nil {
			return err
		}
	}
	return nil
}

// Prequential replays the trace as the service lives it: walking in order,
// the trainer runs every `every` rows on what the store holds at that
// moment, and each row is predicted before it is ingested. Rows of a target
// with no model yet are not scored. Early-life figures come from further
// walks, each a service started empty at one of earlyLives evenly spaced
// rows, retrained every earlyEvery rows (as the service's 10 s tick would
// at low traffic) until every target's model was trained on EarlyLifeMax
// samples; they score only predictions of models trained on fewer, beside
// a constant (the median of the same training labels).
func Prequential(ctx context.Context, samples []features.Sample, opts Options, every int) (*Report, error) {
	start := time.Now()
	opts = opts.withDefaults()
	if every < 1 {
		return nil, fmt.Errorf("prequential: retrain every %d rows, want at least 1", every)
	}
	rep := &Report{Mode: ModePrequential, Scheme: opts.Store.Scheme.String(), Quantile: opts.Quantile, Every: every}
	tl := newTally(mainModels...)
	stats, err := walk(ctx, opts, samples, every, tl, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("prequential: %w", err)
	}
	rep.count(stats)
	rep.Results = tl.results()

	early := newTally(ModelHeadroom, ModelXGBoost, ModelLinear, ModelConstant)
	isEarly := func(_ features.Target, m *model.TargetModel) bool { return m.TrainSamples < EarlyLifeMax }
	for _, from := range earlyStarts(len(samples)) {
		part := samples[from:]
		grown := func(r *replica) bool {
			for _, t := range features.PodTargets {
				if m := r.modelFor(t); (m == nil || m.TrainSamples < EarlyLifeMax) && hasLabel(part, t) {
					return false
				}
			}
			return true
		}
		if _, err := walk(ctx, opts, part, earlyEvery, early, isEarly, grown); err != nil {
			return nil, fmt.Errorf("prequential early life from row %d: %w", from, err)
		}
		rep.EarlyStarts = append(rep.EarlyStarts, from)
	}
	rep.EarlyLife = early.results()
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

func hasLabel(samples []features.Sample, t features.Target) bool {
	for i := range samples {
		if _, ok := samples[i].Label(t); ok {
			return true
		}
	}
	return false
}

// walk is one prequential pass over samples with a fresh replica: before
// each block of `every` rows it retrains, then scores the block, then
// ingests it. It stops early when done reports true after a retrain.
func walk(ctx context.Context, opts Options, samples []features.Sample, every int, tl *tally,
	keep func(features.Target, *model.TargetModel) bool, done func(*replica) bool) (runStats, error) {
	r, err := newReplica(opts)
	if err != nil {
		return runStats{}, err
	}
	defer r.close()
	first := true
	err = r.inBlocks(ctx, samples, every, func(block []features.Sample) (bool, error) {
		if !first && done != nil && done(r) {
			return true, nil
		}
		first = false
		return false, r.score(block, tl, keep)
	})
	if err != nil {
		return runStats{}, err
	}
	return r.stats, nil
}

// Extrapolate trains on the rows whose prompt is at most trainMax tokens
// and tests on those longer than testMin: how each model behaves beyond the
// range it has seen. With every 0 the trainer runs once on all the training
// rows, so the quantiles are calibrated on the holdout and cross-fitted
// rows; with every > 0 the training rows arrive in order and the trainer
// runs every `every` rows, as in Prequential, so the model that meets the
// long prompts is calibrated as the service's would be, on its
// predecessors' errors on newer samples (narrower: they interpolate in
// time).
func Extrapolate(ctx context.Context, samples []features.Sample, opts Options, trainMax, testMin int64, every int) (*Report, error) {
	start := time.Now()
	opts = opts.withDefaults()
	if testMin < trainMax {
		return nil, fmt.Errorf("extrapolate: test-min %d is below train-max %d: test rows would be in range", testMin, trainMax)
	}
	var train, test []features.Sample
	for _, s := range samples {
		switch n := s.Row.InputTokenLength; {
		case n <= trainMax:
			train = append(train, s)
		case n > testMin:
			test = append(test, s)
		}
	}
	if len(test) == 0 {
		return nil, fmt.Errorf("extrapolate: no rows with more than %d prompt tokens", testMin)
	}
	if every < 0 {
		return nil, fmt.Errorf("extrapolate: retrain every %d rows, want at least 0", every)
	}
	rep := &Report{Mode: ModeExtrapolate, Scheme: opts.Store.Scheme.String(), Quantile: opts.Quantile,
		TrainMax: trainMax, TestMin: testMin, Every: every}
	tl := newTally(mainModels...)
	score := func(r *replica) error { return r.score(test, tl, nil) }
	var stats runStats
	var err error
	if every == 0 {
		stats, err = runOnce(ctx, opts, train, score)
	} else {
		stats, err = liveThrough(ctx, opts, train, every, score)
	}
	if err != nil {
		return nil, fmt.Errorf("extrapolate: %w", err)
	}
	rep.count(stats)
	rep.Results = tl.results()
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}
