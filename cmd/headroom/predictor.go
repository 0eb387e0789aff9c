package main

import (
	"context"
	"flag"
	"io"
	"os"
	"runtime/debug"

	"github.com/headroomhq/headroom/service"
)

func predictorCommand() command {
	return command{
		name:    "predictor",
		summary: "run a prediction server that pulls bundles from a trainer",
		run:     runPredictor,
	}
}

func runPredictor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := predictorConfig(args, stderr)
	if err != nil {
		return err
	}
	tuneGC(os.LookupEnv)
	return runService(ctx, cfg)
}

// predictorConfig is the configuration `headroom predictor args` runs, with logs
// going to stderr. It opens nothing.
func predictorConfig(args []string, stderr io.Writer) (service.Config, error) {
	fs := flag.NewFlagSet("predictor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c commonFlags
	var p predictorFlags
	c.register(fs)
	p.register(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return service.Config{}, err
	}
	p.applyPredictHostPort(fs, os.LookupEnv)
	cfg, err := c.config(stderr)
	if err != nil {
		return service.Config{}, err
	}
	cfg.Predictor = &p.cfg
	return cfg, nil
}

// Garbage collection settings of a predictor process, unless GOGC or
// GOMEMLIMIT set them. A predictor's live heap is a few megabytes, so with
// Go's defaults it collected about ten times a second under load, and each
// collection stops the world to preempt goroutines walking trees (a signal
// each, slow in a virtual machine): 120 collections in 30 s, client p99 at
// 5,000 requests/s 5.4-11.8 ms against 2.9-4.3 ms with these settings
// (9 collections). The memory limit keeps the heap, and so RSS, bounded
// when large requests raise the live heap.
const (
	predictorGCPercent   = 800
	predictorMemoryLimit = 40 << 20
)

// tuneGC applies the predictor's collection settings where the environment
// (read through lookup) leaves them to the program.
func tuneGC(lookup func(string) (string, bool)) {
	if _, ok := lookup("GOGC"); !ok {
		debug.SetGCPercent(predictorGCPercent)
	}
	if _, ok := lookup("GOMEMLIMIT"); !ok {
		debug.SetMemoryLimit(predictorMemoryLimit)
	}
}
