package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/headroomhq/headroom/api"
	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/service"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/xgboost"
)

// commonFlags are shared by every service role. Their defaults are
// service.DefaultConfig's.
type commonFlags struct {
	cfg            service.Config // the settings that are flags as they are
	logLevel       string
	logFormat      string
	objective      string
	tokenFile      string
	signingKeyFile string
}

func (f *commonFlags) register(fs *flag.FlagSet) {
	def := service.DefaultConfig()
	fs.StringVar(&f.cfg.DataDir, "data-dir", def.DataDir, "directory for the sample store and bundles")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&f.objective, "objective", string(def.Objective), "prediction served: mean (central estimate) or quantile")
	fs.Float64Var(&f.cfg.Quantile, "quantile", def.Quantile, "quantile served with --objective=quantile, in (0, 1)")
	fs.StringVar(&f.cfg.Tokens.Read, "read-token", "", "bearer token required for predictions and model downloads (empty: open)")
	fs.StringVar(&f.cfg.Tokens.Write, "write-token", "", "bearer token required for ingest, flush and reload (empty: open)")
	fs.StringVar(&f.tokenFile, "token-file", "", "file with lines read=TOKEN and/or write=TOKEN (overrides the token flags)")
	fs.StringVar(&f.signingKeyFile, "signing-key-file", "", "file holding an HMAC key: the trainer signs bundles, predictors refuse unsigned ones")
	fs.Int64Var(&f.cfg.Limits.MaxBodyBytes, "max-body-bytes", def.Limits.MaxBodyBytes, "largest request body accepted")
	fs.IntVar(&f.cfg.Limits.MaxRows, "max-rows", def.Limits.MaxRows, "most rows in one prediction request")
	fs.IntVar(&f.cfg.Limits.MaxPairCandidates, "max-pair-candidates", def.Limits.MaxPairCandidates, "most prefill, and most decode, candidates in one /predict/pairs request")
	fs.IntVar(&f.cfg.Limits.MaxPairs, "max-pairs", def.Limits.MaxPairs, "most pairs (prefill × decode candidates) one /predict/pairs request may rank; more get 422")
	fs.Func("allowed-hosts", "comma-separated host names ingest, flush and reload may be addressed to when no write token is set, besides localhost and IP addresses (a DNS-rebinding page's name is refused)", func(v string) error {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				f.cfg.AllowedHosts = append(f.cfg.AllowedHosts, h)
			}
		}
		return nil
	})
	fs.IntVar(&f.cfg.MaxConnections, "max-connections", 0, "connections each server keeps open; past it the oldest not serving a request is closed (0: the descriptor limit, less 64, shared by the servers)")
	fs.DurationVar(&f.cfg.ShutdownGrace, "shutdown-grace", def.ShutdownGrace, "time to finish in-flight requests, then to stop retraining, on SIGTERM")
}

// config is the service configuration the common flags describe, with the
// files they name read and logs going to w; the roles are added by the
// caller.
func (f *commonFlags) config(w io.Writer) (service.Config, error) {
	c := f.cfg
	var err error
	if c.Logger, err = f.logger(w); err != nil {
		return c, err
	}
	if c.Tokens, err = f.tokens(); err != nil {
		return c, err
	}
	if c.SigningKey, err = f.signingKey(); err != nil {
		return c, err
	}
	c.Objective = predictor.Objective(f.objective) // checked by Validate
	return c, nil
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
	t := f.cfg.Tokens
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
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		var dst *string
		switch {
		case ok && k == "read":
			dst = &t.Read
		case ok && k == "write":
			dst = &t.Write
		default:
			return t, fmt.Errorf("--token-file %s line %d: want read=TOKEN or write=TOKEN", f.tokenFile, i+1)
		}
		// An empty token means "open": a line that names a token and
		// gives none is a mistake (a variable that expanded to nothing),
		// and taking it would open what the line was written to guard.
		if v == "" {
			return t, fmt.Errorf("--token-file %s line %d: empty %s token; remove the line to leave those routes open", f.tokenFile, i+1, k)
		}
		*dst = v
	}
	return t, nil
}

