// Package trainer turns stored samples into published model bundles: the
// retrain loop, the fits of each target, and the live error tracking that
// can call a retrain early.
package trainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/priority"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer/fit"
)

// Config configures a Trainer. The zero value of each field means its
// default, the Default constants below; New refuses a negative count or
// interval.
type Config struct {
	// Interval between retrain attempts (DefaultInterval).
	Interval time.Duration
	// MinSamplesFresh is the number of samples a target needs for its
	// first model (DefaultMinSamplesFresh), held-out ones included: it is
	// what a router must send before it gets predictions, and a tenth of
	// its samples are held out. MinSamples is the number of training
	// samples it needs to retrain once it has one (DefaultMinSamples);
	// below it, a model is refitted when the training samples have grown
	// earlyGrowth times past its own (retrainNeeds). The reference
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
	// runs, fit.Options.XGBoost's Idle, once their target has a model.
	Nice int
	Fit  fit.Options
	// Select configures self-tuning: the choice, per target, among
	// candidate configurations derived from Fit (select.go).
	Select SelectConfig
	// Drift configures live error tracking and early retraining.
	Drift DriftConfig
	// Gate is the publication gate every new model passes (gate.go).
	Gate GateConfig
	// Transfer configures the KV-transfer model's fit (transfer.go).
	Transfer fit.TransferOptions
	// Columns are the feature columns of each per-pod target; a target
	// not in the map takes features.DefaultColumns.
	Columns map[features.Target][]string
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

// The retrain cadence and thresholds the service runs with (Config); the
// service's configuration takes them from here.
const (
	DefaultInterval        = 10 * time.Second
	DefaultMinSamplesFresh = 10
	DefaultMinSamples      = 100
)

// DefaultMaxTrainRows is the brief's full store (40 buckets of 500): a
// fit of that size takes under 2 s. A store stratified more finely holds
// more (the default scheme's 360 buckets, 180,000 samples per target; fits
// of the 140,000 that 280 buckets held took 5-8 s per target and 235 MB),
// so fits sample it evenly instead.
const DefaultMaxTrainRows = 20000

// validate refuses what no default stands for: a negative count or
// interval, a quantile outside (0, 1).
func (c *Config) validate() error {
	var errs []error
	for _, n := range []struct {
		name string
		v    int64
	}{{"interval", int64(c.Interval)}, {"min samples", int64(c.MinSamples)}, {"min samples fresh", int64(c.MinSamplesFresh)},
		{"nice", int64(c.Nice)}, {"keep bundles", int64(c.KeepBundles)}} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("trainer: %s %d is negative", n.name, n.v))
		}
	}
	if q := c.Drift.Quantile; q != 0 && !(q > 0 && q < 1) {
		errs = append(errs, fmt.Errorf("trainer: quantile %v, want a value strictly between 0 and 1", q))
	}
	return errors.Join(errs...)
}

