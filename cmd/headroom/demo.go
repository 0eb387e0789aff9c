package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/headroomhq/headroom/lab/demo"
	"github.com/headroomhq/headroom/lab/sim"
)

func demoCommand() command {
	return command{
		name:    "demo",
		summary: "watch Headroom learn and route a simulated vLLM fleet, against the usual routers",
		run:     runDemo,
	}
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		opts   = demo.DefaultOptions()
		asJSON = fs.Bool("json", false, "print the result as JSON on stdout (progress still goes to stderr)")
		quiet  = fs.Bool("quiet", false, "no progress lines")
		sweep  = fs.String("sweep", "", "comma-separated request rates: run the whole comparison at each (replaces --rate)")
		plotTo = fs.String("plot", "", "with --sweep: write SVG charts of the sweep into this directory")
		pd     = demo.DefaultPDOptions()
		layout = fs.String("pd", "", "disaggregate: prefill and decode pools placed as "+strings.Join(sim.PDLayouts, ", ")+
			", and compare "+strings.Join(demo.PDPolicies, ", ")+" (docs/DEMO.md, section P/D)")
	)
	fs.IntVar(&pd.PrefillPods, "prefill-pods", pd.PrefillPods, "--pd: prefill pods")
	fs.IntVar(&pd.DecodePods, "decode-pods", pd.DecodePods, "--pd: decode pods")
	fs.Float64Var(&pd.KVBytesPerToken, "kv-bytes-per-token", pd.KVBytesPerToken, "--pd: the model's KV-cache bytes per token (default: Qwen3-32B in bf16)")
	fs.Float64Var(&pd.PrefillFailureRate, "prefill-failure-rate", 0, "--pd: probability a prefill pod fails after its prefill (the decode pod then serves the request alone)")
	fs.BoolVar(&pd.DecideSplit, "decide-split", false, "--pd: joint-slo also decides whether to split, every pair and every decode pod alone competing on SLO headroom")
	fs.BoolVar(&pd.TrustExtrapolation, "trust-extrapolation", false, "--pd: the joint policies route on estimates the service marks extrapolated (a pod loaded beyond the TTFT model's training range) instead of falling back to topology-constant for a request when one of them could be its better route")
	llmdURL := fs.String("llmd", "", "--pd: route with llm-d's own scheduler, served at this loopback URL by the llmd module's sim-scheduler (scripts/llmd-pd-demo.sh starts it), and compare "+
		strings.Join(demo.LLMDConfigs, ", ")+" (docs/DEMO.md, \"llm-d's scheduler in the loop\")")
	noTiming := fs.Bool("no-transfer-timing", false, "--llmd: the EPP sees no KV transfer times, as llm-d's sidecar reports today: Headroom's entries carry no actual_kv_transfer_ms")
	fs.IntVar(&pd.SplitThreshold, "split-threshold", pd.SplitThreshold, "--pd: greedy policies split only requests with at least this many uncached prompt tokens on the decode pod (llm-d's nonCachedTokens)")
	fs.DurationVar(&opts.Duration, "duration", opts.Duration, "simulated arrival window of each policy's run")
	fs.DurationVar(&opts.Warmup, "warmup", opts.Warmup, "simulated arrival window of the warm-up that trains the first models (0: none)")
	fs.IntVar(&opts.Servers, "servers", opts.Servers, "simulated vLLM servers")
	fs.Float64Var(&opts.Rate, "rate", opts.Rate, "requests per second")
	fs.Float64Var(&opts.Burstiness, "burstiness", opts.Burstiness, "Gamma shape of the arrival gaps: 1 = Poisson, < 1 = bursty")
	fs.Uint64Var(&opts.Seed, "seed", opts.Seed, "seed of the traffic")
	fs.Float64Var(&opts.SLO.TTFTMs, "slo-ttft-ms", 0, fmt.Sprintf("TTFT objective of every request, ms (0: none); the predicted policy then routes on SLO headroom (--pd: joint-slo does, default %g)", pd.SLO.TTFTMs))
	fs.Float64Var(&opts.SLO.TPOTMs, "slo-tpot-ms", 0, fmt.Sprintf("TPOT objective of every request, ms (0: none; --pd: default %g)", pd.SLO.TPOTMs))
	fs.DurationVar(&opts.RetrainEvery, "retrain-interval", opts.RetrainEvery, "trainer's retrain interval, in simulated time")
	fs.StringVar(&opts.Service.XGBoostBinary, "xgboost-bin", "xgboost", "xgboost CLI binary")
	fs.BoolVar(&opts.Service.NoXGBoost, "no-xgboost", false, "train linear models only")
	fs.Float64Var(&opts.Service.Quantile, "quantile", 0, "predictor serves this quantile instead of the mean, e.g. 0.9 (0: mean)")
	var hw hardwareFlags
	hw.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: headroom demo [--duration D] [--servers N] [--rate R | --sweep R1,R2,... [--plot DIR]] [--seed S] [--slo-ttft-ms X] [--json]")
		fmt.Fprintln(stderr, "       headroom demo --pd "+strings.Join(sim.PDLayouts, "|")+" [--prefill-pods N] [--decode-pods N] [--rate R] [--seed S] [--json]")
		fmt.Fprintln(stderr, "       headroom demo --pd LAYOUT --llmd URL [--no-transfer-timing] [--seed S] [--json]")
		fmt.Fprintln(stderr, "       headroom demo ... --model CONFIG.json --gpu GPU [--engine-args k=v,...] [--coefficients FILE]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	// The package reads 0 as "default"; on the command line 0 is a mistake
	// (or, for the warm-up, "none").
	switch {
	case opts.Duration <= 0:
		return fmt.Errorf("--duration %v: must be positive", opts.Duration)
	case opts.Servers < 1:
		return fmt.Errorf("--servers %d: need at least 1", opts.Servers)
	case !(opts.Rate > 0):
		return fmt.Errorf("--rate %v: must be positive", opts.Rate)
	case !(opts.Burstiness > 0):
		return fmt.Errorf("--burstiness %v: must be positive", opts.Burstiness)
	case opts.RetrainEvery <= 0:
		return fmt.Errorf("--retrain-interval %v: must be positive", opts.RetrainEvery)
	}
	if opts.Warmup == 0 {
		opts.Warmup = -1 // the flag's 0 means none; the package's 0 means its default
	}
	if hw.model != "" {
		engine, err := hw.config()
		if err != nil {
			return err
		}
		opts.Engine = &engine
		pd.KVBytesPerToken = kvBytesPerToken(fs, pd.KVBytesPerToken, engine)
	} else if err := hw.unused(fs); err != nil {
		return err
	}
	if *layout != "" {
		llmd := demo.LLMDOptions{SchedulerURL: *llmdURL, NoTransferTiming: *noTiming}
		return runPDDemo(ctx, fs, opts, pd, llmd, *layout, *asJSON, *quiet, stdout, stderr)
	}
	if *llmdURL != "" || *noTiming {
		return fmt.Errorf("--llmd and --no-transfer-timing need --pd")
	}
	var rates []float64
	if *sweep != "" {
		var err error
		if rates, err = demo.ParseRates(*sweep); err != nil {
			return fmt.Errorf("--sweep: %w", err)
		}
	} else if *plotTo != "" {
		return fmt.Errorf("--plot needs --sweep: the charts are against offered load")
	}
	if !*quiet {
		fmt.Fprintln(stderr, demo.ProgressLegend)
		opts.Progress = func(p demo.Progress) {
			if rates != nil {
				fmt.Fprintf(stderr, "%5g req/s %s\n", p.Rate, p)
				return
			}
			fmt.Fprintln(stderr, p)
		}
	}
	if rates != nil {
		return runSweep(ctx, opts, rates, *plotTo, *asJSON, stdout, stderr)
	}
	res, err := demo.Run(ctx, opts)
	if err != nil {
		return err
	}
	if *asJSON {
		return demo.WriteJSON(stdout, res)
	}
	fmt.Fprintln(stdout)
	return demo.WriteTable(stdout, res)
}

