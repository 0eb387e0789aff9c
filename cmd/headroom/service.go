package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/headroomhq/headroom/api"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
	"github.com/headroomhq/headroom/xgboost"
)

// commonFlags are shared by every service role.
type commonFlags struct {
	dataDir        string
	logLevel       string
	logFormat      string
	objective      string
	quantile       float64
	readToken      string
	writeToken     string
	tokenFile      string
	signingKeyFile string
	maxBodyBytes   int64
	maxRows        int
	shutdownGrace  time.Duration
}

func (f *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dataDir, "data-dir", "./data", "directory for the sample store and bundles")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&f.objective, "objective", "mean", "prediction served: mean (central estimate) or quantile")
	fs.Float64Var(&f.quantile, "quantile", 0.9, "quantile served with --objective=quantile, in (0, 1)")
	fs.StringVar(&f.readToken, "read-token", "", "bearer token required for predictions and model downloads (empty: open)")
	fs.StringVar(&f.writeToken, "write-token", "", "bearer token required for ingest, flush and reload (empty: open)")
	fs.StringVar(&f.tokenFile, "token-file", "", "file with lines read=TOKEN and/or write=TOKEN (overrides the token flags)")
	fs.StringVar(&f.signingKeyFile, "signing-key-file", "", "file holding an HMAC key: the trainer signs bundles, predictors refuse unsigned ones")
	fs.Int64Var(&f.maxBodyBytes, "max-body-bytes", 64<<20, "largest request body accepted")
	fs.IntVar(&f.maxRows, "max-rows", 10000, "most rows in one prediction request")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", 15*time.Second, "time to finish in-flight requests on SIGTERM")
}

func (f *commonFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.logFormat)
}

func (f *commonFlags) tokens() (api.Tokens, error) {
	t := api.Tokens{Read: f.readToken, Write: f.writeToken}
	if f.tokenFile == "" {
		return t, nil
	}
	data, err := os.ReadFile(f.tokenFile)
	if err != nil {
		return t, fmt.Errorf("--token-file: %w", err)
	}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		switch {
		case ok && strings.TrimSpace(k) == "read":
			t.Read = strings.TrimSpace(v)
		case ok && strings.TrimSpace(k) == "write":
			t.Write = strings.TrimSpace(v)
		default:
			return t, fmt.Errorf("--token-file %s line %d: want read=TOKEN or write=TOKEN", f.tokenFile, i+1)
		}
	}
	return t, nil
}

func (f *commonFlags) signingKey() ([]byte, error) {
	if f.signingKeyFile == "" {
		return nil, nil
	}
	key, err := os.ReadFile(f.signingKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--signing-key-file: %w", err)
	}
	key = []byte(strings.TrimSpace(string(key)))
	if len(key) < 16 {
		return nil, fmt.Errorf("--signing-key-file %s: key shorter than 16 bytes", f.signingKeyFile)
	}
	return key, nil
}

func (f *commonFlags) limits() api.Limits {
	return api.Limits{MaxBodyBytes: f.maxBodyBytes, MaxRows: f.maxRows}
}

// trainerFlags configure the training role.
type trainerFlags struct {
	listen          string
	retrainInterval time.Duration
	minSamples      int
	minSamplesFresh int
	maxTrainRows    int
	bucketCapacity  int
	holdoutFraction float64
	holdoutCapacity int
	bucketScheme    string
	storeReset      bool
	maxIngest       int
	maxIngestBytes  int64
	xgboostBin      string
	xgboostTimeout  time.Duration
	trainNice       int
	trainIdle       bool
	trainIdleGrace  time.Duration
	noXGBoost       bool
	modelKind       string
	xgb             xgboost.Params
}

// check refuses trainer flags out of range, before anything starts:
// niceness setpriority would not take, an idle grace that would never let
// xgboost run idle, ingest limits that would admit nothing.
func (f *trainerFlags) check() error {
	if f.trainNice < 0 || f.trainNice > 19 {
		return fmt.Errorf("--train-nice %d: want 0 to 19", f.trainNice)
	}
	if f.trainIdleGrace <= 0 {
		return fmt.Errorf("--train-idle-grace %v: must be positive", f.trainIdleGrace)
	}
	if f.maxIngest < 1 {
		return fmt.Errorf("--max-concurrent-ingest %d: want at least 1", f.maxIngest)
	}
	if f.maxIngestBytes < 1 {
		return fmt.Errorf("--max-ingest-bytes %d: want at least 1", f.maxIngestBytes)
	}
	return nil
}