func (c *Config) setDefaults() {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.MinSamplesFresh == 0 {
		c.MinSamplesFresh = DefaultMinSamplesFresh
	}
	if c.MinSamples == 0 {
		c.MinSamples = DefaultMinSamples
	}
	if c.MaxTrainRows == 0 {
		c.MaxTrainRows = DefaultMaxTrainRows
	}
	if c.Fit.Kind == "" {
		def := fit.DefaultOptions()
		def.XGBoost = c.Fit.XGBoost
		c.Fit = def
	}
	c.Select.setDefaults(c.Fit)
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
	cfg Config
	db  *store.DB
	// targets are the lifecycles of features.Targets, in its order
	// (target.go).
	targets []target

	current atomic.Pointer[bundle.Published]
	// epoch names the lineage this trainer publishes into (bundle.NewEpoch):
	// the newest saved bundle's, or a new one when there is none.
	// versionFloor is the highest version of the bundle directory's files
	// when none of them loaded: a new lineage there numbers above them, so
	// the prune by version never removes its bundles first.
	epoch        string
	versionFloor uint64
	// loaded is the bundle New loaded, nil without one: its models may be
	// an older trainer's, without measured spreads (podModels.fit).
	loaded *model.Bundle
	// idleAfter is when xgboost may next run in the idle class (Unix ns),
	// pushed back when a run there was starved (fitConfig).
	idleAfter atomic.Int64

	retrainMu sync.Mutex // one retrain at a time
	xgbErr    error
	drift     *driftTracker
	history   history // recent training runs, for the dashboard

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
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	t := &Trainer{cfg: cfg, db: db, published: make(chan struct{}), arrived: make(chan struct{}, 1)}
	t.drift = newDriftTracker(cfg.Drift, cfg.Now, cfg.Metrics)
	if err := t.newTargets(); err != nil {
		return nil, err
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
		pub, err := bundle.LoadNewest(cfg.BundleDir, cfg.SigningKey, func(path string, err error) {
			cfg.Logger.Warn("skipping unreadable bundle", "path", path, "error", err)
		})
		if err != nil {
			return nil, err
		}
		if pub == nil {
			vs, err := bundle.Versions(cfg.BundleDir)
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
			for _, tg := range t.targets {
				tg.resume(pub.Bundle)
			}
			cfg.Logger.Info("loaded saved bundle", "epoch", pub.Bundle.Epoch, "version", pub.Bundle.Version, "created_at", pub.Bundle.CreatedAt)
		}
	}
	if t.epoch == "" {
		// No saved bundle (a first start, a wiped or unreadable directory,
		// or none configured), or one of a release without epochs.
		t.epoch = bundle.NewEpoch(cfg.Now())
		cfg.Logger.Info("new bundle lineage", "epoch", t.epoch, "bundle_dir", cfg.BundleDir)
	}
	cfg.Metrics.observeXGBoost(t.xgbErr == nil)
	cfg.Metrics.watchAge(t.Current)
	if pub := t.current.Load(); pub != nil {
		cfg.Metrics.observeBundle(pub)
		for _, tg := range t.targets {
			tg.observeBundle(pub.Bundle)
		}
	}
	return t, nil
}

