package main

import (
	"context"
	"flag"
	"io"
	"net/http"
	"os"
)

func predictorCommand() command {
	return command{
		name:    "predictor",
		summary: "run a prediction server that pulls bundles from a trainer",
		run:     runPredictor,
	}
}

func runPredictor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("predictor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c commonFlags
	var p predictorFlags
	c.register(fs)
	p.register(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	p.applyPredictHostPort(fs, os.LookupEnv)
	roles, err := startRoles(ctx, &c, nil, &p, stderr)
	if err != nil {
		return err
	}
	defer roles.close()
	return roles.serve(ctx, map[string]http.Handler{p.listen: roles.predictorHandler})
}
