package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/headroomhq/headroom/api"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
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
	Logger   *slog.Logger // nil discards
}

// Service is a trainer and a predictor running in this process, each behind
// its real HTTP handler on its own loopback port. Nothing retrains or syncs
// on a wall-clock timer: Retrain does both, so a simulation can drive the
// service's cadence in simulated time.
type Service struct {
	TrainerURL   string
	PredictorURL string

	db      *store.DB
	trainer *trainer.Trainer
	pred    *predictor.Predictor
	syncer  *predictor.Syncer
	servers []*http.Server
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
	// The store is the demo's scratch space, so it skips fsync: a crash
	// loses only a run that is gone anyway, and ingest stays off the
	// simulation's critical path.
	if s.db, err = store.Open(filepath.Join(dir, "samples.db"), store.Options{NoSync: true}); err != nil {
		return nil, fmt.Errorf("demo service: %w", err)
	}
	fit := trainer.DefaultFitConfig()
	if !opts.NoXGBoost {
		fit.XGBoost = &xgboost.CLI{Binary: opts.XGBoostBinary}
	}
	if s.trainer, err = trainer.New(trainer.Config{Fit: fit, Logger: log}, s.db); err != nil {
		return nil, fmt.Errorf("demo service: %w", err)
	}
	objective, q := predictor.Mean, 0.9
	if opts.Quantile != 0 {
		objective, q = predictor.Quantile, opts.Quantile
	}
	if s.pred, err = predictor.New(objective, q); err != nil {
		return nil, fmt.Errorf("demo service: %w", err)
	}

	trainerURL, err := s.serve(api.NewTrainerHandler(s.trainer, s.db, api.TrainerOptions{}))
	if err != nil {
		return nil, err
	}
	s.syncer = &predictor.Syncer{TrainerURL: trainerURL, Predictor: s.pred, Logger: log,
		Client: &http.Client{Timeout: 10 * time.Second}}
	predictorURL, err := s.serve(api.NewPredictorHandler(s.pred, api.PredictorOptions{
		TrainerURL: trainerURL, Reload: s.syncer.SyncOnce,
	}))
	if err != nil {
		return nil, err
	}
	s.TrainerURL, s.PredictorURL = trainerURL, predictorURL
	return s, nil
}

// serve runs h on a fresh loopback port and returns its base URL.
func (s *Service) serve(h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("demo service: listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	s.servers = append(s.servers, srv)
	go srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed at Close
	return "http://" + ln.Addr().String(), nil
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
	swapped, err := s.syncer.SyncOnce(ctx)
	if err != nil {
		return false, err
	}
	return swapped, nil
}

// XGBoostAvailable reports whether the trainer fits trees (else lines only).
func (s *Service) XGBoostAvailable() bool { return s.trainer.Status().XGBoostAvailable }

// Close stops the servers and removes the temporary store.
func (s *Service) Close() error {
	var errs []error
	for _, srv := range s.servers {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("demo service shutdown: %w", err))
		}
		cancel()
	}
	if s.db != nil {
		if err := s.db.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.tempDir != "" {
		if err := os.RemoveAll(s.tempDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
