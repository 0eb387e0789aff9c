package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/eval"
	"github.com/headroomhq/headroom/lab/suite"
	"github.com/headroomhq/headroom/lab/trace"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
	"github.com/headroomhq/headroom/trainer/fit"
	"github.com/headroomhq/headroom/xgboost"
)

func evalCommand() command {
	return command{
		name:    "eval",
		summary: "replay a trace through the store, trainer and predictor and report accuracy beside baselines",
		run:     runEval,
	}
}

func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		tracePath  = fs.String("trace", "", "llm-d JSONL trace to replay")
		synthetic  = fs.Bool("synthetic", false, "replay a generated trace whose latency grows with prompt length, instead of --trace")
		synthRows  = fs.Int("synthetic-rows", 4000, "rows of the --synthetic trace")
		synthSeed  = fs.Uint64("synthetic-seed", 1, "seed of the --synthetic trace")
		suiteDir   = fs.String("suite", "", "replay every trace of a suite directory (headroom suite) in split and prequential mode, one table; --seeds and --every default to its manifest's")
		only       = fs.String("only", "", "with --suite: replay only these traces, by name or regime, comma-separated (a whole suite takes minutes)")
		mode       = fs.String("mode", eval.ModeSplit, "split, prequential, extrapolate, or floor (how low any model of the rows' columns can go: estimators that see every other row, the future included)")
		seeds      = fs.Int("seeds", 5, "split: number of random 90/10 splits")
		every      = fs.Int("every", 100, "prequential: retrain every this many rows; floor: rows of each block left out (scored from this row on, as prequential)")
		trainMax   = fs.Int64("train-max", 1024, "extrapolate: train on prompts of at most this many tokens")
		testMin    = fs.Int64("test-min", 2048, "extrapolate: test on prompts of more than this many tokens")
		asJSON     = fs.Bool("json", false, "print JSON instead of a table")
		quantile   = fs.Float64("quantile", model.DefaultQuantile, "quantile whose coverage is reported")
		scheme     = fs.String("bucket-scheme", store.DefaultSchemeName, "store stratification, as for serve")
		capacity   = fs.Int("bucket-capacity", store.DefaultBucketCapacity, "samples kept per store bucket, as for serve")
		modelKind  = fs.String("model-kind", string(model.KindResidual), "Headroom's model: linear, log-trees, or linear+log-trees")
		xgbBin     = fs.String("xgboost-bin", "xgboost", "xgboost CLI binary")
		xgbTimeout = fs.Duration("xgboost-timeout", time.Minute, "longest one xgboost run may take")
		ttftCols   = fs.String("ttft-columns", "", "Headroom's TTFT feature columns, comma-separated (default: the service's)")
		tpotCols   = fs.String("tpot-columns", "", "Headroom's TPOT feature columns, comma-separated (default: the service's)")
		fitOpts    = fit.DefaultOptions()
		liveWindow = fs.Int("live-window", 0, "trainer's live window: recent samples whose errors calibrate the next model (0: the service's default)")
		covGain    = fs.Float64("coverage-gain", 0, "step by which each live sample moves the level the served quantile is read at (adaptive conformal; 0: the service's default)")
		covShift   = fs.Float64("coverage-max-shift", 0, "farthest the served quantile's level moves from --quantile (0: the service's default)")
		oorGain    = fs.Float64("out-of-range-gain", 0, "step by which each live sample outside the serving model's training ranges moves the level served to such rows (0: the service's default)")
		oorStart   = fs.Float64("out-of-range-start", 0, "level served to rows outside the serving model's training ranges before any live sample there moves it (0: the service's default)")
		fixedLevel = fs.Bool("fixed-levels", false, "serve every quantile at its calibrated level: no adaptive correction of coverage")
		minSamples = fs.Int("min-samples", 100, "training samples a target needs to retrain at every tick once it has a model (below them, when they have doubled since its model), as for serve")
		transfer   = fs.Bool("transfer", false, "measure the KV-transfer model instead: random 90/10 splits and extrapolation from --train-max to --test-min transfer tokens, on --pd-samples or on simulated P/D runs")
		pdSamples  = fs.String("pd-samples", "", "--transfer: a JSONL file of `headroom whatif --pd ... --pd-samples`; default: simulate")
		pdSeed     = fs.Uint64("pd-seed", 1, "--transfer: seed of the simulated P/D runs")
		pdSessions = fs.Int("pd-sessions", 200, "--transfer: agentic sessions of each simulated P/D run")
		kvBytes    = fs.Float64("kv-bytes-per-token", 0, "--transfer: the pool's KV bytes per token, as for serve (0: learned from the samples)")
		selfTune   = fs.Bool("self-tune", true, "let the trainer choose each target's configuration among candidates, as serve does; false fits every model as --model-kind and --xgb-* say")
		sel        trainer.SelectConfig
		withFloor  = fs.Bool("floor", true, "prequential and --suite: also estimate each target's floor (as --mode floor, on the same rows) and print Headroom's MAPE over it")
		trainEvery = fs.Int("train-every", 0, "extrapolate: ingest the training rows in order and retrain every this many rows, as the service would, so quantiles are calibrated on forward errors (0: train once on all of them)")
	)
	fs.Float64Var(&fitOpts.TreeLabelClip, "tree-label-clip", fitOpts.TreeLabelClip, "clip the trees' labels at this many robust standard deviations (0: off)")
	fs.IntVar(&fitOpts.Params.Rounds, "xgb-rounds", fitOpts.Params.Rounds, "Headroom's boosting rounds (trees)")
	fs.IntVar(&fitOpts.Params.MaxDepth, "xgb-max-depth", fitOpts.Params.MaxDepth, "Headroom's tree depth")
	fs.Float64Var(&fitOpts.Params.Eta, "xgb-eta", fitOpts.Params.Eta, "Headroom's learning rate")
	fs.Float64Var(&fitOpts.Params.Subsample, "xgb-subsample", fitOpts.Params.Subsample, "Headroom's row subsample per tree")
	fs.Float64Var(&fitOpts.Params.ColsampleBytree, "xgb-colsample", fitOpts.Params.ColsampleBytree, "Headroom's column subsample per tree")
	fs.Float64Var(&fitOpts.Params.MinChildWeight, "xgb-min-child-weight", fitOpts.Params.MinChildWeight, "Headroom's minimum hessian per leaf")
	fs.Float64Var(&fitOpts.Params.Gamma, "xgb-gamma", fitOpts.Params.Gamma, "Headroom's minimum loss reduction to split")
	fs.Float64Var(&fitOpts.Params.Lambda, "xgb-lambda", fitOpts.Params.Lambda, "Headroom's L2 regularisation")
	fs.Float64Var(&fitOpts.Params.Alpha, "xgb-alpha", fitOpts.Params.Alpha, "Headroom's L1 regularisation")
	fs.Float64Var(&sel.Margin, "select-margin", 0, "self-tuning: relative MAPE by which a candidate must beat the default, the first candidate (more on few rows; 0: the service's)")
	fs.IntVar(&sel.Folds, "select-folds", 0, "self-tuning: blocks of newest training rows candidates are scored on (0: the service's)")
	fs.Float64Var(&sel.ScoreShare, "select-share", 0, "self-tuning: share of the training rows in one scored block (0: the service's)")
	verbose := fs.Bool("verbose", false, "log the trainers' choices of configuration (and their other messages) to stderr")
	selNames := fs.String("select-candidates", "", "self-tuning: the candidates to choose among, comma-separated: configured, line, line+shallow, log-trees, line-unshifted (the service's), the others also with -unshifted (default: the service's)")
	fs.IntVar(&fitOpts.Support.Folds, "support-folds", fitOpts.Support.Folds, "columns each retrain holds out to measure how fast errors grow out of range (0: bounds do not widen out of range)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: headroom eval (--trace FILE | --synthetic) --mode split|prequential|extrapolate|floor [flags]")
		fmt.Fprintln(stderr, "       headroom eval --suite DIR [flags]")
		fmt.Fprintln(stderr, "       headroom eval --transfer [--pd-samples FILE] [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if *only != "" && *suiteDir == "" {
		return errors.New("--only selects traces of a --suite")
	}
	if *transfer {
		if *tracePath != "" || *synthetic || *suiteDir != "" {
			return errors.New("--transfer measures P/D samples: leave out --trace, --synthetic and --suite")
		}
		return runTransferEval(ctx, *pdSamples, *pdSeed, *pdSessions, eval.TransferOptions{Seeds: *seeds,
			TrainMax: *trainMax, TestMin: *testMin, Quantile: *quantile, BytesPerToken: *kvBytes}, *asJSON, stdout)
	}
	sources := 0
	for _, given := range []bool{*tracePath != "", *synthetic, *suiteDir != ""} {
		if given {
			sources++
		}
	}
	if sources != 1 {
		return errors.New("give exactly one of --trace, --synthetic and --suite")
	}
	sch, err := store.ParseScheme(*scheme)
	if err != nil {
		return fmt.Errorf("--bucket-scheme: %w", err)
	}
	if !(*quantile > 0 && *quantile < 1) {
		return fmt.Errorf("--quantile %v: must lie strictly between 0 and 1", *quantile)
	}
	if err := fitOpts.Params.Validate(); err != nil {
		return err
	}
	sel.Off = !*selfTune
	fitOpts.Kind = model.Kind(*modelKind)
	switch fitOpts.Kind {
	case model.KindLinear, model.KindLogTrees, model.KindResidual:
	default:
		return fmt.Errorf("--model-kind %q: want linear, log-trees or linear+log-trees", *modelKind)
	}
	if *selNames != "" {
		if sel.Candidates, err = fit.CandidatesNamed(fit.AllCandidates(fitOpts), columns(*selNames)); err != nil {
			return fmt.Errorf("--select-candidates: %w", err)
		}
	}
	opts := eval.Options{
		XGBoost:  xgboost.CLI{Binary: *xgbBin, Timeout: *xgbTimeout},
		Fit:      fitOpts,
		Select:   sel,
		Store:    store.Options{Scheme: sch, BucketCapacity: *capacity},
		Quantile: *quantile,
		Columns:  columnsOf(map[features.Target]string{features.TTFT: *ttftCols, features.TPOT: *tpotCols}),
		Drift: trainer.DriftConfig{Window: *liveWindow, CoverageGain: *covGain, MaxLevelShift: *covShift, OutOfRangeGain: *oorGain,
			OutOfRangeStart: *oorStart,
			FixedLevels:     *fixedLevel},
		MinSamples: *minSamples,
	}
	if *verbose {
		opts.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	}

	if *suiteDir != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if set["mode"] {
			return errors.New("--suite runs both split and prequential modes; leave out --mode")
		}
		suiteSeeds, suiteEvery := 0, 0 // the manifest's
		if set["seeds"] {
			suiteSeeds = *seeds
		}
		if set["every"] {
			suiteEvery = *every
		}
		settings := suite.Settings{Seeds: suiteSeeds, Every: suiteEvery, Floor: *withFloor}
		return runEvalSuite(ctx, *suiteDir, columns(*only), opts, settings, *asJSON, stdout, stderr)
	}

	samples, name := []features.Sample(nil), *tracePath
	if *synthetic {
		samples = eval.Synthetic(eval.SyntheticOptions{Rows: *synthRows, Seed: *synthSeed})
		name = fmt.Sprintf("synthetic(rows=%d,seed=%d)", *synthRows, *synthSeed)
	} else if samples, err = trace.ReadFile(*tracePath); err != nil {
		return err
	}

	var rep *eval.Report
	switch *mode {
	case eval.ModeSplit:
		rep, err = eval.Split(ctx, samples, opts, *seeds)
	case eval.ModePrequential:
		rep, err = eval.Prequential(ctx, samples, opts, *every)
		if err == nil && *withFloor {
			var floor *eval.Report
			if floor, err = eval.Floor(ctx, samples, opts, *every); err == nil {
				err = rep.BesideFloor(floor)
			}
		}
	case eval.ModeExtrapolate:
		rep, err = eval.Extrapolate(ctx, samples, opts, *trainMax, *testMin, *trainEvery)
	case eval.ModeFloor:
		rep, err = eval.Floor(ctx, samples, opts, *every)
	default:
		return fmt.Errorf("--mode %q: want split, prequential, extrapolate or floor", *mode)
	}
	if err != nil {
		return err
	}
	rep.Trace = name
	if *asJSON {
		return eval.WriteJSON(stdout, rep)
	}
	return eval.WriteTable(stdout, rep)
}

