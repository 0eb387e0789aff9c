package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/fidelity"
	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/lab/sim/workload"
)

func whatifCommand() command {
	return command{
		name:    "whatif",
		summary: "replay a workload through simulated vLLM servers under several configurations",
		run:     runWhatif,
	}
}

func runWhatif(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("whatif", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		configs    []string
		logPath    = fs.String("log", "", "replay this JSONL request log (format: docs/SIMULATOR.md)")
		wl         = fs.String("workload", "", "generate a workload instead: agentic or chat")
		asJSON     = fs.Bool("json", false, "print JSON instead of a table")
		seed       = fs.Uint64("seed", 1, "seed of the generated workload")
		rate       = fs.Float64("rate", 0, "requests per second (generated: default 4; log: rescale to this mean rate, 0 keeps its times)")
		burstiness = fs.Float64("burstiness", 1, "generated arrivals: Gamma shape of the gaps, 1 = Poisson, < 1 = bursty")
		servers    = fs.Int("servers", 0, "servers per configuration, unless the configuration sets servers (default 2)")
		requests   = fs.Int("requests", 1000, "chat workload: number of requests")
		sessions   = fs.Int("sessions", 24, "agentic workload: number of sessions (8 turns each)")
		routerName = fs.String("router", "load-prefix", "router: "+strings.Join(sim.RouterNames, ", "))
		ipPath     = fs.String("inference-perf", "", "generate the workload as inference-perf does from this configuration (shared_prefix data, load stages back to back)")
		timeout    = fs.Duration("timeout", 0, "clients give up on a request after this long (0: never; with --inference-perf, its 300s)")
		hw         hardwareFlags
		pd         pdFlags
	)
	hw.register(fs)
	pd.register(fs)
	fs.Func("config", "a configuration: a YAML file, inline key=value,... ("+strings.Join(sim.ConfigKeys, ", ")+
		"), or 'default'; repeat to compare, the first is the baseline", func(s string) error {
		configs = append(configs, s)
		return nil
	})
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: headroom whatif (--log FILE | --workload agentic|chat | --inference-perf FILE) --config A [--config B ...] [flags]")
		fmt.Fprintln(stderr, "       headroom whatif --model CONFIG.json --gpu GPU [--engine-args k=v,...] (--log FILE | --inference-perf FILE | --workload W) --config default [--config k=v ...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	sources := 0
	for _, set := range []bool{*logPath != "", *wl != "", *ipPath != ""} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return errors.New("give exactly one of --log and --workload (or --inference-perf)")
	}
	if len(configs) == 0 && pd.layout == "" {
		return errors.New("give at least one --config")
	}
	if err := pd.check(); err != nil {
		return err
	}
	if _, ok := sim.NewRouter(*routerName); !ok {
		return fmt.Errorf("--router %q: want one of %s", *routerName, strings.Join(sim.RouterNames, ", "))
	}

	base := sim.DefaultConfig()
	if hw.model != "" {
		var err error
		if base, err = hw.config(); err != nil {
			return err
		}
	} else if err := hw.unused(fs); err != nil {
		return err
	}
	if *servers != 0 {
		base.Servers = *servers
	}
	cfgs := make([]sim.Config, len(configs))
	for i, spec := range configs {
		c, err := sim.ParseConfig(spec, base)
		if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		cfgs[i] = c
	}

	var reqs []*sim.Request
	var err error
	arrivals := workload.Arrivals{Rate: *rate, Burstiness: *burstiness}
	if arrivals.Rate == 0 {
		arrivals.Rate = 4
	}
	switch {
	case *ipPath != "":
		if reqs, err = inferencePerfRequests(*ipPath); err != nil {
			return err
		}
		if *timeout == 0 {
			*timeout = 300 * time.Second
		}
	case *logPath != "":
		if reqs, err = workload.ReadLogFile(*logPath); err == nil {
			reqs, err = workload.Rescale(reqs, *rate)
		}
	case *wl == "agentic":
		o := workload.DefaultAgentic(0)
		o.Sessions, o.Arrivals, o.Seed = *sessions, arrivals, *seed
		reqs, err = workload.Agentic(o)
	case *wl == "chat":
		o := workload.DefaultChat(*requests, 0)
		o.Arrivals, o.Seed = arrivals, *seed
		reqs, err = workload.Chat(o)
	default:
		return fmt.Errorf("--workload %q: want agentic or chat", *wl)
	}
	if err != nil {
		return err
	}

	if pd.layout != "" {
		if len(cfgs) > 1 {
			return errors.New("--pd compares routers on one engine configuration: give at most one --config")
		}
		engine := base
		if len(cfgs) > 0 {
			engine = cfgs[0]
		}
		return pd.run(ctx, fs, reqs, engine, *asJSON, stdout)
	}
	results, err := sim.WhatIf(ctx, reqs, cfgs, sim.WhatIfOptions{ClientTimeout: *timeout, NewRouter: func() sim.Router {
		r, _ := sim.NewRouter(*routerName)
		return r
	}})
	if err != nil {
		return err
	}
	if *asJSON {
		return sim.WriteJSON(stdout, results)
	}
	fmt.Fprintf(stdout, "%d requests, router %s\n\n", len(reqs), *routerName)
	return sim.WriteTable(stdout, results)
}

