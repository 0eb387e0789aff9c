package main

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
)

// llm-d's router chart (config/charts/routerlib, latencyPredictor) starts
// the reference servers as sidecars of the EPP pod with command lines of
// their own image, which its values cannot change: each prediction server
// as `uvicorn llm_d_latency_predictor.prediction_server:app --host H --port
// P`, the training server with its image's default command and
// SERVER_TYPE=training. sidecarArgs turns those into Headroom's
// subcommands, so that Headroom's image stands in for the reference images
// through the chart's image values alone (deploy/llm-d, docs/DEPLOY.md):
// the image links uvicorn to headroom.

// sidecarArgs returns the subcommand and flags to run for a process started
// as argv0 with args, given the environment lookup.
func sidecarArgs(argv0 string, args []string, lookup func(string) (string, bool)) ([]string, error) {
	if filepath.Base(argv0) == "uvicorn" {
		return uvicornArgs(args)
	}
	// The image's default command is `serve`; the chart's training server
	// says which role it wants.
	if len(args) == 1 && args[0] == "serve" {
		if role, ok := lookup("SERVER_TYPE"); ok && strings.TrimSpace(role) == "training" {
			return []string{"trainer"}, nil
		}
	}
	return args, nil
}

// uvicornArgs maps `uvicorn APP --host H --port P` onto the role APP names:
// the reference's prediction server (llm_d_latency_predictor.prediction_server:app)
// or training server (…training_server:app). Other uvicorn options (workers,
// reload, logging) have no meaning for Headroom and are refused, so a
// changed chart is noticed rather than half-followed.
func uvicornArgs(args []string) ([]string, error) {
	var app, host, port string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(a, "=")
		switch name {
		case "--host", "--port":
			if !hasValue {
				if i+1 >= len(args) {
					return nil, fmt.Errorf("uvicorn: %s needs a value", name)
				}
				i++
				value = args[i]
			}
			if name == "--host" {
				host = value
			} else {
				port = value
			}
		default:
			if strings.HasPrefix(a, "-") || app != "" {
				return nil, fmt.Errorf("uvicorn: %q: Headroom answers only `uvicorn APP --host H --port P`, as llm-d's chart starts the reference servers", a)
			}
			app = a
		}
	}
	var role, flag string
	switch {
	case strings.HasSuffix(app, "prediction_server:app"):
		role, flag = "predictor", "--predictor-listen"
	case strings.HasSuffix(app, "training_server:app"):
		role, flag = "trainer", "--trainer-listen"
	default:
		return nil, fmt.Errorf("uvicorn: app %q is not the reference's prediction or training server", app)
	}
	if host == "" {
		host = "127.0.0.1" // uvicorn's defaults
	}
	if port == "" {
		port = "8000"
	}
	return []string{role, flag, net.JoinHostPort(host, port)}, nil
}
