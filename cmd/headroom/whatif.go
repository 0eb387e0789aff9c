package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/headroomhq/headroom/sim"
	"github.com/headroomhq/headroom/sim/workload"
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
	)
	fs.Func("config", "a configuration: a YAML file, inline key=value,... ("+strings.Join(sim.ConfigKeys, ", ")+
		"), or 'default'; repeat to compare, the first is the baseline", func(s string) error {
		configs = append(configs, s)
		return nil
	})
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: headroom whatif (--log FILE | --workload agentic|chat) --config A [--config B ...] [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if (*logPath == "") == (*wl == "") {
		return errors.New("give exactly one of --log and --workload")
	}
	if len(configs) == 0 {
		return errors.New("give at least one --config")
	}
	if _, ok := sim.NewRouter(*routerName); !ok {
		return fmt.Errorf("--router %q: want one of %s", *routerName, strings.Join(sim.RouterNames, ", "))
	}

	base := sim.DefaultConfig()
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

	results, err := sim.WhatIf(ctx, reqs, cfgs, func() sim.Router {
		r, _ := sim.NewRouter(*routerName)
		return r
	})
	if err != nil {
		return err
	}
	if *asJSON {
		return sim.WriteJSON(stdout, results)
	}
	fmt.Fprintf(stdout, "%d requests, router %s\n\n", len(reqs), *routerName)
	return sim.WriteTable(stdout, results)
}
