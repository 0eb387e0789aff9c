// Package dashboard renders the trainer's and the predictor's state as one
// self-contained HTML page with plots drawn server-side as SVG: no script,
// no stylesheet or font from elsewhere, so it works on machines and
// clusters without internet access. It knows nothing of HTTP; a handler
// takes a Snapshot and calls Render.
package dashboard

import (
	"context"
	"fmt"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
	"github.com/headroomhq/headroom/trainer/fit"
)

// MaxHoldoutPoints bounds the predicted-versus-actual plot: the newest
// held-out samples, a thousand per target at the default holdout size.
const MaxHoldoutPoints = 1000

// Snapshot is everything the page shows, taken at one moment.
type Snapshot struct {
	Role string // "trainer" or "predictor"
	Now  time.Time
	// Bundle is the newest published bundle (trainer) or the one in
	// service (predictor); nil before the first.
	Bundle *model.Bundle
	// Predictor only: when the bundle went into service, and where
	// bundles come from.
	LoadedAt   time.Time
	TrainerURL string
	// Trainer only.
	XGBoostAvailable bool
	XGBoostError     string
	Targets          []Target
	Retrains         []trainer.RetrainRecord // oldest first
	BucketCapacity   int
}

// Target is one target's part of the page: one for each of
// features.Targets.
type Target struct {
	Target features.Target
	// Model is a per-pod target's model, Transfer the KV-transfer model;
	// both nil before the target's first model.
	Model    *model.TargetModel
	Transfer *model.TransferModel
	// Holdout pairs the model's predictions with measured values on the
	// store's held-out samples (trainer only).
	Holdout []Point
	Status  *trainer.TargetStatus // trainer only
	// Fill is the training samples stored per KV-cache level (rows) and
	// prefix-cache level (columns), summed over the store's other
	// dimensions; nil when the scheme does not stratify by both, and for
	// a stream of another scheme (the KV transfers', by link class and
	// size).
	Fill *Fill
}

// Point is one held-out sample: predicted and measured latency, in ms.
type Point struct {
	Predicted, Actual float64
}

// Fill is a KV × prefix grid of stored training samples.
type Fill struct {
	Counts [][]int // [kv level][prefix level]
	// PerCell is the most samples a cell can hold: the bucket capacity
	// times the buckets of the other dimensions.
	PerCell int
}

// FromTrainer takes a snapshot of a trainer and its store. It reads the
// held-out samples (a thousand per target by default) and predicts them
// with the model in service, a few milliseconds of work, so it is meant
// for a person looking at a page, not for polling.
func FromTrainer(ctx context.Context, t *trainer.Trainer, db *store.DB, now time.Time) (Snapshot, error) {
	s := Snapshot{Role: "trainer", Now: now, Retrains: t.History(), BucketCapacity: db.Options().BucketCapacity}
	if pub := t.Current(); pub != nil {
		s.Bundle = pub.Bundle
	}
	status := t.Status()
	s.XGBoostAvailable, s.XGBoostError = status.XGBoostAvailable, status.XGBoostError
	for _, tg := range features.Targets {
		view := modelView(s.Bundle, tg)
		view.Fill = fill(db, tg)
		if st, ok := status.Targets[tg.String()]; ok {
			view.Status = &st
		}
		if view.hasModel() {
			points, err := view.holdoutPoints(ctx, db)
			if err != nil {
				return s, err
			}
			view.Holdout = points
		}
		s.Targets = append(s.Targets, view)
	}
	return s, nil
}

// modelView is target tg's view with b's model (b may be nil).
func modelView(b *model.Bundle, tg features.Target) Target {
	return Target{Target: tg, Model: b.Target(tg), Transfer: b.Law(tg)}
}

func (v Target) hasModel() bool { return v.Model != nil || v.Transfer != nil }

// FromPredictor takes a snapshot of a predictor: the bundle in service and
// where it came from. A predictor keeps no samples, so its page has no
// holdout plot, store or training history.
func FromPredictor(p *predictor.Predictor, trainerURL string, now time.Time) Snapshot {
	s := Snapshot{Role: "predictor", Now: now, TrainerURL: trainerURL}
	if pub, loaded := p.Current(); pub != nil {
		s.Bundle, s.LoadedAt = pub.Bundle, loaded
	}
	for _, tg := range features.Targets {
		s.Targets = append(s.Targets, modelView(s.Bundle, tg))
	}
	return s
}

// holdoutPoints predicts the newest held-out samples with the view's
// model: a per-pod model builds each feature row with the one feature
// builder training and serving use; a per-pair law (KV transfer, split
// TTFT) predicts each sample's label as /predict/pairs does.
func (v Target) holdoutPoints(ctx context.Context, db *store.DB) ([]Point, error) {
	samples, err := db.SnapshotHoldout(ctx, v.Target)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	if len(samples) > MaxHoldoutPoints {
		samples = samples[len(samples)-MaxHoldoutPoints:]
	}
	if m := v.Model; m != nil {
		d := fit.BuildDataset(m.Schema(), v.Target, samples)
		points := make([]Point, len(d.Y))
		for i, x := range d.X {
			points[i] = Point{Predicted: m.Predict(x), Actual: d.Y[i]}
		}
		return points, nil
	}
	var points []Point
	for i := range samples {
		tr := samples[i].Transfer
		actual, ok := samples[i].Label(v.Target)
		if tr == nil || !ok {
			continue
		}
		if y, ok := v.Transfer.Predict(tr.Class(), tr.Tokens, tr.BytesPerToken, tr.Concurrent); ok {
			points = append(points, Point{Predicted: y, Actual: actual})
		}
	}
	return points, nil
}

// fill sums the store's bucket counts into a KV × prefix grid. Bucket i's
// levels are the digits of i in the mixed radix of the scheme's
// dimensions, the first most significant (store.Scheme).
func fill(db *store.DB, tg features.Target) *Fill {
	if !tg.PerPod() {
		return nil
	}
	scheme := db.Scheme()
	dims := scheme.Dims()
	kv, prefix := -1, -1
	cells := 1
	for i, d := range dims {
		switch d {
		case store.DimKV10:
			kv = i
		case store.DimPrefix4:
			prefix = i
		default:
			cells *= d.Levels()
		}
	}
	if kv < 0 || prefix < 0 {
		return nil
	}
	f := &Fill{Counts: make([][]int, dims[kv].Levels()), PerCell: cells * db.Options().BucketCapacity}
	for i := range f.Counts {
		f.Counts[i] = make([]int, dims[prefix].Levels())
	}
	index := make(map[string]int, scheme.NumBuckets())
	for i, key := range scheme.Keys() {
		index[key] = i
	}
	levels := make([]int, len(dims))
	for key, n := range db.BucketCounts(tg) {
		i, ok := index[key]
		if !ok {
			continue
		}
		for d := len(dims) - 1; d >= 0; d-- {
			levels[d] = i % dims[d].Levels()
			i /= dims[d].Levels()
		}
		f.Counts[levels[kv]][levels[prefix]] += n
	}
	return f
}
