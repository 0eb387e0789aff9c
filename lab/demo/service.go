package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/service"
	"github.com/headroomhq/headroom/xgboost"
)

// ServiceOptions configure the in-process trainer and predictor.
type ServiceOptions struct {
	// Dir holds the sample store; empty means a temporary directory that
	// Close removes.
	Dir string
	// XGBoostBinary is the xgboost CLI; empty means "xgboost" on PATH.
	// NoXGBoost trains linear models only, as the service does when the
	// binary is missing.
	XGBoostBinary string
	NoXGBoost     bool
	// Quantile, when set, makes the predictor serve that calibrated
	// quantile (its quantile objective) instead of the mean.
	Quantile float64
	// Start is the time the trainer's clock reads until SetTime: a
	// simulation's time 0. Zero leaves it the wall clock until then.
	Start  time.Time
	Logger *slog.Logger // nil discards
}

// Service is a trainer and a predictor running in this process as two
// services, as a deployment runs them: each behind its real HTTP handler
// on its own loopback port, the predictor pulling bundles from the trainer
// over HTTP. Nothing retrains or syncs on a wall-clock timer: Retrain does
// both, so a simulation can drive the service's cadence in simulated time.
type Service struct {
	TrainerURL   string
	PredictorURL string

	trainer, predictor *service.Service
	// clock is the trainer's: the wall clock until SetTime.
	clock   simulatedClock
	stop    context.CancelFunc
	running []chan error // one per Run
	tempDir string
}

// StartService opens a store and starts both servers.
func StartService(opts ServiceOptions) (_ *Service, err error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	dir := opts.Dir
	if dir == "" {
		if s.tempDir, err = os.MkdirTemp("", "headroom-demo-"); err != nil {
			return nil, fmt.Errorf("demo service: %w", err)
		}
		dir = s.tempDir
	}
	common := service.DefaultConfig()
	common.DataDir, common.Logger, common.Manual, common.ShutdownGrace = dir, log, true, 5*time.Second
	if opts.Quantile != 0 {
		common.Objective, common.Quantile = predictor.Quantile, opts.Quantile
	}

	tc := service.DefaultTrainerConfig()
	tc.Listen = "127.0.0.1:0"
	// The store is the demo's scratch space, so it skips fsync: a crash
	// loses only a run that is gone anyway, and ingest stays off the
	// simulation's critical path.
	tc.Store.NoSync = true
	// A run is repeatable: the holdout follows the simulation's clock and
	// a fixed secret, not the wall clock and a random one.
	tc.Store = tc.Store.ForReplay()
	// The simulation shares the cores and waits for each retrain: the fits
	// run at its priority, not niced or in the idle class.
	tc.Nice, tc.XGBoost = 0, nil
	if !opts.Start.IsZero() {
		s.SetTime(opts.Start)
	}
	tc.Now = s.clock.now
	if !opts.NoXGBoost {
		tc.XGBoost = &xgboost.CLI{Binary: opts.XGBoostBinary, Timeout: xgboost.DefaultTimeout}
	}
	cfg := common
	cfg.Trainer = &tc
	if s.trainer, err = service.New(cfg); err != nil {
		return nil, fmt.Errorf("demo service: %w", err)
	}
	s.TrainerURL = s.trainer.TrainerURL()

	pc := service.DefaultPredictorConfig()
	pc.Listen, pc.TrainerURL = "127.0.0.1:0", s.TrainerURL
	cfg = common
	cfg.DataDir = "" // the predictor keeps no bundle of its own
	cfg.Predictor = &pc
	if s.predictor, err = service.New(cfg); err != nil {
		return nil, fmt.Errorf("demo service: %w", err)
	}
	s.PredictorURL = s.predictor.PredictorURL()

	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	for _, svc := range []*service.Service{s.trainer, s.predictor} {
		done := make(chan error, 1)
		s.running = append(s.running, done)
		go func() { done <- svc.Run(ctx) }()
	}
	return s, nil
}

// Client is a router client of s. Prediction calls have their own, shorter
// deadline (Options.PredictTimeout); the minute bounds ingest and model-info
// calls.
func (s *Service) Client() *Client {
	return &Client{TrainerURL: s.TrainerURL, PredictorURL: s.PredictorURL, HTTP: &http.Client{Timeout: time.Minute}}
}

// Retrain runs one retrain attempt of the trainer (what its timer does every
// retrain interval) and then has the predictor pull the bundle over HTTP
// (what its sync loop does). It reports whether a new bundle went into
// service. A failed fit of one target is not an error when a bundle was
// still published: the trainer keeps the last good model.
func (s *Service) Retrain(ctx context.Context) (bool, error) {
	pub, err := s.trainer.Retrain(ctx)
	if pub == nil && err != nil {
		return false, fmt.Errorf("retrain: %w", err)
	}
	swapped, err := s.predictor.Sync(ctx)
	if err != nil {
		return false, err
	}
	return swapped, nil
}

// SetTime sets the trainer's clock to t, the simulation's time, where it
// stays until set again: the samples it is then sent arrive, and the
// retrains it then runs happen, at t.
func (s *Service) SetTime(t time.Time) { s.clock.ns.Store(t.UnixNano()) }

// simulatedClock reads the time last stored in it, the wall clock before
// any. The simulation sets it between calls to the service, whose
// handlers read it: an atomic, so that neither waits for the other.
type simulatedClock struct{ ns atomic.Int64 }

func (c *simulatedClock) now() time.Time {
	if ns := c.ns.Load(); ns != 0 {
		return time.Unix(0, ns).UTC()
	}
	return time.Now()
}

// XGBoostAvailable reports whether the trainer fits trees (else lines only).
func (s *Service) XGBoostAvailable() bool { return s.trainer.Trainer().Status().XGBoostAvailable }

// Close stops the servers and removes the temporary store.
func (s *Service) Close() error {
	var errs []error
	if s.stop != nil {
		s.stop()
	}
	for _, done := range s.running {
		if err := <-done; err != nil {
			errs = append(errs, fmt.Errorf("demo service: %w", err))
		}
	}
	for _, svc := range []*service.Service{s.predictor, s.trainer} {
		if svc != nil {
			if err := svc.Close(); err != nil {
				errs = append(errs, fmt.Errorf("demo service: %w", err))
			}
		}
	}
	if s.tempDir != "" {
		if err := os.RemoveAll(s.tempDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