// signingKey reads --signing-key-file; its length is checked with the rest
// of the configuration.
func (f *commonFlags) signingKey() ([]byte, error) {
	if f.signingKeyFile == "" {
		return nil, nil
	}
	key, err := os.ReadFile(f.signingKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--signing-key-file: %w", err)
	}
	return []byte(strings.TrimSpace(string(key))), nil
}

// trainerFlags configure the training role. Their defaults are
// service.DefaultTrainerConfig's.
type trainerFlags struct {
	cfg          service.TrainerConfig // the settings that are flags as they are
	bucketScheme string
	xgb          xgboost.CLI
	noXGBoost    bool
	modelKind    string
}

func (f *trainerFlags) register(fs *flag.FlagSet) {
	def := service.DefaultTrainerConfig()
	f.cfg.Params.Seed = def.Params.Seed
	fs.StringVar(&f.cfg.Listen, "trainer-listen", def.Listen, "address of the training server")
	fs.DurationVar(&f.cfg.RetrainInterval, "retrain-interval", def.RetrainInterval, "time between retrain attempts")
	fs.IntVar(&f.cfg.MinSamples, "min-samples", def.MinSamples, "training samples a target needs to retrain at every tick once it has a model (below them it retrains when they have doubled since its model)")
	fs.IntVar(&f.cfg.MinSamplesFresh, "min-samples-fresh", def.MinSamplesFresh, "samples a target needs for its first model, held-out ones included; it is trained at once, a linear model first")
	fs.IntVar(&f.cfg.MaxTrainRows, "max-train-rows", def.MaxTrainRows, "most training samples one fit reads per target, the newest of every store bucket in even shares (negative: all)")
	fs.IntVar(&f.cfg.Store.BucketCapacity, "bucket-capacity", def.Store.BucketCapacity, "samples kept per store bucket (oldest evicted)")
	fs.Float64Var(&f.cfg.Store.HoldoutFraction, "holdout-fraction", def.Store.HoldoutFraction, "fraction of samples held out for evaluation")
	fs.IntVar(&f.cfg.Store.HoldoutCapacity, "holdout-capacity", def.Store.HoldoutCapacity, "held-out samples kept per target")
	fs.IntVar(&f.cfg.Store.HoldoutSpread, "holdout-spread", def.Store.HoldoutSpread, "samples arriving in one minute take at most 1/N of a target's holdout (the rest of its side goes to training), so no burst replaces it")
	fs.StringVar(&f.bucketScheme, "bucket-scheme", store.DefaultSchemeName, "store stratification: comma-separated dimensions of kv10, prefix4, queue5, prompt9, prompt")
	fs.BoolVar(&f.cfg.StoreReset, "store-reset", false, "if the store file is corrupt or incompatible, move it aside and start empty")
	fs.IntVar(&f.cfg.MaxConcurrentIngest, "max-concurrent-ingest", def.MaxConcurrentIngest, "training uploads handled at once (those waiting for the store share one commit); more wait briefly, then get 503")
	fs.Int64Var(&f.cfg.MaxIngestBytes, "max-ingest-bytes", def.MaxIngestBytes, "request-body bytes of the training uploads handled at once (an upload without Content-Length counts as --max-body-bytes)")
	fs.IntVar(&f.cfg.MaxBundleWatchers, "max-bundle-watchers", def.MaxBundleWatchers, "long polls for a new bundle (GET /model/bundle?wait=, one per predictor) held at once; more get 503 at once and poll instead")
	fs.IntVar(&f.cfg.MaxBundleWatchersPerClient, "max-bundle-watchers-per-client", def.MaxBundleWatchersPerClient, "long polls for a new bundle one client address may hold; more get 429 at once")
	fs.StringVar(&f.xgb.Binary, "xgboost-bin", def.XGBoost.Binary, "xgboost CLI binary")
	fs.DurationVar(&f.xgb.Timeout, "xgboost-timeout", def.XGBoost.Timeout, "longest one xgboost training run may take")
	fs.BoolVar(&f.xgb.Idle, "train-idle", def.XGBoost.Idle, "run xgboost in Linux's idle scheduling class, on CPU time nothing else wants, once the target has a model; a run starved for --train-idle-grace runs again at --train-nice")
	fs.DurationVar(&f.xgb.IdleGrace, "train-idle-grace", def.XGBoost.IdleGrace, "how long an idle-class xgboost run may wait for spare CPU before it runs again niced")
	fs.IntVar(&f.cfg.Nice, "train-nice", def.Nice, "scheduling niceness of training (0-19; 0: the trainer's own): the fits' own work and the bundle's publication always, xgboost when not idle; so predictions on shared cores come first")
	fs.BoolVar(&f.noXGBoost, "no-xgboost", false, "train linear models only")
	fs.Float64Var(&f.cfg.KVBytesPerToken, "kv-bytes-per-token", 0, "the pool's KV-cache bytes per token, for KV-transfer samples that do not report kv_bytes_per_token (0: learn it from those that do)")
	fs.BoolVar(&f.cfg.PublishForce, "publish-force", false, "publish every new model even when the publication gate refuses it (the verdict is still logged, counted and in /status): for a workload that really changed")
	fs.BoolVar(&f.cfg.FixedLevels, "fixed-levels", false, "serve every quantile at its calibrated level; by default the trainer moves the level --quantile is served at while requests inside the training ranges exceed it more or less often than 1 - quantile (adaptive conformal correction)")
	fs.BoolVar(&f.cfg.SelfTune, "self-tune", def.SelfTune, "choose each target's configuration among candidates (this one first, the line alone, smaller trees, deep trees on log ms) by their error on the newest training rows; false fits every model as --model-kind and --xgb-* say")
	fs.StringVar(&f.modelKind, "model-kind", string(def.Kind), "linear, log-trees, or linear+log-trees")
	fs.IntVar(&f.cfg.Params.Rounds, "xgb-rounds", def.Params.Rounds, "boosting rounds (trees)")
	fs.IntVar(&f.cfg.Params.MaxDepth, "xgb-max-depth", def.Params.MaxDepth, "tree depth")
	fs.Float64Var(&f.cfg.Params.Eta, "xgb-eta", def.Params.Eta, "learning rate")
	fs.Float64Var(&f.cfg.Params.Subsample, "xgb-subsample", def.Params.Subsample, "row subsample per tree")
	fs.Float64Var(&f.cfg.Params.ColsampleBytree, "xgb-colsample", def.Params.ColsampleBytree, "column subsample per tree")
	fs.Float64Var(&f.cfg.Params.MinChildWeight, "xgb-min-child-weight", def.Params.MinChildWeight, "minimum hessian per leaf")
	fs.Float64Var(&f.cfg.Params.Gamma, "xgb-gamma", def.Params.Gamma, "minimum loss reduction to split")
	fs.Float64Var(&f.cfg.Params.Lambda, "xgb-lambda", def.Params.Lambda, "L2 regularisation")
	fs.Float64Var(&f.cfg.Params.Alpha, "xgb-alpha", def.Params.Alpha, "L1 regularisation")
}

