package main

import (
	"slices"
	"strings"
	"testing"
)

func TestSidecarArgs(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1], true
				}
			}
			return "", false
		}
	}
	for _, tt := range []struct {
		name    string
		argv0   string
		args    []string
		env     func(string) (string, bool)
		want    []string
		wantErr string
	}{
		// The command lines llm-d's router chart renders (routerlib's
		// _latency-predictor.tpl).
		{"chart's prediction server", "uvicorn", []string{"llm_d_latency_predictor.prediction_server:app", "--host", "0.0.0.0", "--port", "8002"}, env(),
			[]string{"predictor", "--predictor-listen", "0.0.0.0:8002"}, ""},
		{"chart's training server", "/usr/local/bin/headroom", []string{"serve"}, env("SERVER_TYPE", "training"), []string{"trainer"}, ""},
		{"uvicorn's = form and defaults", "/usr/local/bin/uvicorn", []string{"--port=9000", "llm_d_latency_predictor.training_server:app"}, env(),
			[]string{"trainer", "--trainer-listen", "127.0.0.1:9000"}, ""},
		{"serve elsewhere", "headroom", []string{"serve"}, env("SERVER_TYPE", "prediction-1"), []string{"serve"}, ""},
		{"serve with flags is as given", "headroom", []string{"serve", "--data-dir", "/x"}, env("SERVER_TYPE", "training"), []string{"serve", "--data-dir", "/x"}, ""},
		{"other commands", "headroom", []string{"eval", "--json"}, env("SERVER_TYPE", "training"), []string{"eval", "--json"}, ""},
		{"an unknown uvicorn option", "uvicorn", []string{"llm_d_latency_predictor.prediction_server:app", "--workers", "4"}, env(), nil, "--workers"},
		{"another app", "uvicorn", []string{"main:app"}, env(), nil, "main:app"},
		{"a missing value", "uvicorn", []string{"llm_d_latency_predictor.prediction_server:app", "--port"}, env(), nil, "needs a value"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sidecarArgs(tt.argv0, tt.args, tt.env)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("sidecarArgs = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
