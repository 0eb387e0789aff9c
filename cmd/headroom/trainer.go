package main

import (
	"context"
	"flag"
	"io"
	"net/http"
)

func trainerCommand() command {
	return command{
		name:    "trainer",
		summary: "run the training server: ingest samples, retrain, publish bundles",
		run:     runTrainer,
	}
}

func runTrainer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("trainer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c commonFlags
	var t trainerFlags
	c.register(fs)
	t.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	roles, err := startRoles(ctx, &c, &t, nil, stderr)
	if err != nil {
		return err
	}
	defer roles.close()
	return roles.serve(ctx, map[string]http.Handler{t.listen: roles.trainerHandler})
}
