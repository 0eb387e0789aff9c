package main

import (
	"context"
	"flag"
	"io"
	"net/http"
	"os"
)

func serveCommand() command {
	return command{
		name:    "serve",
		summary: "run trainer and predictor in one process, sharing bundles in memory",
		run:     runServe,
	}
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c commonFlags
	var t trainerFlags
	var p predictorFlags
	c.register(fs)
	t.register(fs)
	p.register(fs, false)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	p.applyPredictHostPort(fs, os.LookupEnv)
	roles, err := startRoles(ctx, &c, &t, &p, stderr)
	if err != nil {
		return err
	}
	defer roles.close()
	return roles.serve(ctx, map[string]http.Handler{
		t.listen: roles.trainerHandler,
		p.listen: roles.predictorHandler,
	})
}
