package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/headroomhq/headroom/lab/abuse"
)

func abuseCommand() command {
	return command{
		name:    "abuse",
		summary: "run hostile and careless clients against a service on loopback; report what they cost it (docs/RELIABILITY.md)",
		run:     runAbuse,
	}
}

func runAbuse(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("abuse", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c abuse.Config
	fs.StringVar(&c.PredictorURL, "predictor-url", "http://127.0.0.1:8001", "prediction server (loopback only)")
	fs.StringVar(&c.TrainerURL, "trainer-url", "http://127.0.0.1:8000", "training server (loopback only)")
	fs.IntVar(&c.Clients, "clients", 0, "hostile clients (0: the scenario's, the issue's figure)")
	fs.DurationVar(&c.Duration, "duration", 0, "how long the hostile clients run (0: the scenario's own, 20 s, a minute or more for a poisoning)")
	fs.IntVar(&c.Rows, "rows", 0, "rows per hostile prediction request (0: 10,000)")
	fs.IntVar(&c.ReadRate, "read-rate", 0, "bytes a second a slow reader reads (0: 256 KiB/s)")
	fs.IntVar(&c.Candidates, "candidates", 0, "prefill and decode candidates per pair request (0: 64)")
	fs.IntVar(&c.K, "k", 0, "pairs a pair request asks for (0: none said)")
	fs.Float64Var(&c.ProbeRate, "probe-rate", 0, "10-row hot-path requests a second beside the hostile clients (0: 50)")
	fs.IntVar(&c.HostileAddrs, "hostile-addrs", 0, "loopback addresses the hostile clients connect from, 127.0.0.2 onwards (0: one); the router's calls come from 127.0.0.1")
	fs.IntVar(&c.SampleRate, "sample-rate", 0, "the router's clean samples a second beside a poisoning (0: 20; negative: none)")
	fs.StringVar(&c.Token, "token", "", "bearer token sent with every request")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	seed := fs.Int64("seed-samples", 0, "first post this many generated samples (a quarter with KV transfers) and wait for a bundle with every model")
	var names []string
	for _, s := range abuse.Scenarios {
		names = append(names, s.Name)
	}
	scenario := fs.String("scenario", "", "one of: "+strings.Join(names, ", "))
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: headroom abuse --scenario NAME [--predictor-url URL] [--trainer-url URL] [--duration D] [--json]")
		for _, s := range abuse.Scenarios {
			fmt.Fprintf(stderr, "  %-14s %s\n", s.Name, s.Summary)
		}
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	c.Log = stderr
	if *seed > 0 {
		if err := abuse.Seed(ctx, c, *seed); err != nil {
			return err
		}
	}
	r, err := abuse.Run(ctx, *scenario, c)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		r.WriteText(stdout)
	}
	if !r.Met() {
		return fmt.Errorf("%s: a target was not met", r.Scenario)
	}
	return nil
}