// newTargets makes the lifecycle of every target, in the order of
// features.Targets: the per-pod targets' line and trees with their
// configured columns, the KV transfer's bandwidth law. A new target is a
// new case here, with its models (target.go).
func (t *Trainer) newTargets() error {
	for _, tg := range features.Targets {
		switch {
		case tg.PerPod():
			cols, ok := t.cfg.Columns[tg]
			if !ok {
				cols = features.DefaultColumns(tg)
			}
			schema, err := features.NewSchema(cols)
			if err != nil {
				return fmt.Errorf("%s columns: %w", tg, err)
			}
			ch := &chooser{tg: tg, cfg: t.cfg.Select, now: t.cfg.Now, logger: t.cfg.Logger, metrics: t.cfg.Metrics}
			pod := &podModels{tg: tg, schema: schema, t: t, choose: ch, places: t.db.Scheme()}
			t.targets = append(t.targets, newLifecycle(t, tg, models[*model.TargetModel](pod),
				targetOptions{firstModels: true, liveGate: true}))
		default:
			// KV transfer, split TTFT: a law fits in milliseconds at every retrain with new
			// transfers, and /predict/pairs ranks the no-split options
			// without it: no first-model passes. Its candidates are judged on the holdout alone, as
			// they always were: judged on the live samples too, other laws
			// are published and the P/D demo routes differently, a change
			// to measure on its own before it is made.
			t.targets = append(t.targets, newLifecycle(t, tg, models[*model.TransferModel](&transferModels{tg: tg, t: t}), targetOptions{}))
		}
	}
	return nil
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
func (t *Trainer) Current() *bundle.Published { return t.current.Load() }

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
func (t *Trainer) Await(ctx context.Context, wait time.Duration, stop <-chan struct{}, held func(*bundle.Published) bool) *bundle.Published {
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
	s := Status{XGBoostAvailable: t.xgbErr == nil, Targets: map[string]TargetStatus{}}
	if t.xgbErr != nil {
		s.XGBoostError = t.xgbErr.Error()
	}
	for _, tg := range t.targets {
		s.Targets[tg.id().String()] = tg.report()
	}
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
		case <-t.drift.triggered():
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
func (t *Trainer) Retrain(ctx context.Context) (*bundle.Published, error) {
	return t.retrain(ctx, pass{})
}

// pass says which targets one retrain trains, and how.
type pass struct {
	targets []features.Target // nil: every target
	// linearOnly fits lines without trees: a first model in milliseconds.
	linearOnly bool
	// upgrade fits targets serving their linear first model again, new
	// samples or not, at the fresh threshold and the process's priority:
	// it gives them their trees.
	upgrade bool
}

// first reports whether p trains first models: their line or their trees.
func (p pass) first() bool { return p.linearOnly || p.upgrade }

// includes reports whether p trains tg.
func (p pass) includes(tg features.Target) bool {
	return p.targets == nil || slices.Contains(p.targets, tg)
}

// tuneAfterDrift asks every target to choose its configuration again at
// its next retrain.
func (t *Trainer) tuneAfterDrift() {
	for _, tg := range t.targets {
		tg.afterDrift()
	}
}

// retrain is Retrain restricted and shaped by p: for each target, fit a
// candidate and leave it to the publication; assemble one bundle of the
// candidates and the models in service; publish it through the gate; and
// settle each target, which rolls its status back when the bundle was not
// published.
func (t *Trainer) retrain(ctx context.Context, p pass) (*bundle.Published, error) {
	t.retrainMu.Lock()
	defer t.retrainMu.Unlock()

	var prev *model.Bundle
	if pub := t.current.Load(); pub != nil {
		prev = pub.Bundle
	}
	errs := make([]error, len(t.targets))
	// One target after the other, on one background thread: two at once took
	// both cores from predictions served beside the trainer (client p99 at
	// 5,000 requests/s while retraining: 7.0-8.3 ms, one at a time 3.5-4.1
	// ms, against 1.5 ms without retraining), for no gain in wall time on
	// two busy cores.
	run := t.inBackground
	if p.first() {
		// A first model (its line, then its trees) fits its targets at
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
		for i, tg := range t.targets {
			wg.Go(func() { errs[i] = tg.fit(ctx, p, prev) })
		}
		wg.Wait()
	} else {
		run(func() {
			for i, tg := range t.targets {
				errs[i] = tg.fit(ctx, p, prev)
			}
		})
	}
	if !slices.ContainsFunc(t.targets, target.fitted) {
		return nil, errors.Join(errs...)
	}
	next := &model.Bundle{Version: t.versionFloor + 1}
	if prev != nil {
		*next = *prev // every model in service, then the candidates
		next.Version = prev.Version + 1
		next.Checksum = ""
	}
	next.Epoch, next.CreatedAt, next.XGBoostMissing = t.epoch, t.cfg.Now().UTC(), t.xgbErr != nil
	for _, tg := range t.targets {
		tg.install(next)
	}
	// Encoding and writing the bundle is background work too (but for a
	// first model's).
	var (
		pub *bundle.Published
		err error
	)
	run(func() { pub, err = t.publish(next, prev) })
	for _, tg := range t.targets {
		tg.settle(next, pub != nil, err)
	}
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	return pub, errors.Join(errs...)
}

// publish passes a bundle's new models (those not in prev) through the
// publication gate, then encodes, writes and swaps in the bundle with the
// models that passed. Every bundle goes through here. It publishes nothing
// (nil, no error) when no candidate is left.
func (t *Trainer) publish(b, prev *model.Bundle) (*bundle.Published, error) {
	changed := false
	for _, tg := range t.targets {
		tg.gate(b, prev)
		changed = changed || tg.changed(b, prev)
	}
	if !changed {
		return nil, nil
	}
	return t.write(b)
}

// write encodes, writes and swaps in a bundle.
func (t *Trainer) write(b *model.Bundle) (*bundle.Published, error) {
	encoded, err := bundle.Encode(b, t.cfg.SigningKey)
	if err != nil {
		return nil, err
	}
	// Read the bundle back exactly as a predictor will: a bundle the
	// predictors would refuse is never published.
	if _, err := bundle.Decode(encoded, t.cfg.SigningKey); err != nil {
		t.cfg.Metrics.publishFailed()
		return nil, fmt.Errorf("publish bundle %d: it does not read back: %w", b.Version, err)
	}
	if t.cfg.BundleDir != "" {
		path, err := bundle.Write(t.cfg.BundleDir, b.Version, encoded)
		if err != nil {
			t.cfg.Metrics.publishFailed()
			return nil, fmt.Errorf("publish bundle %d: %w", b.Version, err)
		}
		if err := bundle.Prune(t.cfg.BundleDir, t.cfg.KeepBundles); err != nil {
			t.cfg.Logger.Warn("pruning old bundles failed", "error", err)
		}
		t.cfg.Logger.Info("published bundle", "version", b.Version, "path", path, "bytes", len(encoded))
	}
	pub := &bundle.Published{Bundle: b, Encoded: encoded}
	t.current.Store(pub)
	t.cfg.Metrics.observeBundle(pub)
	t.publishedMu.Lock()
	close(t.published)
	t.published = make(chan struct{})
	t.publishedMu.Unlock()
	return pub, nil
}
