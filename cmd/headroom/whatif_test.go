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

func TestWhatifJSON(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "small.yaml")
	if err := os.WriteFile(cfg, []byte("kv_blocks: 1500\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := runWhatif(context.Background(), []string{"--workload", "agentic", "--json", "--seed", "3",
		"--config", "default", "--config", cfg, "--config", "prefix_caching=false"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("whatif: %v\n%s", err, stderr.String())
	}
	var doc struct {
		Configs []struct {
			Name          string         `json:"name"`
			KVBlocks      int            `json:"kv_blocks"`
			Completed     int            `json:"completed"`
			PrefixHitRate float64        `json:"prefix_hit_rate"`
			TTFTP50       float64        `json:"ttft_p50_ms"`
			Change        map[string]any `json:"change_vs_first"`
		} `json:"configs"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	c := doc.Configs
	if len(c) != 3 || c[0].Name != "default" || c[1].Name != "small" || c[2].Name != "prefix_caching=false" {
		t.Fatalf("configs %+v", c)
	}
	if c[1].KVBlocks != 1500 || c[0].Completed != 192 || c[2].PrefixHitRate != 0 || c[0].PrefixHitRate == 0 {
		t.Errorf("configs %+v", c)
	}
	if c[0].Change != nil || c[1].Change == nil {
		t.Error("change_vs_first should be on every configuration but the first")
	}
}

func TestWhatifTableFromLog(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := runWhatif(context.Background(), []string{"--log", "../../lab/sim/testdata/example.jsonl", "--servers", "1",
		"--config", "default", "--config", "kv_blocks=12"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("whatif: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"5 requests", "default", "kv_blocks=12", "vs first", "prefix hit rate"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestWhatifUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--config", "default"}, "exactly one of --log and --workload"},
		{[]string{"--workload", "chat", "--log", "x", "--config", "default"}, "exactly one"},
		{[]string{"--workload", "chat"}, "at least one --config"},
		{[]string{"--workload", "poker", "--config", "default"}, "agentic or chat"},
		{[]string{"--workload", "chat", "--config", "kv_blocks=none"}, "not an integer"},
		{[]string{"--workload", "chat", "--config", "default", "--router", "random"}, "--router"},
		{[]string{"--log", "missing.jsonl", "--config", "default"}, "missing.jsonl"},
		{[]string{"--workload", "chat", "--config", "default", "extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		err := runWhatif(context.Background(), tt.args, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one mentioning %q", tt.args, err, tt.want)
		}
	}
}

func TestWhatifPD(t *testing.T) {
	var stdout, stderr bytes.Buffer
	samples := filepath.Join(t.TempDir(), "pd.jsonl")
	err := runWhatif(context.Background(), []string{"--workload", "chat", "--requests", "120", "--rate", "6", "--json",
		"--pd", "zones", "--prefill-pods", "2", "--decode-pods", "2", "--prefill-failure-rate", "0.5",
		"--pd-samples", samples}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("whatif --pd: %v\n%s", err, stderr.String())
	}
	var doc struct {
		Policies map[string]struct {
			Requests        int     `json:"requests"`
			Completed       int     `json:"completed"`
			TTFTP95         float64 `json:"ttft_p95_ms"`
			KVTransferP50   float64 `json:"kv_transfer_p50_ms"`
			SplitRate       float64 `json:"split_rate"`
			PrefillFailures int     `json:"prefill_failures"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	for _, name := range []string{"greedy", "topology-constant", "decode-only"} {
		p, ok := doc.Policies[name]
		if !ok || p.Requests != 120 || p.Completed != 120 || p.TTFTP95 <= 0 {
			t.Errorf("%s: %+v", name, p)
		}
		split := name != "decode-only"
		if split != (p.SplitRate == 1) || split != (p.KVTransferP50 > 0) || split != (p.PrefillFailures > 0) {
			t.Errorf("%s: split rate %g, transfer p50 %g, failures %d", name, p.SplitRate, p.KVTransferP50, p.PrefillFailures)
		}
	}

	data, err := os.ReadFile(samples)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 3*120 {
		t.Fatalf("%d sample lines, want one per request and router (360)", len(lines))
	}
	transfers := 0
	for _, line := range lines {
		var s struct {
			Router     string  `json:"router"`
			Transfer   float64 `json:"actual_kv_transfer_ms"`
			Tokens     int     `json:"kv_transfer_tokens"`
			Class      string  `json:"link_class"`
			PrefillPod string  `json:"prefill_pod"`
		}
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		if s.Transfer > 0 {
			transfers++
			if s.Tokens <= 0 || s.Class == "" || s.PrefillPod == "" || s.Router == "decode-only" {
				t.Errorf("transfer sample lacks its route: %s", line)
			}
		}
	}
	if transfers == 0 {
		t.Error("no sample carries a KV transfer")
	}

	for _, args := range [][]string{
		{"--pd", "galaxy"},
		{"--pd", "racks", "--decode-pods", "0"},
		{"--pd", "racks", "--pd-routers", "greedy,joint"},
		{"--pd", "racks", "--config", "default", "--config", "kv_blocks=100"},
	} {
		stdout.Reset()
		err := runWhatif(context.Background(), append([]string{"--workload", "chat", "--requests", "10"}, args...), &stdout, &stderr)
		if err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// What whatif --pd-samples writes, eval --transfer measures.
func TestEvalTransferOnWhatifSamples(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pd.jsonl")
	var stdout, stderr bytes.Buffer
	if err := runWhatif(context.Background(), []string{"--workload", "agentic", "--sessions", "40", "--pd", "zones",
		"--prefill-pods", "4", "--decode-pods", "4", "--pd-routers", "greedy", "--pd-samples", path}, &stdout, &stderr); err != nil {
		t.Fatalf("whatif: %v\n%s", err, stderr.String())
	}
	stdout.Reset()
	if err := runEval(context.Background(), []string{"--transfer", "--pd-samples", path, "--seeds", "2", "--json"}, &stdout, &stderr); err != nil {
		t.Fatalf("eval --transfer: %v\n%s", err, stderr.String())
	}
	var r struct {
		Samples int `json:"samples"`
		Holdout struct {
			MAPE float64 `json:"mape"`
		} `json:"holdout"`
		Extrapolation []struct {
			Class string  `json:"class"`
			Bias  float64 `json:"median_bias"`
		} `json:"extrapolation"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	if r.Samples < 100 || r.Holdout.MAPE <= 0 || r.Holdout.MAPE > 15 {
		t.Errorf("report %+v", r)
	}
	if err := runEval(context.Background(), []string{"--transfer", "--synthetic"}, &stdout, &stderr); err == nil {
		t.Error("--transfer with --synthetic accepted")
	}
}
