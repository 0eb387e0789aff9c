// Package trainer turns stored samples into published model bundles: the
// retrain loop, the fits of each target, and the live error tracking that
// can call a retrain early.
package trainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/priority"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/store"
)

// Config configures a Trainer. The zero value of each field means its default.
type Config struct {
	// Interval between retrain attempts (default 10 s).
	Interval time.Duration
	// MinSamplesFresh is the number of samples a target needs for its
	// first model (default 10), held-out ones included: it is what a
	// router must send before it gets predictions, and a tenth of its
	// samples are held out. MinSamples is the number of training samples
	// it needs to retrain once it has one (default 100). The reference
	// lowered its threshold for the whole process after a cold start; here
	// the fresh threshold applies only until a target has a model.
	MinSamplesFresh int
	MinSamples      int
	// MaxTrainRows caps the training samples one fit reads per target: the
	// newest of every store bucket, the buckets sharing the cap evenly
	// (store.DB.SnapshotNewest). 0 means DefaultMaxTrainRows; negative,
	// every stored sample.
	MaxTrainRows int
	// Nice is the scheduling niceness (1-19) the fits and the bundle's
	// publication run at, on a thread of their own, so that predictions
	// served on the same cores come first; 0 leaves them at the process's.
	// Never the idle class (see inBackground): that is for the xgboost
	// runs, FitConfig.XGBoost's Idle, once their target has a model.
	Nice int
	Fit  FitConfig
	// Select configures self-tuning: the choice, per target, among
	// candidate configurations derived from Fit (select.go).
	Select SelectConfig
	// Drift configures live error tracking and early retraining.
	Drift DriftConfig
	// Gate is the publication gate every new model passes (gate.go).
	Gate GateConfig
	// Transfer configures the KV-transfer model's fit (transfer.go).
	Transfer TransferConfig
	// Columns per target; nil means features.DefaultTTFTColumns / TPOT.
	TTFTColumns, TPOTColumns []string
	// BundleDir holds published bundles; KeepBundles of them are kept (default 5).
	BundleDir   string
	KeepBundles int
	// SigningKey, when set, signs every bundle with HMAC-SHA256.
	SigningKey []byte
	Logger     *slog.Logger
	Metrics    *Metrics // may be nil
	// Now is the clock (default time.Now); tests set it.
	Now func() time.Time
}

// DefaultMaxTrainRows is the brief's full store (40 buckets of 500): a
// fit of that size takes under 2 s. A store stratified more finely holds
// more (the default scheme's 360 buckets, 180,000 samples per target; fits
// of the 140,000 that 280 buckets held took 5-8 s per target and 235 MB),
// so fits sample it evenly instead.
const DefaultMaxTrainRows = 20000