// runEvalSuite evaluates every trace of a suite directory, or those named
// in only, and prints one table; progress goes to stderr because a suite
// takes minutes.
func runEvalSuite(ctx context.Context, dir string, only []string, opts eval.Options, settings suite.Settings, asJSON bool, stdout, stderr io.Writer) error {
	m, traces, err := suite.Load(dir)
	if err != nil {
		return err
	}
	if len(only) > 0 {
		sub, idx, err := m.Select(only)
		if err != nil {
			return fmt.Errorf("--only: %w", err)
		}
		picked := make([][]features.Sample, len(idx))
		for i, k := range idx {
			picked[i] = traces[k]
		}
		m, traces = sub, picked
	}
	rep, err := suite.Evaluate(ctx, m, traces, opts, settings, stderr)
	if err != nil {
		return err
	}
	if asJSON {
		return suite.WriteJSON(stdout, rep)
	}
	return suite.WriteTable(stdout, rep)
}

// columns splits a comma-separated column list; "" means the defaults.
// columnsOf is each target's columns from its flag's comma-separated list;
// a target whose flag is empty takes its default columns.
func columnsOf(lists map[features.Target]string) map[features.Target][]string {
	out := map[features.Target][]string{}
	for tg, list := range lists {
		if cols := columns(list); cols != nil {
			out[tg] = cols
		}
	}
	return out
}

func columns(list string) []string {
	if strings.TrimSpace(list) == "" {
		return nil
	}
	var out []string
	for c := range strings.SplitSeq(list, ",") {
		out = append(out, strings.TrimSpace(c))
	}
	return out
}

// runTransferEval is eval --transfer.
func runTransferEval(ctx context.Context, path string, seed uint64, sessions int, opts eval.TransferOptions, asJSON bool, stdout io.Writer) error {
	var samples []features.Sample
	var err error
	if path != "" {
		f, ferr := os.Open(path)
		if ferr != nil {
			return fmt.Errorf("--pd-samples: %w", ferr)
		}
		samples, err = eval.ReadPDSamples(f)
		f.Close()
	} else {
		samples, err = eval.SimulateTransfers(ctx, seed, sessions)
	}
	if err != nil {
		return err
	}
	r, err := eval.EvaluateTransfer(ctx, samples, opts)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return eval.WriteTransferTable(stdout, r)
}