func (f *trainerFlags) register(fs *flag.FlagSet) {
	def := xgboost.DefaultParams()
	fs.StringVar(&f.listen, "trainer-listen", "127.0.0.1:8000", "address of the training server")
	fs.DurationVar(&f.retrainInterval, "retrain-interval", 10*time.Second, "time between retrain attempts")
	fs.IntVar(&f.minSamples, "min-samples", 100, "training samples a target needs to retrain once it has a model")
	fs.IntVar(&f.minSamplesFresh, "min-samples-fresh", 10, "samples a target needs for its first model, held-out ones included; it is trained at once, a linear model first")
	fs.IntVar(&f.maxTrainRows, "max-train-rows", trainer.DefaultMaxTrainRows, "most training samples one fit reads per target, the newest of every store bucket in even shares (negative: all)")
	fs.IntVar(&f.bucketCapacity, "bucket-capacity", 500, "samples kept per store bucket (oldest evicted)")
	fs.Float64Var(&f.holdoutFraction, "holdout-fraction", 0.1, "fraction of samples held out for evaluation")
	fs.IntVar(&f.holdoutCapacity, "holdout-capacity", 1000, "held-out samples kept per target")
	fs.StringVar(&f.bucketScheme, "bucket-scheme", store.DefaultSchemeName, "store stratification: comma-separated dimensions of kv10, prefix4, queue5, prompt9, prompt")
	fs.BoolVar(&f.storeReset, "store-reset", false, "if the store file is corrupt or incompatible, move it aside and start empty")
	fs.IntVar(&f.maxIngest, "max-concurrent-ingest", api.DefaultMaxConcurrentIngest, "training uploads handled at once (those waiting for the store share one commit); more wait briefly, then get 503")
	fs.Int64Var(&f.maxIngestBytes, "max-ingest-bytes", api.DefaultMaxIngestBytes, "request-body bytes of the training uploads handled at once (an upload without Content-Length counts as --max-body-bytes)")
	fs.StringVar(&f.xgboostBin, "xgboost-bin", "xgboost", "xgboost CLI binary")
	fs.DurationVar(&f.xgboostTimeout, "xgboost-timeout", 60*time.Second, "longest one xgboost training run may take")
	fs.BoolVar(&f.trainIdle, "train-idle", true, "run xgboost in Linux's idle scheduling class, on CPU time nothing else wants, once the target has a model; a run starved for --train-idle-grace runs again at --train-nice")
	fs.DurationVar(&f.trainIdleGrace, "train-idle-grace", xgboost.DefaultIdleGrace, "how long an idle-class xgboost run may wait for spare CPU before it runs again niced")
	fs.IntVar(&f.trainNice, "train-nice", 10, "scheduling niceness of training (0-19; 0: the trainer's own): the fits' own work and the bundle's publication always, xgboost when not idle; so predictions on shared cores come first")
	fs.BoolVar(&f.noXGBoost, "no-xgboost", false, "train linear models only")
	fs.StringVar(&f.modelKind, "model-kind", string(model.KindResidual), "linear, log-trees, or linear+log-trees")
	fs.IntVar(&f.xgb.Rounds, "xgb-rounds", def.Rounds, "boosting rounds (trees)")
	fs.IntVar(&f.xgb.MaxDepth, "xgb-max-depth", def.MaxDepth, "tree depth")
	fs.Float64Var(&f.xgb.Eta, "xgb-eta", def.Eta, "learning rate")
	fs.Float64Var(&f.xgb.Subsample, "xgb-subsample", def.Subsample, "row subsample per tree")
	fs.Float64Var(&f.xgb.ColsampleBytree, "xgb-colsample", def.ColsampleBytree, "column subsample per tree")
	fs.Float64Var(&f.xgb.MinChildWeight, "xgb-min-child-weight", def.MinChildWeight, "minimum hessian per leaf")
	fs.Float64Var(&f.xgb.Gamma, "xgb-gamma", def.Gamma, "minimum loss reduction to split")
	fs.Float64Var(&f.xgb.Lambda, "xgb-lambda", def.Lambda, "L2 regularisation")
	fs.Float64Var(&f.xgb.Alpha, "xgb-alpha", def.Alpha, "L1 regularisation")
	f.xgb.Seed = def.Seed
}

// predictorFlags configure the prediction role.
type predictorFlags struct {
	listen       string
	trainerURL   string
	syncInterval time.Duration
	syncNice     int
	bundleFile   string
}

func (f *predictorFlags) register(fs *flag.FlagSet, standalone bool) {
	fs.StringVar(&f.listen, "predictor-listen", "127.0.0.1:8001", "address of the prediction server")
	if standalone {
		fs.StringVar(&f.trainerURL, "trainer-url", "http://127.0.0.1:8000", "training server to pull bundles from")
		fs.DurationVar(&f.syncInterval, "sync-interval", 30*time.Second, "time between bundle polls")
		fs.IntVar(&f.syncNice, "sync-nice", 10, "scheduling niceness of loading a new bundle (0-19; 0: the predictor's own), so predictions served meanwhile come first")
		fs.StringVar(&f.bundleFile, "bundle-file", "", "bundle to serve at start, before the trainer answers")
	}
}

