package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/headroomhq/headroom/lab/loadgen"
	"github.com/headroomhq/headroom/lab/trace"
)

func loadgenCommand() command {
	return command{
		name:    "loadgen",
		summary: "send predictions (and samples) to a running predictor (and trainer) at a fixed rate; report latency",
		run:     runLoadgen,
	}
}

func runLoadgen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c loadgen.Config
	fs.StringVar(&c.PredictorURL, "predictor-url", "http://127.0.0.1:8001", "prediction server (loopback unless --allow-remote)")
	fs.StringVar(&c.TrainerURL, "trainer-url", "", "training server: target of --ingest-rate, and scraped for training runs and memory")
	fs.StringVar(&c.Path, "path", "/predict/bulk/strict", "prediction route: /predict/bulk/strict or /predict/bulk")
	fs.Float64Var(&c.Rate, "rate", 1000, "prediction requests per second (0: ingest only)")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "measured window")
	fs.DurationVar(&c.Warmup, "warmup", time.Second, "same load before the window, not recorded")
	fs.IntVar(&c.Rows, "rows", 10, "rows (candidate endpoints) per prediction request")
	fs.IntVar(&c.Concurrency, "concurrency", 36, "prediction requests in flight at most (the router's dispatch limit)")
	fs.Float64Var(&c.IngestRate, "ingest-rate", 0, "training samples per second sent to the trainer (0: none)")
	fs.IntVar(&c.IngestBatch, "ingest-batch", 1000, "samples per ingest request")
	fs.IntVar(&c.IngestConcurrency, "ingest-concurrency", 16, "ingest requests in flight at most (a trainer handles 16 at once)")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Second, "per-request timeout (the router client's)")
	fs.DurationVar(&c.ScrapeInterval, "scrape-interval", time.Second, "how often to read the servers' /metrics and /status (negative: never)")
	fs.StringVar(&c.Token, "token", "", "bearer token sent with every request")
	fs.BoolVar(&c.AllowRemote, "allow-remote", false, "allow targets beyond loopback")
	fs.BoolVar(&c.GoClient, "go-client", false, "send with Go's net/http client, as the router does, instead of the lean client (several times the CPU)")
	tracePath := fs.String("trace", "", "take rows from this llm-d JSONL trace (default: generated rows)")
	seed := fs.Uint64("seed", 1, "seed of the generated rows")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	runs := fs.Int("runs", 1, "repeat the run this many times and report medians (a shared machine is noisy)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: headroom loadgen --predictor-url URL [--trainer-url URL] --rate N --duration D --rows R "+
			"[--ingest-rate N] [--ingest-batch B] [--trace FILE] [--concurrency C] [--json]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	c.Source = loadgen.Generator{Seed: *seed}
	if *tracePath != "" {
		samples, err := trace.ReadFile(*tracePath)
		if err != nil {
			return err
		}
		c.Source = loadgen.Trace(samples)
	}
	if c.Rate == 0 {
		c.PredictorURL = "" // ingest only: do not probe a predictor that may not run
	}
	if *runs < 1 || *runs > 100 {
		return fmt.Errorf("--runs %d: want 1 to 100", *runs)
	}

	var all []*loadgen.Summary
	for i := 0; i < *runs && ctx.Err() == nil; i++ {
		s, err := loadgen.Run(ctx, c)
		if err != nil {
			return err
		}
		all = append(all, s)
	}
	sum := all[0]
	if len(all) > 1 {
		sum = loadgen.Combine(all)
	}
	var err error
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(sum)
	} else {
		err = sum.WriteText(stdout)
	}
	if err != nil {
		return err
	}
	// Like the router's load-test client, a run with failed calls fails.
	failed := sum.Errors
	if sum.Ingest != nil {
		failed += sum.Ingest.Errors
	}
	if failed > 0 {
		return fmt.Errorf("%d requests failed", failed)
	}
	return nil
}