func (c *Config) setDefaults() {
	if c.Interval <= 0 {
		c.Interval = 10 * time.Second
	}
	if c.MinSamplesFresh <= 0 {
		c.MinSamplesFresh = 10
	}
	if c.MinSamples <= 0 {
		c.MinSamples = 100
	}
	if c.MaxTrainRows == 0 {
		c.MaxTrainRows = DefaultMaxTrainRows
	}
	if c.Fit.Kind == "" {
		def := DefaultFitConfig()
		def.XGBoost = c.Fit.XGBoost
		c.Fit = def
	}
	c.Select.setDefaults(c.Fit)
	if c.TTFTColumns == nil {
		c.TTFTColumns = features.DefaultTTFTColumns
	}
	if c.TPOTColumns == nil {
		c.TPOTColumns = features.DefaultTPOTColumns
	}
	if c.KeepBundles <= 0 {
		c.KeepBundles = 5
	}
	c.Gate.setDefaults()
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// TargetStatus is what the trainer knows about one target's training.
type TargetStatus struct {
	LastAttempt    time.Time `json:"last_attempt,omitzero"`
	LastSuccess    time.Time `json:"last_success,omitzero"`
	LastError      string    `json:"last_error,omitempty"`
	LastErrorAt    time.Time `json:"last_error_at,omitzero"`
	Runs           int       `json:"runs"`
	Failures       int       `json:"failures"`
	LastDurationS  float64   `json:"last_duration_seconds"`
	TrainedOnGen   uint64    `json:"trained_on_generation"`
	WaitingFor     int       `json:"waiting_for_samples,omitempty"`
	ServingLinear  bool      `json:"serving_linear_only"`
	LastSkipReason string    `json:"last_skip_reason,omitempty"`
	// Live is the live error on arriving samples (drift.go).
	Live *LiveStatus `json:"live,omitempty"`
	// Gate is the publication gate's verdict on the newest candidate;
	// Rejected the newest one it refused (kept after later candidates
	// pass, so the reason stays visible); GateRejections counts refusals.
	Gate           *GateVerdict `json:"gate,omitempty"`
	Rejected       *GateVerdict `json:"rejected_candidate,omitempty"`
	GateRejections int          `json:"gate_rejections"`
}

// Status is a snapshot of the trainer's state.
type Status struct {
	XGBoostAvailable bool                    `json:"xgboost_available"`
	XGBoostError     string                  `json:"xgboost_error,omitempty"`
	Targets          map[string]TargetStatus `json:"targets"`
}

// LastSuccess is the latest successful retrain of any target; zero before
// the first.
func (s Status) LastSuccess() time.Time {
	var last time.Time
	for _, ts := range s.Targets {
		if ts.LastSuccess.After(last) {
			last = ts.LastSuccess
		}
	}
	return last
}

// Trainer retrains models from a store and publishes bundles. Retrain runs
// one at a time; Current and Status are safe to call concurrently with it.
type Trainer struct {
	cfg     Config
	db      *store.DB
	schemas [2]features.Schema

	current atomic.Pointer[model.Published]
	// epoch names the lineage this trainer publishes into (model.NewEpoch):
	// the newest saved bundle's, or a new one when there is none.
	// versionFloor is the highest version of the bundle directory's files
	// when none of them loaded: a new lineage there numbers above them, so
	// the prune by version never removes its bundles first.
	epoch        string
	versionFloor uint64
	// loaded is the bundle New loaded, nil without one: its models may be
	// an older trainer's, without measured spreads (fitTarget).
	loaded *model.Bundle
	// idleAfter is when xgboost may next run in the idle class (Unix ns),
	// pushed back when a run there was starved (fitConfig).
	idleAfter atomic.Int64

	retrainMu sync.Mutex // one retrain at a time
	statusMu  sync.Mutex
	status    [2]TargetStatus
	xgbErr    error
	live      *driftTracker
	tuneMu    sync.Mutex
	tuning    [2]tuning // by features.Target (select.go)
	history   history   // recent training runs, for the dashboard
	recent    *recentSamples

	// evidence is what each target's newest fit was measured on, for the
	// publication gate; evidenceGen the store generation of that fit.
	evidenceMu  sync.Mutex
	evidence    [2]gateEvidence
	evidenceGen [2]uint64

	// transfer is the KV-transfer target's state; guarded by statusMu.
	transfer     transferState
	transferLive transferLive

	// published is closed and replaced on every publication, for waiters.
	publishedMu sync.Mutex
	published   chan struct{}
	// arrived holds at most one pending wake-up of Run: samples were
	// stored while some target had no model (coldstart.go).
	arrived chan struct{}
}

// New makes a trainer over db and loads the newest valid bundle from
// cfg.BundleDir, if any. A missing xgboost binary is not an error: the
// trainer then fits linear models and says so in Status and metrics.
func New(cfg Config, db *store.DB) (*Trainer, error) {
	cfg.setDefaults()
	t := &Trainer{cfg: cfg, db: db, published: make(chan struct{}), arrived: make(chan struct{}, 1)}
	t.live = newDriftTracker(cfg.Drift, cfg.Now, cfg.Metrics)
	t.recent = &recentSamples{size: cfg.Gate.RecentRows}
	var err error
	if t.schemas[features.TTFT], err = features.NewSchema(cfg.TTFTColumns); err != nil {
		return nil, fmt.Errorf("ttft columns: %w", err)
	}
	if t.schemas[features.TPOT], err = features.NewSchema(cfg.TPOTColumns); err != nil {
		return nil, fmt.Errorf("tpot columns: %w", err)
	}
	if cfg.Fit.XGBoost != nil {
		if path, err := cfg.Fit.XGBoost.Available(); err != nil {
			t.xgbErr = err
			cfg.Logger.Error("xgboost binary not found: training LINEAR MODELS ONLY until it is installed (apt-get install xgboost)",
				"error", err)
		} else {
			cfg.Logger.Info("xgboost binary found", "path", path)
		}
	} else {
		t.xgbErr = errors.New("xgboost disabled by configuration")
	}
	if cfg.BundleDir != "" {
		pub, err := model.LoadNewestBundle(cfg.BundleDir, cfg.SigningKey, func(path string, err error) {
			cfg.Logger.Warn("skipping unreadable bundle", "path", path, "error", err)
		})
		if err != nil {
			return nil, err
		}
		if pub == nil {
			vs, err := model.BundleVersions(cfg.BundleDir)
			if err != nil {
				return nil, err
			}
			if len(vs) > 0 {
				t.versionFloor = vs[0]
			}
		}
		if pub != nil {
			t.current.Store(pub)
			t.loaded = pub.Bundle
			t.epoch = pub.Bundle.Epoch
			t.resumeTuning(pub.Bundle)
			for _, tg := range features.Targets {
				if m := pub.Bundle.Target(tg); m != nil {
					t.status[tg].TrainedOnGen = m.StoreGeneration
					t.status[tg].ServingLinear = m.Kind == model.KindLinear
				}
			}
			if m := pub.Bundle.Transfer; m != nil {
				t.transfer.status.TrainedOnGen = m.StoreGeneration
				t.transfer.tried, t.transfer.triedGen = true, m.StoreGeneration
			}
			cfg.Logger.Info("loaded saved bundle", "epoch", pub.Bundle.Epoch, "version", pub.Bundle.Version, "created_at", pub.Bundle.CreatedAt)
		}
	}
	if t.epoch == "" {
		// No saved bundle (a first start, a wiped or unreadable directory,
		// or none configured), or one of a release without epochs.
		t.epoch = model.NewEpoch(cfg.Now())
		cfg.Logger.Info("new bundle lineage", "epoch", t.epoch, "bundle_dir", cfg.BundleDir)
	}
	cfg.Metrics.observeXGBoost(t.xgbErr == nil)
	cfg.Metrics.watchAge(t.Current)
	cfg.Metrics.observeBundle(t.current.Load())
	return t, nil
}

// inBackground runs f at the training priority: niced (Config.Nice), never
// in the idle class. A thread of this process in the idle class gets no CPU
// while anything else wants it, yet it holds what the whole process needs:
// a garbage collection's stop-the-world waits for it to reach a safe point,
// and so does every goroutine waiting on a lock it took. With two other
// processes keeping both cores busy, that stalled the trainer's ingestion
// and its shutdown past 20 s. The xgboost processes share nothing with this
// one, and they may run idle (XGBoost.Idle).
func (t *Trainer) inBackground(f func()) {
	priority.RunNiced(t.cfg.Nice, f)
}

// Current is the newest published bundle, or nil before the first.
func (t *Trainer) Current() *model.Published { return t.current.Load() }

// Epoch names the lineage of the bundles this trainer publishes.
func (t *Trainer) Epoch() string { return t.epoch }

// Published returns a channel closed at the next publication.
func (t *Trainer) Published() <-chan struct{} {
	t.publishedMu.Lock()
	defer t.publishedMu.Unlock()
	return t.published
}

// Await returns the current bundle once it is one the caller does not
// hold (held reports false for it), or when wait has passed, ctx is done
// or stop is closed, whichever comes first: a long poll's wait for the
// next publication.
func (t *Trainer) Await(ctx context.Context, wait time.Duration, stop <-chan struct{}, held func(*model.Published) bool) *model.Published {
	if wait <= 0 {
		return t.Current()
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		next := t.Published() // taken before Current: no publication is missed
		pub := t.Current()
		if pub != nil && !held(pub) {
			return pub
		}
		select {
		case <-next:
		case <-timer.C:
			return t.Current()
		case <-ctx.Done():
			return t.Current()
		case <-stop:
			return t.Current()
		}
	}
}

// Status returns a snapshot of the trainer's state.
func (t *Trainer) Status() Status {
	t.statusMu.Lock()
	defer t.statusMu.Unlock()
	s := Status{XGBoostAvailable: t.xgbErr == nil, Targets: map[string]TargetStatus{}}
	if t.xgbErr != nil {
		s.XGBoostError = t.xgbErr.Error()
	}
	for _, tg := range features.Targets {
		ts := t.status[tg]
		ts.Live = t.live.status(tg)
		s.Targets[tg.String()] = ts
	}
	ts := t.transfer.status
	ts.Live = t.transferLive.status(t.live.cfg.Quantile)
	s.Targets[features.KVTransfer.String()] = ts
	return s
}

// Run retrains every Interval until ctx ends, and at once when live error
// rises well above the holdout error (ObserveServed, DriftConfig). A
// target's first model does not wait for the tick: it is trained as soon
// as the target has MinSamplesFresh samples (firstModels).
func (t *Trainer) Run(ctx context.Context) {
	tick := time.NewTicker(t.cfg.Interval)
	defer tick.Stop()
	t.firstModels(ctx) // samples stored before Run
	for {
		retrain := true
		select {
		case <-ctx.Done():
			return
		case <-t.arrived:
			retrain = false
		case <-tick.C:
		case <-t.live.triggered():
			t.cfg.Logger.Info("live error well above holdout error: retraining early, choosing configurations again")
			t.tuneAfterDrift()
		}
		// First models before the cycle's retrain, so that a tick falling
		// just after samples arrived does not make the first model wait
		// for its trees.
		t.firstModels(ctx)
		if !retrain {
			continue
		}
		if _, err := t.Retrain(ctx); err != nil && ctx.Err() == nil {
			t.cfg.Logger.Warn("retrain failed; keeping the last good bundle", "error", err)
		}
	}
}

// Retrain trains every target whose samples changed since its last model and
// that has enough of them, and publishes a new bundle when any target got a
// new model. It returns the published bundle, or nil when nothing changed.
// Targets train one after the other (see below), each with a
// single-threaded xgboost.
func (t *Trainer) Retrain(ctx context.Context) (*model.Published, error) {
	return t.retrain(ctx, pass{targets: [2]bool{true, true}})
}

// pass says which targets one retrain trains, and how.
type pass struct {
	targets [2]bool // by features.Target
	// linearOnly fits lines without trees: a first model in milliseconds.
	linearOnly bool
	// upgrade fits targets serving their linear first model again, new
	// samples or not, at the fresh threshold and the process's priority:
	// it gives them their trees.
	upgrade bool
}

// first reports whether p trains first models: their line or their trees.
func (p pass) first() bool { return p.linearOnly || p.upgrade }

// retrain is Retrain restricted and shaped by p.
func (t *Trainer) retrain(ctx context.Context, p pass) (*model.Published, error) {
	t.retrainMu.Lock()
	defer t.retrainMu.Unlock()

	prev := t.current.Load()
	var prevBundle *model.Bundle
	if prev != nil {
		prevBundle = prev.Bundle
	}
	t.statusMu.Lock()
	before := t.status // restored for targets whose new model is not published
	beforeTransfer := t.transfer
	t.statusMu.Unlock()
	var (
		results [2]*model.TargetModel
		errs    [2]error
	)
	// One target after the other, on one background thread: two at once took
	// both cores from predictions served beside the trainer (client p99 at
	// 5,000 requests/s while retraining: 7.0-8.3 ms, one at a time 3.5-4.1
	// ms, against 1.5 ms without retraining), for no gain in wall time on
	// two busy cores.
	run := t.inBackground
	if p.first() {
		// A first model (its line, then its trees) fits both targets at
		// once and at the process's priority, xgboost included. Until the
		// line is published the predictions it would be niced for are
		// 503s, and under load a niced fit of milliseconds waited tens of
		// them for a core; the trees, once in a target's life, are in
		// service in half the time on two cores, where niced beside busy
		// processes they took seconds (llm-d-router's integration test
		// reads both targets' trees about 2.5 s after its first samples).
		// Predictions served meanwhile may wait longer for that second,
		// once.
		run = func(f func()) { f() }
		var wg sync.WaitGroup
		for _, tg := range features.Targets {
			wg.Go(func() { results[tg], errs[tg] = t.retrainTarget(ctx, tg, prevBundle.Target(tg), p) })
		}
		wg.Wait()
	} else {
		run(func() {
			for _, tg := range features.Targets {
				results[tg], errs[tg] = t.retrainTarget(ctx, tg, prevBundle.Target(tg), p)
			}
		})
	}

	// The KV-transfer law fits in milliseconds; first-model passes leave it
	// to the next full one.
	var (
		transfer    *model.TransferModel
		transferErr error
	)
	if !p.first() {
		run(func() { transfer, transferErr = t.retrainTransfer(ctx, transferOf(prevBundle)) })
	}
	errs2 := append(errs[:], transferErr)
	if results[features.TTFT] == nil && results[features.TPOT] == nil && transfer == nil {
		return nil, errors.Join(errs2...)
	}
	next := &model.Bundle{Epoch: t.epoch, CreatedAt: t.cfg.Now().UTC(), XGBoostMissing: t.xgbErr != nil}
	if prevBundle != nil {
		next.Version = prevBundle.Version + 1
		next.TTFT, next.TPOT = prevBundle.TTFT, prevBundle.TPOT
		next.Transfer = prevBundle.Transfer
	} else {
		next.Version = t.versionFloor + 1
	}
	if results[features.TTFT] != nil {
		next.TTFT = results[features.TTFT]
	}
	if results[features.TPOT] != nil {
		next.TPOT = results[features.TPOT]
	}
	if transfer != nil {
		next.Transfer = transfer
	}
	// Encoding and writing the bundle is background work too (but for a
	// first model's).
	var (
		pub *model.Published
		err error
	)
	var refused [2]bool
	run(func() { pub, refused, err = t.publish(ctx, next, prevBundle) })
	for _, tg := range features.Targets {
		if refused[tg] {
			// The model in service stays: so does what the status says
			// of it. The generation stays the candidate's, so the same
			// samples are not fitted again for the same verdict.
			// A refusal is not a failure of the retrain: the gate did its
			// work, and Status says why (GateVerdict).
			t.setStatus(tg, func(s *TargetStatus) {
				s.LastSuccess, s.ServingLinear = before[tg].LastSuccess, before[tg].ServingLinear
			})
		}
	}
	if err != nil {
		// Nothing new is in service: say so, and leave the targets' last
		// success, generation and kind as they were, so the next cycle trains
		// them again even if no sample arrives (none will while the disk
		// is full).
		for _, tg := range features.Targets {
			if results[tg] != nil {
				t.setStatus(tg, func(s *TargetStatus) {
					s.LastSuccess, s.TrainedOnGen = before[tg].LastSuccess, before[tg].TrainedOnGen
					s.ServingLinear = before[tg].ServingLinear
					s.Failures++
					s.LastError, s.LastErrorAt = err.Error(), t.cfg.Now().UTC()
				})
			}
		}
		if transfer != nil {
			t.statusMu.Lock()
			t.transfer.tried, t.transfer.triedGen = beforeTransfer.tried, beforeTransfer.triedGen
			s := &t.transfer.status
			s.LastSuccess, s.TrainedOnGen = beforeTransfer.status.LastSuccess, beforeTransfer.status.TrainedOnGen
			s.Failures++
			s.LastError, s.LastErrorAt = err.Error(), t.cfg.Now().UTC()
			t.statusMu.Unlock()
		}
		return nil, errors.Join(append(errs2, err)...)
	}
	return pub, errors.Join(errs2...)
}

// publish passes a bundle's new models (those not in prev) through the
// publication gate, then encodes, writes and swaps in the bundle with the
// models that passed. Every bundle goes through here. It reports the
// targets whose candidate was refused, and publishes nothing (nil, no
// error) when no candidate is left.
func (t *Trainer) publish(ctx context.Context, b, prev *model.Bundle) (*model.Published, [2]bool, error) {
	refused := t.gate(ctx, b, prev)
	t.gateTransfer(b, prev) // its verdict is in the status
	if b.TTFT == prev.Target(features.TTFT) && b.TPOT == prev.Target(features.TPOT) && b.Transfer == transferOf(prev) {
		return nil, refused, nil
	}
	pub, err := t.write(b)
	if err == nil {
		for _, tg := range features.Targets {
			if m := b.Target(tg); m != nil && m != prev.Target(tg) {
				t.cfg.Metrics.observeQuality(tg, m)
			}
		}
		if m := b.Transfer; m != nil && m != transferOf(prev) {
			t.cfg.Metrics.observeTransferQuality(m)
		}
	}
	return pub, refused, err
}

// write encodes, writes and swaps in a bundle.
func (t *Trainer) write(b *model.Bundle) (*model.Published, error) {
	encoded, err := b.Encode(t.cfg.SigningKey)
	if err != nil {
		return nil, err
	}
	// Read the bundle back exactly as a predictor will: a bundle the
	// predictors would refuse is never published.
	if _, err := model.Decode(encoded, t.cfg.SigningKey); err != nil {
		t.cfg.Metrics.publishFailed()
		return nil, fmt.Errorf("publish bundle %d: it does not read back: %w", b.Version, err)
	}
	if t.cfg.BundleDir != "" {
		path, err := model.WriteBundle(t.cfg.BundleDir, b.Version, encoded)
		if err != nil {
			t.cfg.Metrics.publishFailed()
			return nil, fmt.Errorf("publish bundle %d: %w", b.Version, err)
		}
		if err := model.PruneBundles(t.cfg.BundleDir, t.cfg.KeepBundles); err != nil {
			t.cfg.Logger.Warn("pruning old bundles failed", "error", err)
		}
		t.cfg.Logger.Info("published bundle", "version", b.Version, "path", path, "bytes", len(encoded))
	}
	pub := &model.Published{Bundle: b, Encoded: encoded}
	t.current.Store(pub)
	t.cfg.Metrics.observeBundle(pub)
	t.publishedMu.Lock()
	close(t.published)
	t.published = make(chan struct{})
	t.publishedMu.Unlock()
	return pub, nil
}

// retrainTarget returns a new model for tg, or nil when there is nothing to
// do (no new samples, too few) or training failed (error set).
func (t *Trainer) retrainTarget(ctx context.Context, tg features.Target, prev *model.TargetModel, p pass) (*model.TargetModel, error) {
	if !p.targets[tg] {
		return nil, nil
	}
	gen := t.db.Generation(tg)
	t.statusMu.Lock()
	st := &t.status[tg]
	// A first model refused by the gate is not fitted again on the same
	// samples either: the verdict would be the same.
	refusedFirst := st.Gate != nil && !st.Gate.Published && st.Gate.Candidate.TrainedOnGen == gen
	if (prev != nil || refusedFirst) && st.TrainedOnGen == gen && !p.upgrade {
		st.LastSkipReason = "no new samples"
		t.statusMu.Unlock()
		return nil, nil
	}
	t.statusMu.Unlock()

	fresh := prev == nil || p.upgrade
	have, need := t.samplesFor(tg, fresh)
	if have < need {
		what := "training samples"
		if fresh {
			what = "samples"
		}
		t.setStatus(tg, func(s *TargetStatus) {
			s.WaitingFor = need - have
			s.LastSkipReason = fmt.Sprintf("%d %s, need %d", have, what, need)
		})
		return nil, nil
	}

	start := t.cfg.Now()
	m, err := t.fitTarget(ctx, tg, gen, p)
	dur := time.Since(start)
	t.cfg.Metrics.observeRun(tg, dur, err)
	t.recordRun(tg, start, dur, m, err)
	if err != nil {
		t.cfg.Logger.Warn("training failed", "target", tg, "error", err, "seconds", dur.Seconds())
	}
	t.setStatus(tg, func(s *TargetStatus) {
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
	switch {
	case m == nil:
		return nil, fmt.Errorf("%s: %w", tg, err)
	case err != nil && prev != nil && (prev.Kind != model.KindLinear || p.upgrade):
		// The trees failed but a tree model is in service: keep it rather
		// than downgrade to a line. Nor is a line published again in place
		// of the line the upgrade was to give trees.
		return nil, fmt.Errorf("%s: %w", tg, err)
	}
	m.StoreGeneration = gen
	t.setStatus(tg, func(s *TargetStatus) {
		s.LastSuccess = start.UTC()
		s.TrainedOnGen = gen
		s.ServingLinear = m.Kind == model.KindLinear
	})
	return m, err
}

func (t *Trainer) fitTarget(ctx context.Context, tg features.Target, gen uint64, p pass) (*model.TargetModel, error) {
	train, holdout, err := t.db.SnapshotNewest(ctx, tg, t.cfg.MaxTrainRows)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	t.keepEvidence(tg, gen, train, holdout)
	schema := t.schemas[tg]
	cfg := t.fitConfig(tg)
	switch {
	case p.linearOnly:
		cfg.XGBoost = nil
	case p.upgrade && cfg.XGBoost != nil:
		x := *cfg.XGBoost
		x.Nice, x.Idle = 0, false // see retrain
		cfg.XGBoost = &x
		cfg.CrossFitFolds = firstTreesFolds
		cfg.Support.CarryOnly = true
	}
	cfg.Forward = t.live.forwardSamples(tg)
	cfg.CoverageQuantile = t.live.cfg.Quantile
	cfg.Levels = t.live.levelAdjustment(tg)
	cfg.OutOfRangeLevels = t.live.outOfRangeLevelAdjustment(tg)
	if p := t.current.Load(); p != nil {
		cfg.Support.Previous = p.Bundle.Target(tg)
	}
	trainDS := BuildDataset(schema, tg, train)
	// A first model's passes are for speed: they keep the choice in force
	// (the first candidate before any) and make none. A choice costs a
	// full store about 0.9 CPU-s beyond the fit, a measurement of the
	// extrapolation with trees about 0.7: not both in one retrain, which
	// would be over the 2 s budget (docs/PERFORMANCE.md). A retrain that
	// chooses carries the spreads in service; the first retrain after
	// loading a bundle without spreads (an older trainer's), which has
	// none to carry, measures and leaves the choice to the next.
	choose := !p.first()
	if prev := cfg.Support.Previous; choose && cfg.Support.Folds > 0 && prev != nil && prev == t.loaded.Target(tg) &&
		len(carriedSpreads(prev)) == 0 {
		choose = false
	}
	t.tuneMu.Lock()
	before := t.tuning[tg].choice
	t.tuneMu.Unlock()
	cfg, sel, err := t.tune(ctx, tg, schema, trainDS, cfg, choose)
	if err != nil {
		return nil, err
	}
	t.tuneMu.Lock()
	chose := t.tuning[tg].choice != before
	t.tuneMu.Unlock()
	if chose {
		cfg.Support.CarryOnly = true
	}
	m, err := Fit(ctx, schema, trainDS, BuildDataset(schema, tg, holdout), cfg)
	if m != nil {
		m.Selection = sel
	}
	return m, err
}

// firstTreesFolds is the cross-fit of a first model's trees: its
// calibration's out-of-fold residuals come from 2 folds, not
// FitConfig.CrossFitFolds, so the trees cost 3 xgboost runs per target
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

// fitConfig is the fit configuration for tg's next model. Its xgboost runs
// go to the idle class only once tg has trees in service (until then there
// is nothing to serve, or only the line of a first model whose trees are
// awaited; on a busy machine an idle-class run would first wait out its
// grace for nothing) and not within idleBackoff of a starved run.
func (t *Trainer) fitConfig(tg features.Target) FitConfig {
	cfg := t.cfg.Fit
	if t.xgbErr != nil {
		cfg.XGBoost = nil
	}
	if cfg.XGBoost == nil || !cfg.XGBoost.Idle {
		return cfg
	}
	x := *cfg.XGBoost
	cfg.XGBoost = &x
	var cur *model.Bundle
	if p := t.current.Load(); p != nil {
		cur = p.Bundle
	}
	now := t.cfg.Now()
	if m := cur.Target(tg); m == nil || m.Trees == nil || now.UnixNano() < t.idleAfter.Load() {
		x.Idle = false
		return cfg
	}
	x.Starved = func() { t.idleAfter.Store(t.cfg.Now().Add(idleBackoff).UnixNano()) }
	return cfg
}

func (t *Trainer) setStatus(tg features.Target, f func(*TargetStatus)) {
	t.statusMu.Lock()
	f(&t.status[tg])
	t.statusMu.Unlock()
}
