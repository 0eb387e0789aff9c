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

// realVLLM is the shared real-vLLM data beside the repository.
func realVLLM(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("..", "..", "..", "shared", "data", "real-vllm")
	if _, err := os.Stat(dir); err != nil {
		t.Skip("no ../shared/data/real-vllm beside the repository")
	}
	return dir
}

func TestFidelityJSON(t *testing.T) {
	data := realVLLM(t)
	var stdout, stderr bytes.Buffer
	err := runFidelity(context.Background(), []string{"--json",
		filepath.Join(data, "h100", "20260218-150956-codellama-34b-tp2-codegen"),
		filepath.Join(data, "llmservingsim", "RTXPRO6000", "Llama-3.1-8B")}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("fidelity: %v\n%s", err, stderr.String())
	}
	var doc struct {
		Rows []struct {
			Run, Stage, Metric  string
			Predicted, Measured *float64
			APE                 *float64
			Hit, Overloaded     bool
		} `json:"rows"`
		Summary map[string]struct {
			N         int      `json:"n"`
			MedianAPE *float64 `json:"median_ape"`
			HitRate   *float64 `json:"hit_rate"`
		} `json:"summary"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	// 2 stages + 1 stage of 8 metrics, and the engine log's 2 per-request rows.
	if len(doc.Rows) != 3*8+2 || len(doc.Summary) != 8 || doc.Summary["ttft_mean"].N != 3 {
		t.Fatalf("%d rows, summary %+v", len(doc.Rows), doc.Summary)
	}
	for _, r := range doc.Rows {
		if r.Predicted == nil || r.Measured == nil || r.APE == nil || r.Overloaded {
			t.Errorf("row %+v", r)
		}
	}
	if p := doc.Rows[0]; p.Run != "20260218-150956-codellama-34b-tp2-codegen" || p.Stage != "stage_0" || p.Metric != "ttft_mean" {
		t.Errorf("first row %+v", p)
	}
	if last := doc.Rows[len(doc.Rows)-1]; last.Stage != "requests" || last.Metric != "e2e_per_request" || !last.Hit {
		t.Errorf("last row %+v: want the engine log's per-request E2E within 15%%", last)
	}
}

// --engine-args sets an engine argument on every run over what it records:
// prefix caching off, the recurring prompts of an inference-perf run are
// computed whole each time and its TTFT rises.
func TestFidelityEngineArgs(t *testing.T) {
	run := filepath.Join(realVLLM(t), "h100", "20260218-150956-codellama-34b-tp2-codegen")
	ttftMean := func(args ...string) float64 {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if err := runFidelity(context.Background(), append(append([]string{"--json"}, args...), run), &stdout, &stderr); err != nil {
			t.Fatalf("fidelity %v: %v\n%s", args, err, stderr.String())
		}
		var doc struct {
			Rows []struct {
				Stage, Metric string
				Predicted     float64
			} `json:"rows"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, stdout.String())
		}
		for _, r := range doc.Rows {
			if r.Stage == "stage_0" && r.Metric == "ttft_mean" {
				return r.Predicted
			}
		}
		t.Fatalf("no stage_0 ttft_mean in %s", stdout.String())
		return 0
	}
	cached, uncached := ttftMean(), ttftMean("--engine-args", "enable_prefix_caching=false")
	if !(uncached > 1.2*cached) {
		t.Errorf("TTFT mean %.1f ms with the run's prefix caching, %.1f ms without: want well above", cached, uncached)
	}
	var stdout, stderr bytes.Buffer
	if err := runFidelity(context.Background(), []string{"--engine-args", "block_size=32", run}, &stdout, &stderr); err == nil ||
		!strings.Contains(err.Error(), "--engine-args") {
		t.Errorf("--engine-args block_size=32: error %v, want one naming the flag", err)
	}
}

