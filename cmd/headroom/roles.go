package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/headroomhq/headroom/api"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
)

// roles is the set of service roles one process runs, wired together.
type roles struct {
	log   *slog.Logger
	grace time.Duration

	db      *store.DB
	trainer *trainer.Trainer
	pred    *predictor.Predictor
	syncer  *predictor.Syncer

	trainerHandler   http.Handler
	predictorHandler http.Handler

	background []func(ctx context.Context) // loops to run while serving
}

// startRoles builds the trainer role when t is set and the predictor role
// when p is set. With both, the predictor takes every bundle from the
// trainer in memory the moment it is published.
func startRoles(ctx context.Context, c *commonFlags, t *trainerFlags, p *predictorFlags, stderr io.Writer) (*roles, error) {
	log, err := c.logger(stderr)
	if err != nil {
		return nil, err
	}
	tokens, err := c.tokens()
	if err != nil {
		return nil, err
	}
	key, err := c.signingKey()
	if err != nil {
		return nil, err
	}
	r := &roles{log: log, grace: c.shutdownGrace}

	if t != nil {
		if err := t.check(); err != nil {
			return nil, err
		}
		warnOpenListener(log, t.listen, tokens, "trainer")
		if r.db, err = openStore(c, t, log); err != nil {
			return nil, err
		}
		reg := newRegistry()
		if r.trainer, err = newTrainer(c, t, r.db, reg, log); err != nil {
			r.close()
			return nil, err
		}
		reg.MustRegister(trainer.NewStoreCollector(r.db))
		obj, err := predictor.ParseObjective(c.objective)
		if err != nil {
			r.close()
			return nil, fmt.Errorf("--objective: %w", err)
		}
		r.trainerHandler = api.NewTrainerHandler(r.trainer, r.db, api.TrainerOptions{
			Limits: c.limits(), Tokens: tokens, Objective: obj, Quantile: c.quantile, Registry: reg,
			MaxConcurrentIngest: t.maxIngest, MaxIngestBytes: t.maxIngestBytes,
			Draining: ctx.Done(), // the servers drain when ctx ends (serve)
		})
		r.background = append(r.background, r.trainer.Run)
		log.Info("trainer ready", "data_dir", c.dataDir, "samples", r.db.Counts(),
			"retrain_interval", t.retrainInterval)
	}

	if p != nil {
		warnOpenListener(log, p.listen, tokens, "predictor")
		if r.pred, err = newPredictor(c); err != nil {
			r.close()
			return nil, err
		}
		reg := newRegistry()
		metrics := predictor.NewMetrics(reg)
		metrics.WatchAge(r.pred)
		opts := api.PredictorOptions{Limits: c.limits(), Tokens: tokens, Registry: reg}
		if r.trainer != nil {
			r.background = append(r.background, func(ctx context.Context) { r.followTrainer(ctx, metrics) })
			opts.TrainerURL = "in-process"
		} else {
			if p.syncNice < 0 || p.syncNice > 19 {
				r.close()
				return nil, fmt.Errorf("--sync-nice %d: want 0 to 19", p.syncNice)
			}
			if err := r.loadLocalBundles(c, p, key, metrics); err != nil {
				return nil, err
			}
			r.syncer = &predictor.Syncer{
				TrainerURL: p.trainerURL, Interval: p.syncInterval, SigningKey: key, AuthToken: tokens.Read,
				SaveDir: filepath.Join(c.dataDir, "predictor-bundles"), Nice: p.syncNice, Predictor: r.pred, Logger: log, Metrics: metrics,
			}
			r.background = append(r.background, r.syncer.Run)
			opts.TrainerURL, opts.SyncEvery = p.trainerURL, p.syncInterval
			opts.Reload = r.syncer.SyncOnce
		}
		r.predictorHandler = api.NewPredictorHandler(r.pred, opts)
	}
	return r, nil
}

// loadLocalBundles serves --bundle-file, or else the last bundle this
// predictor saved, so it answers before the trainer does.
func (r *roles) loadLocalBundles(c *commonFlags, p *predictorFlags, key []byte, m *predictor.Metrics) error {
	if p.bundleFile != "" {
		pub, err := predictor.LoadFile(r.pred, p.bundleFile, key)
		if err != nil {
			return err
		}
		m.ObserveBundle(pub)
		r.log.Info("serving bundle from file", "path", p.bundleFile, "version", pub.Bundle.Version)
		return nil
	}
	pub, err := predictor.LoadDir(r.pred, filepath.Join(c.dataDir, "predictor-bundles"), key)
	if err != nil {
		r.log.Warn("no usable saved bundle", "error", err)
		return nil
	}
	if pub != nil {
		m.ObserveBundle(pub)
		r.log.Info("serving saved bundle until the trainer answers", "version", pub.Bundle.Version)
	}
	return nil
}

// followTrainer swaps in every bundle the in-process trainer publishes.
func (r *roles) followTrainer(ctx context.Context, m *predictor.Metrics) {
	for {
		next := r.trainer.Published() // take the channel before reading Current: no publication is missed
		if pub := r.trainer.Current(); pub != nil && r.pred.Swap(pub, time.Now().UTC()) {
			m.ObserveBundle(pub)
		}
		select {
		case <-ctx.Done():
			return
		case <-next:
		}
	}
}

// serve runs the background loops and one HTTP server per address until ctx
// ends, then drains the servers and stops the loops.
func (r *roles) serve(ctx context.Context, servers map[string]http.Handler) error {
	loopCtx, stopLoops := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	for _, run := range r.background {
		loops.Add(1)
		go func() { defer loops.Done(); run(loopCtx) }()
	}
	srvCtx, stopServers := context.WithCancel(ctx)
	errc := make(chan error, len(servers))
	for addr, h := range servers {
		role := "trainer"
		if h == r.predictorHandler {
			role = "predictor"
		}
		go func() { errc <- serveHTTP(srvCtx, addr, h, r.grace, r.log, role) }()
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
	loops.Wait()
	return errors.Join(errs...)
}

// close releases the store. It runs after every server has drained, so no
// acknowledged write is cut off.
func (r *roles) close() {
	if r.db != nil {
		if err := r.db.Close(); err != nil {
			r.log.Error("closing the store", "error", err)
		} else {
			r.log.Info("store closed")
		}
	}
}
