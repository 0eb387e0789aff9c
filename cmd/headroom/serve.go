package main

import (
	"context"
	"flag"
	"io"
	"os"

	"github.com/headroomhq/headroom/service"
)

func serveCommand() command {
	return command{
		name:    "serve",
		summary: "run trainer and predictor in one process, sharing bundles in memory",
		run:     runServe,
	}
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := serveConfig(args, stderr)
	if err != nil {
		return err
	}
	return runService(ctx, cfg)
}

// serveConfig is the configuration `headroom serve args` runs, with logs
// going to stderr. It opens nothing.
func serveConfig(args []string, stderr io.Writer) (service.Config, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c commonFlags
	var t trainerFlags
	var p predictorFlags
	c.register(fs)
	t.register(fs)
	p.register(fs, false)
	if err := parseFlags(fs, args); err != nil {
		return service.Config{}, err
	}
	p.applyPredictHostPort(fs, os.LookupEnv)
	cfg, err := c.config(stderr)
	if err != nil {
		return service.Config{}, err
	}
	if cfg.Trainer, err = t.config(); err != nil {
		return service.Config{}, err
	}
	cfg.Predictor = &p.cfg
	return cfg, nil
}