func TestFidelityBLISInputsAndScores(t *testing.T) {
	data := realVLLM(t)
	dir := t.TempDir()
	run := filepath.Join(data, "llmservingsim", "RTXPRO6000", "Qwen3-32B")
	var stdout, stderr bytes.Buffer
	if err := runFidelity(context.Background(), []string{"--blis-inputs", dir, run}, &stdout, &stderr); err != nil {
		t.Fatalf("fidelity --blis-inputs: %v\n%s", err, stderr.String())
	}
	if cmd := stdout.String(); !strings.HasPrefix(cmd, "blis replay --model qwen/qwen3-32b ") || !strings.Contains(cmd, "--tp 2") ||
		!strings.Contains(cmd, filepath.Join(dir, "Qwen3-32B.trace.csv")) {
		t.Errorf("command: %s", cmd)
	}
	for _, f := range []string{"hardware.json", "Qwen3-32B.trace.yaml", "Qwen3-32B.trace.csv"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	// BLIS's output has the trace's columns; a copy of the input with its
	// chunk times filled in scores as a prediction.
	in, err := os.ReadFile(filepath.Join(dir, "Qwen3-32B.trace.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(in)), "\n")
	var out strings.Builder
	out.WriteString(lines[0] + "\n")
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		f[21], f[22] = f[20]+"0", f[20]+"00" // first and last chunk after the send
		out.WriteString(strings.Join(f, ",") + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "Qwen3-32B.csv"), []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if err := runFidelity(context.Background(), []string{"--blis", dir, run}, &stdout, &stderr); err != nil {
		t.Fatalf("fidelity --blis: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "ttft_per_request") {
		t.Errorf("table:\n%s", stdout.String())
	}
}

func TestFidelityUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "at least one run"},
		{[]string{"--cv", "model", "--blis", "x", "run"}, "exclusive"},
		{[]string{t.TempDir()}, "neither exp-config.yaml"},
		{[]string{"--cv", "gpu", "../../lab/sim/testdata"}, "neither"},
		{[]string{"--cv", "tp", "../../lab/sim/testdata"}, "want model, gpu or run"},
	} {
		var stdout, stderr bytes.Buffer
		if err := runFidelity(context.Background(), tt.args, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one mentioning %q", tt.args, err, tt.want)
		}
	}
}

func TestCalibrateTrace(t *testing.T) {
	trace := filepath.Join("..", "..", "..", "shared", "data", "traces", "sharegpt-h200.jsonl")
	if _, err := os.Stat(trace); err != nil {
		t.Skip("no shared H200 trace")
	}
	var stdout, stderr bytes.Buffer
	if err := runCalibrate(context.Background(), []string{"--trace", trace}, &stdout, &stderr); err != nil {
		t.Fatalf("calibrate --trace: %v\n%s", err, stderr.String())
	}
	// The linear calibration whatif --config reads: the H200 defaults, unrounded.
	cfg := filepath.Join(t.TempDir(), "h200.yaml")
	if err := os.WriteFile(cfg, stdout.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"step_ms: 19.19", "prefill_free_tokens: 147", "frontend_ms: 33.81"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("calibration lacks %q:\n%s", want, stdout.String())
		}
	}
	stdout.Reset()
	if err := runWhatif(context.Background(), []string{"--workload", "chat", "--requests", "50", "--config", cfg}, &stdout, &stderr); err != nil {
		t.Errorf("whatif --config on the calibration: %v", err)
	}
	if err := runCalibrate(context.Background(), []string{"--trace", trace, "run"}, &stdout, &stderr); err == nil {
		t.Error("--trace with run directories was accepted")
	}
}

func TestWhatifModelOnGPU(t *testing.T) {
	data := realVLLM(t)
	run := filepath.Join(data, "h100", "20260218-150956-codellama-34b-tp2-codegen")
	var stdout, stderr bytes.Buffer
	err := runWhatif(context.Background(), []string{"--json",
		"--model", filepath.Join(data, "models", "CodeLlama-34b-Instruct-hf"), "--gpu", "H100-SXM",
		"--engine-args", "tensor_parallel_size=2,max_num_seqs=128,max_num_batched_tokens=2048",
		"--inference-perf", filepath.Join(run, "results", "config.yaml"),
		"--config", "default", "--config", "max_num_seqs=16"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("whatif --model: %v\n%s", err, stderr.String())
	}
	var doc struct {
		Configs []struct {
			Name      string  `json:"name"`
			Servers   int     `json:"servers"`
			KVBlocks  int     `json:"kv_blocks"`
			Completed int     `json:"completed"`
			TimedOut  int     `json:"timed_out"`
			TPOT      float64 `json:"tpot_p50_ms"`
			TTFT      float64 `json:"ttft_p50_ms"`
		} `json:"configs"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	c := doc.Configs
	// 9 000 requests at 5 then 10 per second: served by one TP-2 engine
	// (the KV cache sized from two H100s) at the run's measured 14-15 ms a
	// token; 16 sequences at a time cannot keep up at 10 per second.
	if len(c) != 2 || c[0].Servers != 1 || c[0].KVBlocks < 10000 || c[0].Completed != 9000 || c[0].TPOT < 12 || c[0].TPOT > 18 {
		t.Fatalf("configs %+v", c)
	}
	if c[1].TTFT < 10*c[0].TTFT || c[1].TimedOut == 0 {
		t.Errorf("max_num_seqs=16: TTFT p50 %v ms against %v, %d timed out; want a queue and time-outs", c[1].TTFT, c[0].TTFT, c[1].TimedOut)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "chat", "--gpu", "H100-SXM", "--config", "default"}, "--gpu needs --model"},
		{[]string{"--workload", "chat", "--model", filepath.Join(data, "models", "Llama-2-7b-hf"), "--config", "default"}, "needs --gpu"},
		{[]string{"--workload", "chat", "--model", filepath.Join(data, "models", "Llama-2-7b-hf"), "--gpu", "B300", "--config", "default"}, "--gpu"},
		{[]string{"--workload", "chat", "--model", filepath.Join(data, "models", "Llama-2-7b-hf"), "--gpu", "H100-SXM", "--engine-args", "max_num_seqs=x", "--config", "default"}, "max_num_seqs"},
	} {
		if err := runWhatif(context.Background(), tt.args, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one mentioning %q", tt.args, err, tt.want)
		}
	}
}
