package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/api"
	"github.com/headroomhq/headroom/predictor"
)

func TestLoadgenRefusesRemoteTargets(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"loadgen", "--predictor-url", "http://192.0.2.7:8001", "--duration", "1s"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "not loopback") || !strings.Contains(stderr.String(), "--allow-remote") {
		t.Fatalf("exit %d, stderr %q; want 1 and a loopback error naming --allow-remote", code, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("printed a summary for a refused run: %s", stdout.String())
	}
}

// Against a real predictor with no model yet, every call is a 503: the JSON
// summary says so by kind, and the command fails as the router's own load
// test client does.
func TestLoadgenJSONAndExitStatus(t *testing.T) {
	p, err := predictor.New(predictor.Mean, 0.9)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.NewPredictorHandler(p, api.PredictorOptions{}))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	err = runLoadgen(context.Background(), []string{"--predictor-url", srv.URL, "--rate", "50", "--duration", "200ms",
		"--warmup", "0s", "--rows", "3", "--runs", "2", "--json"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "20 requests failed") {
		t.Fatalf("err %v; want 20 failed requests (2 runs × 10)", err)
	}
	var sum struct {
		AchievedRPS float64           `json:"achieved_rps"`
		P99Ms       *float64          `json:"p99_ms"`
		Errors      int               `json:"errors"`
		ErrorKinds  map[string]int    `json:"error_kinds"`
		Rows        int               `json:"rows_per_request"`
		Runs        []json.RawMessage `json:"runs"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	if sum.Errors != 20 || sum.ErrorKinds["status_503"] != 20 || sum.AchievedRPS != 0 || sum.P99Ms == nil ||
		sum.Rows != 3 || len(sum.Runs) != 2 {
		t.Fatalf("summary %+v\n%s", sum, stdout.String())
	}
}
