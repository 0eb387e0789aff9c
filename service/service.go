// Package service assembles Headroom's roles into a running process: the
// sample store, the trainer and its retrain loop, the predictor and the
// way it gets bundles (in memory from a trainer beside it, or by polling
// one elsewhere), their HTTP servers, and a shutdown that drains requests
// before the store closes. The command, the demo and the end-to-end tests
// all build the service here, from a Config that is checked before
// anything is opened.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/headroomhq/headroom/api"
	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
	"github.com/headroomhq/headroom/trainer/fit"
)

// Service is one process's roles, built and listening. Run serves until
// its context ends; Close releases what New opened.
type Service struct {
	cfg Config
	log *slog.Logger

	db          *store.DB
	trainer     *trainer.Trainer
	pred        *predictor.Predictor
	predMetrics *predictor.Metrics
	syncer      *predictor.Syncer

	trainerSrv, predictorSrv *server
	// draining is closed as Run begins to shut down, so that requests
	// held open (a predictor's long poll for the next bundle) answer at
	// once instead of holding the shutdown for its whole grace.
	draining     chan struct{}
	stopDraining func()

	mu      sync.Mutex
	started bool // Run was called
	closed  bool
}

// New validates cfg, then opens the store, builds the roles and binds
// their listeners, so that an address in use is reported here, not after
// the service has started. Nothing is opened when cfg is invalid.
func New(cfg Config) (_ *Service, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{cfg: cfg, log: cfg.Logger, draining: make(chan struct{})}
	s.stopDraining = sync.OnceFunc(func() { close(s.draining) })
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if cfg.Trainer != nil {
		if err := s.buildTrainer(); err != nil {
			return nil, err
		}
	}
	if cfg.Predictor != nil {
		if err := s.buildPredictor(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Service) buildTrainer() error {
	c, t := &s.cfg, s.cfg.Trainer
	warnOpenListener(s.log, t.Listen, c.Tokens, "trainer")
	var err error
	if s.db, err = openStore(c.DataDir, t, s.log); err != nil {
		return err
	}
	reg := newRegistry()
	fitOpts := fit.DefaultOptions()
	fitOpts.Kind, fitOpts.Params, fitOpts.XGBoost = t.Kind, t.Params, t.XGBoost
	drift := trainer.DriftConfig{Quantile: c.Quantile, FixedLevels: t.FixedLevels}
	if c.Objective == predictor.Quantile {
		// Served predictions are that quantile, not means.
		drift.ServedQuantile = c.Quantile
	}
	s.trainer, err = trainer.New(trainer.Config{
		Interval:        t.RetrainInterval,
		Now:             t.Now,
		MinSamples:      t.MinSamples,
		MinSamplesFresh: t.MinSamplesFresh,
		MaxTrainRows:    t.MaxTrainRows,
		Nice:            t.Nice,
		Fit:             fitOpts,
		Select:          trainer.SelectConfig{Off: !t.SelfTune},
		Drift:           drift,
		Gate:            trainer.GateConfig{Force: t.PublishForce},
		Transfer:        fit.TransferOptions{BytesPerToken: t.KVBytesPerToken},
		BundleDir:       filepath.Join(c.DataDir, "bundles"),
		SigningKey:      c.SigningKey,
		Logger:          s.log,
		Metrics:         trainer.NewMetrics(reg),
	}, s.db)
	if err != nil {
		return fmt.Errorf("trainer: %w", err)
	}
	reg.MustRegister(trainer.NewStoreCollector(s.db))
	handler := api.NewTrainerHandler(s.trainer, s.db, api.TrainerOptions{
		Limits: c.Limits, Tokens: c.Tokens, Objective: c.Objective, Quantile: c.Quantile, Registry: reg,
		AllowedHosts: c.AllowedHosts, MaxConcurrentIngest: t.MaxConcurrentIngest, MaxIngestBytes: t.MaxIngestBytes,
		MaxBundleWatchers: t.MaxBundleWatchers, MaxBundleWatchersPerClient: t.MaxBundleWatchersPerClient,
		Draining: s.draining,
	})
	if s.trainerSrv, err = listen("trainer", t.Listen, handler, s.maxConns(), reg); err != nil {
		return err
	}
	s.log.Info("trainer ready", "data_dir", c.DataDir, "samples", s.db.Counts(), "retrain_interval", t.RetrainInterval)
	return nil
}

func (s *Service) buildPredictor() error {
	c, p := &s.cfg, s.cfg.Predictor
	warnOpenListener(s.log, p.Listen, c.Tokens, "predictor")
	var err error
	if s.pred, err = predictor.New(c.Objective, c.Quantile); err != nil {
		return fmt.Errorf("predictor: %w", err)
	}
	reg := newRegistry()
	s.predMetrics = predictor.NewMetrics(reg)
	s.predMetrics.WatchAge(s.pred)
	opts := api.PredictorOptions{Limits: c.Limits, Tokens: c.Tokens, Registry: reg, AllowedHosts: c.AllowedHosts,
		MaxConcurrentPredictions: p.MaxConcurrentPredictions, MaxPredictBytes: p.MaxPredictBytes,
		MaxLargePredictions: p.MaxLargePredictions, PairsK: p.PairsK}
	if s.trainer != nil {
		opts.TrainerURL = "in-process"
		s.swapIn(s.trainer.Current()) // a bundle the trainer loaded from disk
	} else {
		saveDir := ""
		if c.DataDir != "" {
			saveDir = filepath.Join(c.DataDir, "predictor-bundles")
		}
		if err := s.loadLocalBundle(p.BundleFile, saveDir); err != nil {
			return err
		}
		s.syncer = &predictor.Syncer{
			TrainerURL: p.TrainerURL, Interval: p.SyncInterval, Client: p.Client, SigningKey: c.SigningKey,
			AuthToken: c.Tokens.Read, SaveDir: saveDir, Nice: p.SyncNice, Predictor: s.pred, Logger: s.log,
			Metrics: s.predMetrics,
		}
		opts.TrainerURL, opts.SyncEvery, opts.Reload = p.TrainerURL, p.SyncInterval, s.syncer.Reload
	}
	if s.predictorSrv, err = listen("predictor", p.Listen, api.NewPredictorHandler(s.pred, opts), s.maxConns(), reg); err != nil {
		return err
	}
	return nil
}

// maxConns is the connections each server keeps open at most:
// Config.MaxConnections, or the process's share of its descriptors.
func (s *Service) maxConns() int {
	if s.cfg.MaxConnections > 0 {
		return s.cfg.MaxConnections
	}
	roles := 0
	if s.cfg.Trainer != nil {
		roles++
	}
	if s.cfg.Predictor != nil {
		roles++
	}
	return defaultMaxConns(roles)
}

// openStore opens the sample store, moving a bad file aside when the
// configuration allows it.
func openStore(dataDir string, t *TrainerConfig, log *slog.Logger) (*store.DB, error) {
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	path := filepath.Join(dataDir, "samples.db")
	db, err := store.Open(path, t.Store)
	if err != nil && t.StoreReset && (errors.Is(err, store.ErrCorrupt) || errors.Is(err, store.ErrIncompatible)) {
		moved, merr := store.MoveAside(path)
		if merr != nil {
			return nil, fmt.Errorf("%w; moving it aside also failed: %v", err, merr)
		}
		log.Warn("store could not be opened; moved aside, starting empty", "error", err, "moved_to", moved)
		db, err = store.Open(path, t.Store)
	}
	return db, err
}

// loadLocalBundle serves bundleFile, or else the last bundle saved in
// saveDir, so a standalone predictor answers before the trainer does.
func (s *Service) loadLocalBundle(bundleFile, saveDir string) error {
	if bundleFile != "" {
		pub, err := predictor.LoadFile(s.pred, bundleFile, s.cfg.SigningKey)
		if err != nil {
			return err
		}
		s.predMetrics.ObserveBundle(pub)
		s.log.Info("serving bundle from file", "path", bundleFile, "version", pub.Bundle.Version)
		return nil
	}
	if saveDir == "" {
		return nil
	}
	pub, err := predictor.LoadDir(s.pred, saveDir, s.cfg.SigningKey)
	if err != nil {
		s.log.Warn("no usable saved bundle", "error", err)
		return nil
	}
	if pub != nil {
		s.predMetrics.ObserveBundle(pub)
		s.log.Info("serving saved bundle until the trainer answers", "version", pub.Bundle.Version)
	}
	return nil
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// swapIn puts pub into service on the in-process predictor.
func (s *Service) swapIn(pub *bundle.Published) {
	if pub != nil && s.pred.Swap(pub, time.Now().UTC()) {
		s.predMetrics.ObserveBundle(pub)
	}
}

// followTrainer swaps in every bundle the in-process trainer publishes.
func (s *Service) followTrainer(ctx context.Context) {
	for {
		next := s.trainer.Published() // take the channel before reading Current: no publication is missed
		s.swapIn(s.trainer.Current())
		select {
		case <-ctx.Done():
			return
		case <-next:
		}
	}
}

// Run serves until ctx ends or a server fails, running the retrain loop
// and the bundle sync beside (unless Config.Manual). Then it shuts down
// in order, each step bounded by Config.ShutdownGrace: the servers stop
// accepting and finish in-flight requests, then the loops stop (a retrain
// under way is cancelled). It returns the servers' failures, and an error
// if a step overran its deadline. Run may be called once.
func (s *Service) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started || s.closed {
		s.mu.Unlock()
		return errors.New("service: Run called twice, or after Close")
	}
	s.started = true
	s.mu.Unlock()

	loopCtx, stopLoops := context.WithCancel(context.Background())
	defer stopLoops()
	var loops sync.WaitGroup
	for _, loop := range s.loops() {
		loops.Go(func() { loop(loopCtx) })
	}

	servers := s.servers()
	srvCtx, stopServers := context.WithCancel(ctx)
	defer stopServers()
	context.AfterFunc(srvCtx, s.stopDraining)
	errc := make(chan error, len(servers))
	for _, srv := range servers {
		go func() { errc <- srv.serve(srvCtx, s.cfg.ShutdownGrace, s.log) }()
	}
	var errs []error
	for range servers {
		if err := <-errc; err != nil {
			errs = append(errs, err)
			stopServers() // one server failing stops the process
		}
	}
	stopServers()

	stopLoops()
	stopped := make(chan struct{})
	go func() { loops.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(s.cfg.ShutdownGrace):
		errs = append(errs, fmt.Errorf("service: retrain or sync loop still running %v after shutdown began", s.cfg.ShutdownGrace))
	}
	return errors.Join(errs...)
}

// loops are the background work Run runs beside the servers.
func (s *Service) loops() []func(context.Context) {
	var loops []func(context.Context)
	if s.cfg.Manual {
		return nil
	}
	if s.trainer != nil {
		loops = append(loops, s.trainer.Run)
		if s.pred != nil {
			loops = append(loops, s.followTrainer)
		}
	}
	if s.syncer != nil {
		loops = append(loops, s.syncer.Run)
	}
	return loops
}

func (s *Service) servers() []*server {
	var servers []*server
	for _, srv := range []*server{s.trainerSrv, s.predictorSrv} {
		if srv != nil {
			servers = append(servers, srv)
		}
	}
	return servers
}

// Close releases the listeners (if Run never served them) and closes the
// store. Call it after Run has returned: Run drains the servers, so no
// acknowledged write is cut off by the store closing.
func (s *Service) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, srv := range s.servers() {
		if err := srv.closeListener(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.db != nil {
		if err := s.db.Close(); err != nil {
			s.log.Error("closing the store", "error", err)
			errs = append(errs, fmt.Errorf("close store: %w", err))
		} else {
			s.log.Info("store closed")
		}
	}
	return errors.Join(errs...)
}

// Retrain runs one retrain attempt now, as the retrain loop does every
// interval; a trainer beside a predictor puts the new bundle into service
// before it returns. It returns the bundle published, if any.
func (s *Service) Retrain(ctx context.Context) (*bundle.Published, error) {
	if s.trainer == nil {
		return nil, errors.New("service: Retrain without a trainer")
	}
	pub, err := s.trainer.Retrain(ctx)
	if s.pred != nil {
		s.swapIn(pub)
	}
	return pub, err
}

// Sync has a standalone predictor poll its trainer once, as the sync loop
// does every interval. It reports whether a new bundle went into service.
func (s *Service) Sync(ctx context.Context) (bool, error) {
	if s.syncer == nil {
		return false, errors.New("service: Sync without a standalone predictor")
	}
	return s.syncer.SyncOnce(ctx)
}

// TrainerURL is the training server's base URL ("" without a trainer).
func (s *Service) TrainerURL() string { return s.trainerSrv.url() }

// PredictorURL is the prediction server's base URL ("" without a
// predictor).
func (s *Service) PredictorURL() string { return s.predictorSrv.url() }

// Predictor is the prediction role's predictor, nil without that role.
func (s *Service) Predictor() *predictor.Predictor { return s.pred }

// Trainer is the trainer role's trainer, nil without that role: for status
// pages.
func (s *Service) Trainer() *trainer.Trainer { return s.trainer }
