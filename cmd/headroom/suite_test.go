package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/lab/suite"
)

// `headroom suite` writes the built-in suite and its manifest; the manifest
// alone regenerates it, and a tampered manifest is refused.
func TestSuiteGeneratesAndRegenerates(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	if err := runSuite(context.Background(), []string{dir}, &stdout, &stderr); err != nil {
		t.Fatalf("suite: %v\n%s", err, stderr.String())
	}
	m, traces, err := suite.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(traces) != len(suite.Default().Traces) {
		t.Fatalf("%d traces written", len(traces))
	}
	for _, want := range []string{"decode-bound", "held-out", "manifest " + filepath.Join(dir, suite.ManifestName)} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	manifest := filepath.Join(dir, suite.ManifestName)
	again := t.TempDir()
	if err := runSuite(context.Background(), []string{"--manifest", manifest, again}, &stdout, &stderr); err != nil {
		t.Fatalf("regenerate: %v", err)
	}
	for i := range m.Traces {
		a, _ := os.ReadFile(filepath.Join(dir, m.Traces[i].File()))
		b, _ := os.ReadFile(filepath.Join(again, m.Traces[i].File()))
		if !bytes.Equal(a, b) {
			t.Errorf("%s regenerated differently", m.Traces[i].Name)
		}
	}
	m.Traces[0].Seed++
	data, _ := m.Encode()
	if err := os.WriteFile(manifest, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runSuite(context.Background(), []string{"--manifest", manifest, t.TempDir()}, &stdout, &stderr); err == nil {
		t.Error("a manifest whose digest its settings do not produce was accepted")
	}
	if err := runSuite(context.Background(), []string{"--manifest", manifest, "--refresh", t.TempDir()}, &stdout, &stderr); err != nil {
		t.Errorf("--refresh: %v", err)
	}
	if err := runSuite(context.Background(), nil, &stdout, &stderr); err == nil {
		t.Error("no directory accepted")
	}
}

// `headroom eval --suite` on a two-trace suite prints one table with every
// trace × target × mode; the linear model keeps it quick (the baselines
// still train xgboost, so -short skips it).
func TestEvalSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("trains xgboost models over and over; skipped with -short")
	}
	if _, err := exec.LookPath("xgboost"); err != nil {
		t.Skip("xgboost CLI not installed (apt-get install xgboost)")
	}
	m := suite.Default()
	m.Traces = m.Traces[4:] // small-model (tune), large-model and pd-pool (held out)
	m.HeldOutRegimes = []string{"large-model", "pd-pool"}
	m.Eval = suite.Eval{Seeds: 1, Every: 100}
	for i := range m.Traces {
		m.Traces[i].Workload.Requests = 120
	}
	dir := t.TempDir()
	if err := suite.Generate(context.Background(), m, dir, false); err != nil {
		t.Fatal(err)
	}
	// --only leaves large-model out; pd-pool's rows carry both pod types
	// and KV transfers, so it has a third target.
	var stdout, stderr bytes.Buffer
	err := runEval(context.Background(), []string{"--suite", dir, "--only", "small-model,pd-pool", "--model-kind", "linear"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("eval --suite: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	if n := strings.Count(out, "small-model "); n != 4 {
		t.Errorf("%d small-model lines, want 4 (2 targets × 2 modes):\n%s", n, out)
	}
	if n := strings.Count(out, "pd-pool "); n != 6 || strings.Count(out, " kv_transfer ") != 2 || !strings.Contains(out, "held-out") {
		t.Errorf("%d pd-pool lines, want 6 (3 targets × 2 modes), held out:\n%s", n, out)
	}
	if strings.Contains(out, "large-model") {
		t.Errorf("--only small-model,pd-pool reported large-model:\n%s", out)
	}
	if !strings.Contains(out, "split over 1 seeds, prequential retraining every 100 rows, 10 lines") {
		t.Errorf("the manifest's settings are not the ones used:\n%s", out)
	}
	for _, bad := range [][]string{
		{"--suite", dir, "--mode", "split"},
		{"--suite", dir, "--synthetic"},
		{"--suite", t.TempDir()},
		{"--suite", dir, "--only", "galaxy"},
		{"--synthetic", "--only", "pd-pool"},
		{"--transfer", "--only", "pd-pool"},
	} {
		if err := runEval(context.Background(), bad, &stdout, &stderr); err == nil {
			t.Errorf("eval %v accepted", bad)
		}
	}
}
