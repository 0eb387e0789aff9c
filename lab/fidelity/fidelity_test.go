package fidelity

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/lab/sim"
)

// writeFiles writes files (path → content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const tinyModel = `{"architectures": ["LlamaForCausalLM"], "hidden_size": 1024, "intermediate_size": 4096,
	"num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1000, "torch_dtype": "bfloat16"}`

func sheet(name string, tflops float64) string {
	return `{"name": "` + name + `", "compute": {"bf16_tensor_core": ` + strings.TrimSpace(fmtG(tflops)) + `, "with_sparsity": true},
		"memory": {"capacity_gb": 80, "bandwidth_tb_s": 3.35}, "interconnect": {"nvlink_bandwidth_gb_s": 900}}`
}

func fmtG(v float64) string { b, _ := json.Marshal(v); return string(b) }

// stageJSON is an inference-perf lifecycle file with the given figures,
// seconds.
func stageJSON(ttftMean, ttftP90, e2eMean, tpotP90 float64, ok, failed int) string {
	d := func(mean, p90 float64) map[string]float64 {
		return map[string]float64{"mean": mean, "p90": p90, "p99": p90}
	}
	v := map[string]any{
		"load_summary": map[string]any{"count": ok + failed},
		"successes": map[string]any{"count": ok,
			"latency": map[string]any{"time_to_first_token": d(ttftMean, ttftP90), "request_latency": d(e2eMean, e2eMean),
				"time_per_output_token": d(tpotP90/2, tpotP90)},
			"throughput": map[string]any{"requests_per_sec": 2.0}},
		"failures": map[string]any{"count": failed},
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// A run directory in the shared data's layout: engine arguments from
// exp-config.yaml, the workload from results/config.yaml (not profile.yaml,
// which asks for keys inference-perf ignored), the model and the GPU
// (the SXM sheet of two H100s) found in directories above it.
func TestLoadInferencePerfRun(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"models/Tiny-1b/config.json": tinyModel,
		"hardware/h100-nvl.json":     sheet("H100 NVL", 1671),
		"hardware/h100-sxm.json":     sheet("H100 SXM", 1979),
		"h100/run-a/exp-config.yaml": "model: org/tiny-1B\ntensor_parallelism: 2\nmax_model_len: 4096\nmax_num_batched_tokens: 1024\nmax_num_seqs: 32\n",
		"h100/run-a/profile.yaml":    `{"data": {"shared_prefix": {"num_unique_system_prompts": 11}}}`,
		"h100/run-a/results/config.yaml": `data:
  type: shared_prefix
  shared_prefix: {num_groups: 2, num_prompts_per_group: 3, system_prompt_len: 32, question_len: 64, output_len: 11}
load:
  type: constant
  interval: 1.0
  stages: [{rate: 2.0, duration: 10}, {rate: 4.0, duration: 5}]
server: {ignore_eos: true}
api: {streaming: true}
`,
		"h100/run-a/results/stage_0_lifecycle_metrics.json": stageJSON(0.05, 0.06, 0.55, 0.1, 20, 0),
		"h100/run-a/results/stage_1_lifecycle_metrics.json": stageJSON(0.07, 0.08, 0.57, 0.12, 18, 2),
	})
	r, err := Load(filepath.Join(root, "h100", "run-a"), "")
	if err != nil {
		t.Fatal(err)
	}
	s := r.Spec
	if s.Arch.Layers != 8 || s.Arch.Name != "org/tiny-1B" || s.GPU.Name != "H100 SXM" || s.Tool != InferencePerf {
		t.Errorf("model %q (%d layers) on %q, tool %v", s.Arch.Name, s.Arch.Layers, s.GPU.Name, s.Tool)
	}
	if e := s.Engine; e.TP != 2 || e.MaxNumSeqs != 32 || e.MaxNumBatchedTokens != 1024 || e.MaxModelLen != 4096 ||
		!e.PrefixCaching || !e.AsyncScheduling || e.GPUMemoryUtilization != 0.9 {
		t.Errorf("engine %+v: want the run's arguments over vLLM's defaults", e)
	}
	if len(s.Stages) != 2 || len(s.Stages[0]) != 20 || len(s.Stages[1]) != 20 || s.Interval != time.Second ||
		s.Stages[0][0].PromptTokens != 97 || s.Stages[0][0].OutputTokens != 11 {
		t.Errorf("workload: %d stages of %d and %d requests", len(s.Stages), len(s.Stages[0]), len(s.Stages[1]))
	}
	m := r.Measured.Stages[1]
	// Per-token time from E2E and TTFT over the configured output length;
	// its p90 twice inference-perf's (two timeline entries per token).
	if got, want := m.Values[PerTokenMean], 1e3*(0.57-0.07)/10; math.Abs(got-want) > 1e-9 {
		t.Errorf("per-token mean %v ms, want (E2E − TTFT)/(11 − 1) = %v", got, want)
	}
	if m.Values[PerTokenP90] != 240 || m.Values[TTFTP90] != 80 || m.Failures != 2 || !m.Overloaded() || r.Measured.Stages[0].Overloaded() {
		t.Errorf("stage 1 figures %+v", m)
	}
	if _, err := Load(filepath.Join(root, "h100", "run-a"), "h100-nvl"); err != nil {
		t.Errorf("naming the sheet: %v", err)
	}
	if _, err := Load(filepath.Join(root, "h100"), ""); err == nil {
		t.Error("a directory that is not a run was loaded")
	}
}

