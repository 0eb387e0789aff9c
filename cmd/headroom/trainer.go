package main

import (
	"context"
	"flag"
	"io"

	"github.com/headroomhq/headroom/service"
)

func trainerCommand() command {
	return command{
		name:    "trainer",
		summary: "run the training server: ingest samples, retrain, publish bundles",
		run:     runTrainer,
	}
}

func runTrainer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := trainerConfig(args, stderr)
	if err != nil {
		return err
	}
	return runService(ctx, cfg)
}

// trainerConfig is the configuration `headroom trainer args` runs, with logs
// going to stderr. It opens nothing.
func trainerConfig(args []string, stderr io.Writer) (service.Config, error) {
	fs := flag.NewFlagSet("trainer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c commonFlags
	var t trainerFlags
	c.register(fs)
	t.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return service.Config{}, err
	}
	cfg, err := c.config(stderr)
	if err != nil {
		return service.Config{}, err
	}
	if cfg.Trainer, err = t.config(); err != nil {
		return service.Config{}, err
	}
	return cfg, nil
}