// inferencePerfRequests generates an inference-perf configuration's
// requests, its stages back to back: each starts its interval after the
// one before was due to end (inference-perf waits for the last request of
// a stage; at a load the engine keeps up with that is the same).
func inferencePerfRequests(path string) ([]*sim.Request, error) {
	ip, err := fidelity.ReadInferencePerf(path)
	if err != nil {
		return nil, fmt.Errorf("--inference-perf: %w", err)
	}
	stages, err := ip.StageRequests()
	if err != nil {
		return nil, fmt.Errorf("--inference-perf: %w", err)
	}
	var reqs []*sim.Request
	start := time.Duration(0)
	for k, st := range stages {
		for _, r := range st {
			c := *r
			c.Arrival += start
			reqs = append(reqs, &c)
		}
		start += ip.Stages[k].Duration + ip.Interval
	}
	return reqs, nil
}

// pdFlags are whatif's disaggregated mode: the same workload through a
// prefill pool and a decode pool on a topology, under each P/D router.
type pdFlags struct {
	layout           string
	prefill, decode  int
	routers          string
	kvBytesPerToken  float64
	prefillFailRate  float64
	failureSeed      uint64
	samples          string
	resolvedRouters  []string
	resolvedTopology [2][]features.Topology
}

func (p *pdFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.layout, "pd", "", "disaggregate: prefill and decode pools placed as "+strings.Join(sim.PDLayouts, ", ")+
		"; compares --pd-routers on the first --config's engine (docs/SIMULATOR.md, section P/D)")
	fs.IntVar(&p.prefill, "prefill-pods", 2, "--pd: prefill pods")
	fs.IntVar(&p.decode, "decode-pods", 2, "--pd: decode pods")
	fs.StringVar(&p.routers, "pd-routers", strings.Join(sim.PDRouterNames, ","), "--pd: comma-separated P/D routers to compare")
	fs.Float64Var(&p.kvBytesPerToken, "kv-bytes-per-token", sim.DefaultKVBytesPerToken, "--pd: the model's KV-cache bytes per token (default: Qwen3-32B in bf16)")
	fs.Float64Var(&p.prefillFailRate, "prefill-failure-rate", 0, "--pd: probability a prefill pod fails after its prefill (the decode pod then runs the request alone)")
	fs.Uint64Var(&p.failureSeed, "pd-seed", 1, "--pd: seed of the prefill failures")
	fs.StringVar(&p.samples, "pd-samples", "", "--pd: also write every request's route, prefill and KV transfer to this JSONL file, as a sidecar would report them")
}

// check validates the P/D flags before any work is done.
func (p *pdFlags) check() error {
	if p.layout == "" {
		return nil
	}
	pre, dec, err := sim.PlacePods(p.layout, p.prefill, p.decode)
	if err != nil {
		return fmt.Errorf("--pd: %w", err)
	}
	p.resolvedTopology = [2][]features.Topology{pre, dec}
	p.resolvedRouters = nil
	for _, name := range strings.Split(p.routers, ",") {
		name = strings.TrimSpace(name)
		if _, ok := sim.NewPDRouter(name); !ok {
			return fmt.Errorf("--pd-routers: %q: want some of %s", name, strings.Join(sim.PDRouterNames, ", "))
		}
		p.resolvedRouters = append(p.resolvedRouters, name)
	}
	return nil
}

func (p *pdFlags) run(ctx context.Context, fs *flag.FlagSet, reqs []*sim.Request, engine sim.Config, asJSON bool, stdout io.Writer) error {
	cfg := sim.PDConfig{
		Prefill: engine, Decode: engine,
		PrefillPods: p.resolvedTopology[0], DecodePods: p.resolvedTopology[1],
		Links: sim.LayoutLinks(p.layout), KVBytesPerToken: kvBytesPerToken(fs, p.kvBytesPerToken, engine),
		PrefillFailureRate: p.prefillFailRate, Seed: p.failureSeed,
	}
	results, err := sim.ComparePD(ctx, reqs, cfg, p.resolvedRouters)
	if err != nil {
		return err
	}
	if p.samples != "" {
		if err := writePDSamples(p.samples, results); err != nil {
			return err
		}
	}
	if asJSON {
		return sim.WritePDJSON(stdout, results)
	}
	fmt.Fprintf(stdout, "%d requests, %d prefill and %d decode pods, layout %s, engine %s\n\n",
		len(reqs), p.prefill, p.decode, p.layout, engine.Name)
	return sim.WritePDTable(stdout, results)
}

func writePDSamples(path string, results []sim.PDResult) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--pd-samples: %w", err)
	}
	w := bufio.NewWriter(f)
	if err := sim.WritePDSamples(w, results); err != nil {
		f.Close()
		return fmt.Errorf("--pd-samples %s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("--pd-samples %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--pd-samples %s: %w", path, err)
	}
	return nil
}