// An engine log is measured from the engine's own timestamps: TTFT from
// queued to first token, E2E to the last, per token between them.
func TestLoadEngineLog(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"models/tiny/config.json":  tinyModel,
		"hardware/gpu9.json":       sheet("GPU9", 1000),
		"logs/gpu9/tiny/meta.json": `{"model": "x/tiny", "engine_kwargs": {"tensor_parallel_size": 1, "max_num_seqs": 8, "max_num_batched_tokens": 512, "max_model_len": null}}`,
		"logs/gpu9/tiny/requests.jsonl": `{"request_id": "b-0", "input_toks": 100, "output_toks": 11, "arrival_time": 50.0, "queued_ts": 7.0, "scheduled_ts": 7.0, "first_token_ts": 7.5, "last_token_ts": 8.5}
{"request_id": "b-1", "input_toks": 50, "output_toks": 3, "arrival_time": 50.5, "queued_ts": 7.5, "scheduled_ts": 7.6, "first_token_ts": 8.0, "last_token_ts": 8.2}
`,
	})
	r, err := Load(filepath.Join(root, "logs", "gpu9", "tiny"), "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Spec.Tool != EngineLog || r.Spec.GPU.Name != "GPU9" || r.Spec.Engine.MaxNumSeqs != 8 || len(r.Spec.Stages[0]) != 2 ||
		r.Spec.Stages[0][1].Arrival != 500*time.Millisecond {
		t.Fatalf("spec %+v", r.Spec)
	}
	m := r.Measured
	if math.Abs(m.Requests[0].TTFTMs-500) > 1e-6 || math.Abs(m.Requests[1].E2EMs-700) > 1e-6 {
		t.Errorf("per request %+v", m.Requests)
	}
	s := m.Stages[0]
	if got := s.Values[PerTokenMean]; math.Abs(got-(100+100)/2) > 1e-9 {
		t.Errorf("per-token mean %v ms, want the mean of 1000/10 and 200/2", got)
	}
	if got := s.Values[Throughput]; math.Abs(got-2/1.5) > 1e-9 {
		t.Errorf("throughput %v/s, want 2 requests over 1.5 s", got)
	}
}

// Simulated requests are measured as the tool measures them: from the
// client's send, or from the engine's queue for an engine log.
func TestMeasureStage(t *testing.T) {
	req := func(out int) *sim.Request { return &sim.Request{ID: 1, PromptTokens: 10, OutputTokens: out} }
	outs := []*sim.Outcome{
		{Request: req(11), Dispatch: 0, Queued: 10 * time.Millisecond, FirstToken: 100 * time.Millisecond, Finish: 1100 * time.Millisecond, Done: true},
		{Request: req(1), Dispatch: time.Second, Queued: time.Second, FirstToken: 1200 * time.Millisecond, Finish: 1200 * time.Millisecond, Done: true},
		{Request: req(5), Dispatch: time.Second, TimedOut: true},
	}
	s := measureStage(outs, InferencePerf)
	if s.Successes != 2 || s.Failures != 1 || s.Values[TTFTMean] != 150 || s.Values[PerTokenMean] != 100 {
		t.Errorf("client side: %+v", s)
	}
	if got := s.Values[Throughput]; math.Abs(got-2/1.2) > 1e-9 {
		t.Errorf("throughput %v, want 2 successes over 1.2 s", got)
	}
	if e := measureStage(outs, EngineLog); e.Values[TTFTMean] != 145 || e.Values[E2EMean] != (1090+200)/2.0 {
		t.Errorf("engine side: %+v", e.Values)
	}
}