// config is the training role the flags describe.
func (f *trainerFlags) config() (*service.TrainerConfig, error) {
	t := f.cfg
	var err error
	if t.Store.Scheme, err = store.ParseScheme(f.bucketScheme); err != nil {
		return nil, fmt.Errorf("--bucket-scheme: %w", err)
	}
	t.Kind = model.Kind(f.modelKind) // checked by Validate
	if !f.noXGBoost {
		x := f.xgb
		x.Nice = t.Nice // --train-nice covers xgboost's runs too
		t.XGBoost = &x
	}
	return &t, nil
}

// predictorFlags configure the prediction role. Their defaults are
// service.DefaultPredictorConfig's.
type predictorFlags struct {
	cfg service.PredictorConfig
}

// register adds the prediction role's flags; a standalone predictor has
// the flags of its sync with a trainer elsewhere too.
func (f *predictorFlags) register(fs *flag.FlagSet, standalone bool) {
	def := service.DefaultPredictorConfig()
	fs.StringVar(&f.cfg.Listen, "predictor-listen", def.Listen, "address of the prediction server")
	fs.IntVar(&f.cfg.MaxConcurrentPredictions, "max-concurrent-predictions", def.MaxConcurrentPredictions, "prediction requests handled at once (bodies arrived); more wait briefly, then get 503")
	fs.Int64Var(&f.cfg.MaxPredictBytes, "max-predict-bytes", def.MaxPredictBytes, "bytes the prediction requests in progress may hold, by estimate (bodies, rows, answers until read); a quarter is kept for requests under 256 KiB, the router's; more wait briefly, then get 503")
	fs.IntVar(&f.cfg.MaxLargePredictions, "max-large-predictions", def.MaxLargePredictions, "prediction requests over 512 rows or pairs computing at once (0: every core but one, so the router's small requests always find a core)")
	fs.IntVar(&f.cfg.PairsK, "pairs-default-k", def.PairsK, "pairs, and no-split options, /predict/pairs returns when a request does not give k")
	if standalone {
		fs.StringVar(&f.cfg.TrainerURL, "trainer-url", def.TrainerURL, "training server to pull bundles from")
		fs.DurationVar(&f.cfg.SyncInterval, "sync-interval", def.SyncInterval, "time between bundle polls")
		fs.IntVar(&f.cfg.SyncNice, "sync-nice", def.SyncNice, "scheduling niceness of loading a new bundle (0-19; 0: the predictor's own), so predictions served meanwhile come first")
		fs.StringVar(&f.cfg.BundleFile, "bundle-file", "", "bundle to serve at start, before the trainer answers")
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
	h, p, _ := net.SplitHostPort(f.cfg.Listen)
	if hok {
		h = host
	}
	if pok {
		p = port
	}
	f.cfg.Listen = net.JoinHostPort(h, p)
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

// flagNames are the flags behind service.Config's settings, for errors
// the operator can act on.
var flagNames = map[string]string{
	"DataDir":                            "--data-dir",
	"Objective":                          "--objective",
	"Quantile":                           "--quantile",
	"SigningKey":                         "--signing-key-file",
	"Limits.MaxBodyBytes":                "--max-body-bytes",
	"Limits.MaxRows":                     "--max-rows",
	"Limits.MaxPairCandidates":           "--max-pair-candidates",
	"ShutdownGrace":                      "--shutdown-grace",
	"Trainer.Listen":                     "--trainer-listen",
	"Trainer.RetrainInterval":            "--retrain-interval",
	"Trainer.MinSamples":                 "--min-samples",
	"Trainer.MinSamplesFresh":            "--min-samples-fresh",
	"Trainer.MaxTrainRows":               "--max-train-rows",
	"Trainer.KVBytesPerToken":            "--kv-bytes-per-token",
	"Trainer.Store.BucketCapacity":       "--bucket-capacity",
	"Trainer.Store.HoldoutFraction":      "--holdout-fraction",
	"Trainer.Store.HoldoutCapacity":      "--holdout-capacity",
	"Trainer.MaxConcurrentIngest":        "--max-concurrent-ingest",
	"Trainer.MaxIngestBytes":             "--max-ingest-bytes",
	"Trainer.MaxBundleWatchers":          "--max-bundle-watchers",
	"Trainer.MaxBundleWatchersPerClient": "--max-bundle-watchers-per-client",
	"Trainer.Kind":                       "--model-kind",
	"Trainer.Params":                     "", // the problem names the parameter
	"Trainer.Nice":                       "--train-nice",
	"Trainer.XGBoost.Timeout":            "--xgboost-timeout",
	"Trainer.XGBoost.Nice":               "--train-nice",
	"Trainer.XGBoost.IdleGrace":          "--train-idle-grace",
	"Predictor.Listen":                   "--predictor-listen",
	"Predictor.TrainerURL":               "--trainer-url",
	"Predictor.SyncInterval":             "--sync-interval",
	"Predictor.SyncNice":                 "--sync-nice",
	"Predictor.BundleFile":               "--bundle-file",
}

// runService starts the service cfg describes and serves until ctx ends.
func runService(ctx context.Context, cfg service.Config) error {
	svc, err := startService(cfg)
	if err != nil {
		return err
	}
	err = svc.Run(ctx)
	if cerr := svc.Close(); err == nil {
		err = cerr
	}
	return err
}

// startService validates cfg, naming flags in its errors, and starts the
// service it describes.
func startService(cfg service.Config) (*service.Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, inFlagTerms(err)
	}
	return service.New(cfg)
}

// inFlagTerms rewrites service.Validate's errors with the flags' names:
// "--train-nice 20: want 0 to 19" rather than "Trainer.Nice: 20: ...".
func inFlagTerms(err error) error {
	var fieldErrs []error
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		fieldErrs = joined.Unwrap()
	} else {
		fieldErrs = []error{err}
	}
	lines := make([]string, 0, len(fieldErrs))
	for _, e := range fieldErrs {
		var fe *service.FieldError
		if !errors.As(e, &fe) {
			lines = append(lines, e.Error())
			continue
		}
		problem := fe.Problem
		if other, ok := flagNames[fe.Other]; ok {
			problem = strings.ReplaceAll(problem, fe.Other, other)
		}
		line := fe.Error()
		if name, ok := flagNames[fe.Field]; ok {
			line = strings.TrimSpace(name + " " + problem)
		}
		if !slices.Contains(lines, line) { // one flag may set two settings
			lines = append(lines, line)
		}
	}
	if len(lines) == 1 {
		return errors.New(lines[0])
	}
	return fmt.Errorf("%d problems with the configuration:\n  %s", len(lines), strings.Join(lines, "\n  "))
}