// applyPredictHostPort honours the reference's PREDICT_HOST / PREDICT_PORT
// when the listen address was not set any other way.
func (f *predictorFlags) applyPredictHostPort(fs *flag.FlagSet, lookup func(string) (string, bool)) {
	set := false
	fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == "predictor-listen" })
	if _, ok := lookup(envName("predictor-listen")); set || ok {
		return
	}
	host, hok := lookup("PREDICT_HOST")
	port, pok := lookup("PREDICT_PORT")
	if !hok && !pok {
		return
	}
	h, p, _ := net.SplitHostPort(f.listen)
	if hok {
		h = host
	}
	if pok {
		p = port
	}
	f.listen = net.JoinHostPort(h, p)
}

// parseFlags parses args then fills unset flags from the environment.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	return applyEnv(fs, os.LookupEnv)
}

// openStore opens the sample store, moving a bad file aside when asked to.
func openStore(c *commonFlags, t *trainerFlags, log *slog.Logger) (*store.DB, error) {
	scheme, err := store.ParseScheme(t.bucketScheme)
	if err != nil {
		return nil, fmt.Errorf("--bucket-scheme: %w", err)
	}
	if err := os.MkdirAll(c.dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	path := filepath.Join(c.dataDir, "samples.db")
	opts := store.Options{
		BucketCapacity:  t.bucketCapacity,
		HoldoutFraction: t.holdoutFraction,
		HoldoutCapacity: t.holdoutCapacity,
		Scheme:          scheme,
	}
	db, err := store.Open(path, opts)
	if err != nil && t.storeReset && (errors.Is(err, store.ErrCorrupt) || errors.Is(err, store.ErrIncompatible)) {
		moved, merr := store.MoveAside(path)
		if merr != nil {
			return nil, fmt.Errorf("%w; moving it aside also failed: %v", err, merr)
		}
		log.Warn("store could not be opened; moved aside, starting empty", "error", err, "moved_to", moved)
		db, err = store.Open(path, opts)
	}
	return db, err
}

// newTrainer builds the training role over db.
func newTrainer(c *commonFlags, t *trainerFlags, db *store.DB, reg prometheus.Registerer, log *slog.Logger) (*trainer.Trainer, error) {
	key, err := c.signingKey()
	if err != nil {
		return nil, err
	}
	if err := t.xgb.Validate(); err != nil {
		return nil, err
	}
	fit := trainer.DefaultFitConfig()
	fit.Kind = model.Kind(t.modelKind)
	fit.Params = t.xgb
	if !t.noXGBoost {
		fit.XGBoost = &xgboost.CLI{Binary: t.xgboostBin, Timeout: t.xgboostTimeout, Nice: t.trainNice,
			Idle: t.trainIdle, IdleGrace: t.trainIdleGrace}
	}
	return trainer.New(trainer.Config{
		Interval:        t.retrainInterval,
		MinSamples:      t.minSamples,
		MinSamplesFresh: t.minSamplesFresh,
		MaxTrainRows:    t.maxTrainRows,
		Nice:            t.trainNice,
		Fit:             fit,
		Drift:           driftConfig(c),
		BundleDir:       filepath.Join(c.dataDir, "bundles"),
		SigningKey:      key,
		Logger:          log,
		Metrics:         trainer.NewMetrics(reg),
	}, db)
}

// driftConfig tracks coverage of the quantile predictors are configured
// with, and tells the tracker what served predictions are: means under the
// mean objective, that quantile under the quantile objective.
func driftConfig(c *commonFlags) trainer.DriftConfig {
	d := trainer.DriftConfig{Quantile: c.quantile}
	if c.objective == string(predictor.Quantile) {
		d.ServedQuantile = c.quantile
	}
	return d
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// newPredictor builds a predictor from the common flags.
func newPredictor(c *commonFlags) (*predictor.Predictor, error) {
	obj, err := predictor.ParseObjective(c.objective)
	if err != nil {
		return nil, fmt.Errorf("--objective: %w", err)
	}
	return predictor.New(obj, c.quantile)
}

// warnOpenListener says loudly when a server listens beyond loopback with
// no tokens.
func warnOpenListener(log *slog.Logger, addr string, tokens api.Tokens, role string) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return
	}
	ip := net.ParseIP(host)
	loopback := host == "localhost" || (ip != nil && ip.IsLoopback())
	if !loopback && (tokens.Read == "" || tokens.Write == "") {
		log.Warn("listening beyond loopback without bearer tokens: anyone who can reach this address can "+
			"write samples or read models; set --write-token/--read-token or --token-file", "role", role, "addr", addr)
	}
}

// serveHTTP runs handler on addr until ctx ends, then drains in-flight
// requests for up to grace. Timeouts are generous on idle connections (the
// router's Go client keeps them 90 s) and strict on slow request headers.
func serveHTTP(ctx context.Context, addr string, handler http.Handler, grace time.Duration, log *slog.Logger, role string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s listen %s: %w", role, addr, err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	log.Info("listening", "role", role, "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("%s server: %w", role, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("%s shutdown: %w", role, err)
	}
	log.Info("stopped", "role", role)
	return nil
}

func init() {
	// gin's mode is process-wide; release mode keeps it from logging every
	// route at start.
	gin.SetMode(gin.ReleaseMode)
}
