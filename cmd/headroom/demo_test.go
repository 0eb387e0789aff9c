package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A small demo, linear models only so it takes a fraction of a second.
var smallDemo = []string{"--servers", "2", "--rate", "4", "--duration", "10s", "--warmup", "10s", "--no-xgboost"}

func TestDemoJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := append([]string{"--json", "--slo-ttft-ms", "150", "--seed", "2"}, smallDemo...)
	if err := runDemo(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("demo: %v\n%s", err, stderr.String())
	}
	var doc struct {
		Servers  int                       `json:"servers"`
		Seed     int                       `json:"seed"`
		Requests int                       `json:"requests"`
		Policies map[string]map[string]any `json:"policies"`
		Model    struct {
			Version uint64 `json:"version"`
			TTFT    struct {
				HoldoutMAPE *float64 `json:"holdout_mape"`
			} `json:"ttft"`
			TPOT struct {
				HoldoutMAPE *float64 `json:"holdout_mape"`
			} `json:"tpot"`
		} `json:"model"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	if doc.Servers != 2 || doc.Seed != 2 || doc.Requests != 40 || doc.Model.Version == 0 ||
		doc.Model.TTFT.HoldoutMAPE == nil || doc.Model.TPOT.HoldoutMAPE == nil {
		t.Errorf("result %+v", doc)
	}
	for _, name := range []string{"round-robin", "least-queue", "load-prefix", "predicted", "oracle", "oracle-ttft", "oracle-slo"} {
		p, ok := doc.Policies[name]
		if !ok {
			t.Errorf("no policy %s in %v", name, doc.Policies)
			continue
		}
		for _, k := range []string{"ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "tpot_p95_ms", "e2e_p50_ms"} {
			if v, _ := p[k].(float64); !(v > 0) {
				t.Errorf("%s %s = %v", name, k, p[k])
			}
		}
		if a, ok := p["slo_attainment"].(float64); !ok || a < 0 || a > 1 {
			t.Errorf("%s slo_attainment %v", name, p["slo_attainment"])
		}
	}
	// Progress goes to stderr, so stdout stays one JSON document.
	if !strings.Contains(stderr.String(), "MAPE figures are ttft/tpot") || !strings.Contains(stderr.String(), "bundle v1") {
		t.Errorf("progress:\n%s", stderr.String())
	}
}

func TestDemoTable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := runDemo(context.Background(), append([]string{"--quiet"}, smallDemo...), &stdout, &stderr); err != nil {
		t.Fatalf("demo: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"40 agentic requests per policy", "TTFT p95 (ms)", "predicted", "final bundle v"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	if stderr.Len() != 0 {
		t.Errorf("--quiet printed progress:\n%s", stderr.String())
	}
}

func TestDemoFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"extra"},
		{"--rate", "-1"},
		{"--servers", "0"},
		{"--slo-ttft-ms", "-3"},
		{"--quantile", "1.5"},
		{"--plot", "somewhere"},
		{"--sweep", "4,-8"},
		{"--sweep", "fast"},
	} {
		var stdout, stderr bytes.Buffer
		if err := runDemo(context.Background(), append(args, "--quiet"), &stdout, &stderr); err == nil {
			t.Errorf("demo %v: no error", args)
		}
	}
}

func TestDemoSweep(t *testing.T) {
	var stdout, stderr bytes.Buffer
	dir := filepath.Join(t.TempDir(), "plots")
	args := append([]string{"--json", "--sweep", "2,4", "--plot", dir}, smallDemo...)
	if err := runDemo(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("demo: %v\n%s", err, stderr.String())
	}
	var doc struct {
		Sweep []struct {
			Rate     float64                   `json:"rate"`
			Policies map[string]map[string]any `json:"policies"`
		} `json:"sweep"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	if len(doc.Sweep) != 2 || doc.Sweep[0].Rate != 2 || doc.Sweep[1].Rate != 4 {
		t.Fatalf("sweep %+v", doc.Sweep)
	}
	for _, pt := range doc.Sweep {
		for _, name := range []string{"round-robin", "least-queue", "load-prefix", "predicted", "oracle", "oracle-ttft"} {
			if _, ok := pt.Policies[name]["ttft_p95_ms"].(float64); !ok {
				t.Errorf("rate %v: policy %s has no ttft_p95_ms: %v", pt.Rate, name, pt.Policies[name])
			}
		}
		if _, ok := pt.Policies["oracle-slo"]; ok {
			t.Errorf("rate %v: oracle-slo without an SLO", pt.Rate)
		}
	}
	for _, name := range []string{"ttft_p50.svg", "ttft_p95.svg", "predicted_vs_actual.svg"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(stderr.String(), "    4 req/s") || !strings.Contains(stderr.String(), "wrote "+dir) {
		t.Errorf("progress:\n%s", stderr.String())
	}
}