// hardwareFlags price the engine's steps from a model and a GPU (the
// Roofline step model) instead of the H200 trace's linear fit.
type hardwareFlags struct {
	model, gpu, engineArgs, coefficients string
}

func (h *hardwareFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&h.model, "model", "", "serve this model: its HuggingFace config.json (or the directory holding it); steps are then priced from its FLOPs and bytes on --gpu (docs/SIMULATOR.md, the Roofline)")
	fs.StringVar(&h.gpu, "gpu", "", "--model: the GPU, one of "+strings.Join(sim.GPUNames(), ", ")+", or a data sheet (JSON)")
	fs.StringVar(&h.engineArgs, "engine-args", "", "--model: vLLM engine arguments key=value,... ("+strings.Join(sim.EngineArgKeys, ", ")+"; default vLLM's)")
	fs.StringVar(&h.coefficients, "coefficients", "", "--model: the step model's coefficients (JSON from headroom calibrate; default the shipped ones)")
}

// unused refuses the hardware flags without --model.
func (h *hardwareFlags) unused(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "gpu", "engine-args", "coefficients":
			err = fmt.Errorf("--%s needs --model", f.Name)
		}
	})
	return err
}

// config is the engine --model, --gpu, --engine-args and --coefficients
// describe, one server.
func (h *hardwareFlags) config() (sim.Config, error) {
	path := h.model
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "config.json")
	}
	arch, err := sim.ReadArchitecture(path)
	if err != nil {
		return sim.Config{}, fmt.Errorf("--model: %w", err)
	}
	if h.gpu == "" {
		return sim.Config{}, fmt.Errorf("--model needs --gpu: one of %s, or a data sheet", strings.Join(sim.GPUNames(), ", "))
	}
	gpu, ok := sim.LookupGPU(h.gpu)
	if !ok {
		if gpu, err = sim.ReadGPU(h.gpu); err != nil {
			return sim.Config{}, fmt.Errorf("--gpu: not one of %s, and %w", strings.Join(sim.GPUNames(), ", "), err)
		}
	}
	args, err := sim.ParseEngineArgs(h.engineArgs, sim.DefaultEngineArgs())
	if err != nil {
		return sim.Config{}, fmt.Errorf("--engine-args: %w", err)
	}
	coef := sim.DefaultCoefficients()
	if h.coefficients != "" {
		if coef, err = sim.ReadCoefficients(h.coefficients); err != nil {
			return sim.Config{}, fmt.Errorf("--coefficients: %w", err)
		}
	}
	if arch.Name == "" {
		arch.Name = filepath.Base(filepath.Dir(path))
	}
	return sim.DeploymentConfig(arch, gpu, args, coef)
}

// kvBytesPerToken is what a P/D run's transfers carry per token: the
// --kv-bytes-per-token flag's value when it was given, else, for an engine
// priced from a model's architecture (--model), that model's KV size, else
// the flag's default.
func kvBytesPerToken(fs *flag.FlagSet, flagValue float64, engine sim.Config) float64 {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "kv-bytes-per-token" })
	if set || engine.Roofline == nil {
		return flagValue
	}
	return engine.Roofline.Arch.KVBytesPerToken()
}