func runSweep(ctx context.Context, opts demo.Options, rates []float64, plotDir string, asJSON bool, stdout, stderr io.Writer) error {
	s, err := demo.RunSweep(ctx, opts, rates)
	if err != nil {
		return err
	}
	if plotDir != "" {
		paths, err := demo.WritePlots(plotDir, s)
		if err != nil {
			return err
		}
		for _, p := range paths {
			fmt.Fprintln(stderr, "wrote", p)
		}
	}
	if asJSON {
		return demo.WriteSweepJSON(stdout, s)
	}
	fmt.Fprintln(stdout)
	return demo.WriteSweepTable(stdout, s)
}

// runPDDemo is demo --pd: the monolithic flags that apply (traffic, seed,
// cadence, service) carry over; --servers does not (the pools' sizes do),
// nor --sweep. With llmd's SchedulerURL it runs llm-d's scheduler in the
// loop instead of the built-in policies.
func runPDDemo(ctx context.Context, fs *flag.FlagSet, opts demo.Options, pd demo.PDOptions, llmd demo.LLMDOptions, layout string, asJSON, quiet bool, stdout, stderr io.Writer) error {
	var conflict error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "servers", "sweep", "plot", "quantile":
			conflict = fmt.Errorf("--%s does not apply to --pd", f.Name)
		case "decide-split", "trust-extrapolation":
			if llmd.SchedulerURL != "" {
				conflict = fmt.Errorf("--%s does not apply to --llmd: llm-d's config decides", f.Name)
			}
		case "no-transfer-timing":
			if llmd.SchedulerURL == "" {
				conflict = fmt.Errorf("--no-transfer-timing needs --llmd")
			}
		}
	})
	if conflict != nil {
		return conflict
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	slo := pd.SLO
	if set["slo-ttft-ms"] {
		slo.TTFTMs = opts.SLO.TTFTMs
	}
	if set["slo-tpot-ms"] {
		slo.TPOTMs = opts.SLO.TPOTMs
	}
	switch {
	case !slo.Set():
		return fmt.Errorf("--pd: joint-slo needs an SLO: give --slo-ttft-ms or --slo-tpot-ms above 0")
	case pd.PrefillPods < 1 || pd.DecodePods < 1:
		return fmt.Errorf("--prefill-pods %d, --decode-pods %d: need at least 1 of each", pd.PrefillPods, pd.DecodePods)
	}
	opts.SLO = slo
	pd.Options, pd.Layout = opts, layout
	if !quiet {
		fmt.Fprintln(stderr, demo.ProgressLegend)
		pd.Progress = func(p demo.Progress) { fmt.Fprintln(stderr, p) }
	}
	if llmd.SchedulerURL != "" {
		llmd.PDOptions = pd
		res, err := demo.RunLLMD(ctx, llmd)
		if err != nil {
			return err
		}
		return writeLLMD(stdout, stderr, res, asJSON)
	}
	res, err := demo.RunPD(ctx, pd)
	if err != nil {
		return err
	}
	if asJSON {
		return demo.WriteJSON(stdout, res)
	}
	fmt.Fprintln(stdout)
	return demo.WriteTable(stdout, res)
}

// writeLLMD writes the --llmd run's JSON or table. Its JSON has exactly
// the figures the loop compares, with no field to say that the trainer
// fitted lines only (the table says so), so a run without the xgboost CLI
// says it on stderr: its figures are not the trees' (docs/DEMO.md's).
func writeLLMD(stdout, stderr io.Writer, res *demo.LLMDResult, asJSON bool) error {
	if !asJSON {
		fmt.Fprintln(stdout)
		return demo.WriteLLMDTable(stdout, res)
	}
	if res.Run != nil && !res.Run.XGBoost {
		fmt.Fprintln(stderr, "demo --llmd: xgboost not found: Headroom's trainer fitted linear models only (scripts/setup.sh installs the CLI)")
	}
	return demo.WriteLLMDJSON(stdout, res)
}