func TestCompareAndSummarize(t *testing.T) {
	st := func(ttft float64, failures int) Stage {
		v := map[string]float64{}
		for _, m := range Metrics {
			v[m] = 100
		}
		v[TTFTMean] = ttft
		return Stage{Requests: 10, Successes: 10 - failures, Failures: failures, Values: v}
	}
	meas := Measurement{Stages: []Stage{st(100, 0), st(100, 0), st(90_000, 40)}}
	pred := Measurement{Stages: []Stage{st(110, 0), st(130, 0), st(100_000, 10)}}
	rows, err := Compare("r", pred, meas)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3*len(Metrics)+1 {
		t.Fatalf("%d rows, want %d (and the overloaded stage's failures)", len(rows), 3*len(Metrics)+1)
	}
	find := func(stage, metric string) Row {
		for _, r := range rows {
			if r.Stage == stage && r.Metric == metric {
				return r
			}
		}
		t.Fatalf("no row %s %s", stage, metric)
		return Row{}
	}
	if r := find("stage_0", TTFTMean); r.APE != 10 || r.Signed != 10 || !r.Hit || r.Overloaded {
		t.Errorf("10%% over: %+v", r)
	}
	if r := find("stage_1", TTFTMean); math.Abs(r.APE-30) > 1e-9 || r.Hit {
		t.Errorf("30%% over: %+v", r)
	}
	if r := find("stage_2", Failures); r.Hit || !r.Overloaded || r.Predicted != 10 {
		t.Errorf("10 failures for 40 (a factor 4): %+v", r)
	}
	s := Summarize(rows)[TTFTMean]
	if s.N != 2 || s.MedianAPE != 20 || s.HitRate != 0.5 {
		t.Errorf("summary over the two stages not overloaded: %+v", s)
	}
	if _, err := Compare("r", Measurement{}, meas); err == nil {
		t.Error("a prediction of another number of stages was compared")
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, NewReport(rows)); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Rows    []map[string]any          `json:"rows"`
		Summary map[string]map[string]any `json:"summary"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"run", "stage", "metric", "predicted", "measured", "ape", "hit", "overloaded"} {
		if _, ok := doc.Rows[0][k]; !ok || len(doc.Rows[0]) != 8 {
			t.Errorf("row keys %v, want exactly run, stage, metric, predicted, measured, ape, hit, overloaded", doc.Rows[0])
		}
	}
	if len(doc.Summary) != len(Metrics) || doc.Summary[TTFTMean]["median_ape"] != 20.0 || doc.Summary[TTFTMean]["n"] != 2.0 {
		t.Errorf("summary %v", doc.Summary)
	}
	buf.Reset()
	if err := WriteTable(&buf, NewReport(rows)); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "overloaded stages") || !strings.Contains(out, "+30.0%") {
		t.Errorf("table:\n%s", out)
	}
}

func TestReadBLISTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.csv")
	writeFiles(t, filepath.Dir(path), map[string]string{"run.csv": `request_id,client_id,output_tokens,arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,status
0,stage-0-prompt-1-user-2,11,0,0,50000,1050000,ok
1,stage-0-prompt-3-user-0,11,1000000,1000000,1100000,2100000,ok
2,stage-1-prompt-1-user-1,3,5000000,5000000,0,0,timed_out
3,stage-1-prompt-2-user-1,3,6000000,6000000,6200000,6400000,ok
`})
	m, err := ReadBLISTrace(path, InferencePerf)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Stages) != 2 || m.Stages[0].Values[TTFTMean] != 75 || m.Stages[0].Values[PerTokenMean] != 100 ||
		m.Stages[1].Failures != 1 || m.Stages[1].Successes != 1 {
		t.Errorf("stages %+v", m.Stages)
	}
	if got := m.Stages[0].Values[Throughput]; math.Abs(got-2/2.1) > 1e-9 {
		t.Errorf("throughput %v, want 2 over 2.1 s", got)
	}
	writeFiles(t, filepath.Dir(path), map[string]string{"bad.csv": "a,b\n1,2\n"})
	if _, err := ReadBLISTrace(filepath.Join(filepath.Dir(path), "bad.csv"), InferencePerf); err == nil {
		t.Error("a CSV without BLIS's columns was read")
	}
}

// The shared real-vLLM runs, predicted with the shipped coefficients: the
// in-sample figures the coefficients were fitted to (docs/SIMULATOR.md
// gives them beside the cross-validated ones).
func TestShippedRunsInSample(t *testing.T) {
	root := filepath.Join("..", "..", "..", "shared", "data", "real-vllm")
	dirs, _ := filepath.Glob(filepath.Join(root, "h100", "*"))
	logs, _ := filepath.Glob(filepath.Join(root, "llmservingsim", "*", "*"))
	if len(dirs) == 0 {
		t.Skip("no ../shared/data/real-vllm beside the repository")
	}
	var runs []*Run
	for _, d := range append(dirs, logs...) {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			continue
		}
		r, err := Load(d, "")
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	rep, err := Evaluate(context.Background(), runs, sim.DefaultCoefficients())
	if err != nil {
		t.Fatal(err)
	}
	for metric, limit := range map[string]float64{TTFTMean: 10, TTFTP90: 10, PerTokenMean: 5, E2EMean: 7} {
		if s := rep.Summary[metric]; !(s.MedianAPE <= limit) {
			t.Errorf("%s: median APE %.1f%% over %d stages, target %.0f%%", metric, s.MedianAPE, s.N, limit)
		}
	}
	hits, n := 0, 0
	for _, r := range rep.Rows {
		if r.Overloaded || r.Stage == "requests" || math.IsNaN(r.APE) {
			continue
		}
		n++
		if r.Hit {
			hits++
		}
	}
	if float64(hits) < 0.8*float64(n) {
		t.Errorf("%d of %d stage metrics within 15%%, target 80%%", hits, n)
	}
	for _, r := range rep.Rows {
		if r.Stage == "requests" && !(r.APE <= HitAPE) {
			t.Errorf("%s %s: per-request median APE %.1f%%, target 15%%", r.Run, r.Metric, r.APE)
		}
	}
}
