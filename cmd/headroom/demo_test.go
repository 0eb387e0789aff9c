package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/lab/demo"
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

// A small P/D demo: 2 + 2 pods over the zones, linear models only.
var smallPDDemo = []string{"--pd", "zones", "--prefill-pods", "2", "--decode-pods", "2", "--rate", "4",
	"--duration", "15s", "--warmup", "20s", "--no-xgboost"}

// demo --pd --json has issue 15's fields for every policy, and the model's
// three targets.
func TestDemoPDJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := runDemo(context.Background(), append([]string{"--json", "--seed", "3"}, smallPDDemo...), &stdout, &stderr); err != nil {
		t.Fatalf("demo --pd: %v\n%s", err, stderr.String())
	}
	var doc struct {
		Layout      string                    `json:"layout"`
		PrefillPods int                       `json:"prefill_pods"`
		DecodePods  int                       `json:"decode_pods"`
		Seed        int                       `json:"seed"`
		Requests    int                       `json:"requests"`
		Policies    map[string]map[string]any `json:"policies"`
		Model       map[string]any            `json:"model"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	if doc.Layout != "zones" || doc.PrefillPods != 2 || doc.DecodePods != 2 || doc.Seed != 3 || doc.Requests < 60 {
		t.Errorf("result %+v", doc)
	}
	for _, name := range []string{"greedy", "topology-constant", "joint", "joint-slo", "oracle"} {
		p, ok := doc.Policies[name]
		if !ok {
			t.Errorf("no policy %s in %v", name, doc.Policies)
			continue
		}
		for _, k := range []string{"requests", "completed", "ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "tpot_p95_ms",
			"e2e_p50_ms", "e2e_p95_ms", "kv_transfer_p50_ms", "kv_transfer_p95_ms", "split_rate", "slo_attainment"} {
			v, ok := p[k].(float64)
			if !ok || v < 0 || (strings.HasSuffix(k, "_ms") && !strings.HasPrefix(k, "kv_transfer") && v == 0) {
				t.Errorf("%s %s = %v", name, k, p[k])
			}
		}
		if p["requests"] != float64(doc.Requests) || p["completed"] != float64(doc.Requests) {
			t.Errorf("%s: %v of %v requests completed", name, p["completed"], p["requests"])
		}
	}
	for _, target := range []string{"ttft", "tpot", "kv_transfer"} {
		m, ok := doc.Model[target].(map[string]any)
		if !ok {
			t.Errorf("model has no %s: %v", target, doc.Model)
			continue
		}
		if v, ok := m["holdout_mape"].(float64); !ok || !(v > 0) {
			t.Errorf("model %s holdout_mape = %v", target, m["holdout_mape"])
		}
	}
	// The joint policies routed most requests on pair predictions, the
	// rest on the fallback because the service had no model yet or marked
	// a route extrapolated, never because a call failed.
	for _, name := range []string{"joint", "joint-slo"} {
		router, _ := doc.Policies[name]["router"].(map[string]any)
		routed, _ := router["routed"].(float64)
		notReady, _ := router["not_ready"].(float64)
		extrapolated, _ := router["extrapolated"].(float64)
		if routed < float64(doc.Requests)/2 || router["failed"] != 0.0 || routed+notReady+extrapolated != float64(doc.Requests) {
			t.Errorf("%s router %v for %d requests", name, router, doc.Requests)
		}
	}
}

func TestDemoPDFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--pd", "moon"},
		{"--pd", "zones", "--servers", "3"},
		{"--pd", "zones", "--sweep", "4,8"},
		{"--pd", "zones", "--prefill-pods", "0"},
		{"--pd", "zones", "--slo-ttft-ms", "0", "--slo-tpot-ms", "0"},
		{"--pd", "zones", "--prefill-failure-rate", "2"},
		{"--pd", "zones", "--split-threshold", "-1"},
	} {
		var stdout, stderr bytes.Buffer
		if err := runDemo(context.Background(), append(args, "--quiet"), &stdout, &stderr); err == nil {
			t.Errorf("demo %v: no error", args)
		}
	}
}

// llm-d's scheduler in the loop: its flags need --pd (and the timing flag
// --llmd), and llm-d's config decides what the built-in policies' flags
// would; each refused before anything runs.
func TestDemoLLMDFlagErrors(t *testing.T) {
	const url = "http://127.0.0.1:9"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--llmd", url}, "need --pd"},
		{[]string{"--no-transfer-timing"}, "need --pd"},
		{[]string{"--pd", "zones", "--no-transfer-timing"}, "--no-transfer-timing needs --llmd"},
		{[]string{"--pd", "zones", "--llmd", url, "--decide-split"}, "--decide-split does not apply to --llmd"},
		{[]string{"--pd", "zones", "--llmd", url, "--trust-extrapolation"}, "--trust-extrapolation does not apply to --llmd"},
	} {
		var stdout, stderr bytes.Buffer
		err := runDemo(context.Background(), append(tc.args, "--quiet"), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("demo %v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestDemoModel runs the demo's fleet on the Roofline of a named model and
// GPU: the servers are then that deployment, not the H200 calibration, and
// a P/D run's transfers carry that model's KV bytes unless told otherwise.
func TestDemoModel(t *testing.T) {
	model := filepath.Join(realVLLM(t), "models", "Llama-3.1-8B")
	hw := []string{"--model", model, "--gpu", "H100-SXM", "--engine-args", "max_num_seqs=64"}
	run := func(args ...string) map[string]any {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if err := runDemo(context.Background(), append([]string{"--json", "--quiet"}, args...), &stdout, &stderr); err != nil {
			t.Fatalf("demo %v: %v\n%s", args, err, stderr.String())
		}
		var doc map[string]any
		if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, stdout.String())
		}
		return doc
	}
	ttftP50 := func(doc map[string]any, policy string) float64 {
		p, _ := doc["policies"].(map[string]any)[policy].(map[string]any)
		v, _ := p["ttft_p50_ms"].(float64)
		return v
	}
	def, roof := run(smallDemo...), run(append(hw, smallDemo...)...)
	if a, b := ttftP50(def, "round-robin"), ttftP50(roof, "round-robin"); !(a > 0 && b > 0) || a == b {
		t.Errorf("round-robin TTFT p50: %v ms on the H200 calibration, %v ms on an 8B model on an H100: want both, and different", a, b)
	}
	// Llama-3.1-8B: 32 layers × K and V × 8 KV heads × 128 × 2 bytes.
	pd := run(append(hw, smallPDDemo...)...)
	if got, want := pd["kv_bytes_per_token"], float64(32*2*8*128*2); got != want {
		t.Errorf("--pd --model: kv_bytes_per_token %v, want the model's %v", got, want)
	}
	pd = run(append(append(hw, "--kv-bytes-per-token", "1000"), smallPDDemo...)...)
	if got := pd["kv_bytes_per_token"]; got != 1000.0 {
		t.Errorf("--kv-bytes-per-token 1000 with --model: kv_bytes_per_token %v", got)
	}
	for _, args := range [][]string{
		{"--gpu", "H100-SXM"},
		{"--engine-args", "max_num_seqs=8"},
		{"--model", model},
		{"--model", model, "--gpu", "TPU"},
		{"--model", filepath.Join(t.TempDir(), "nothing"), "--gpu", "H100-SXM"},
		{"--model", model, "--gpu", "H100-SXM", "--engine-args", "max_num_seqs=0"},
	} {
		var stdout, stderr bytes.Buffer
		if err := runDemo(context.Background(), append(args, "--quiet"), &stdout, &stderr); err == nil {
			t.Errorf("demo %v: no error", args)
		}
	}
}

// The --llmd JSON has no field for the trainer's model kind, so a run whose
// trainer found no xgboost CLI says so on stderr, and stdout stays exactly
// the JSON; with trees there is nothing to say.
func TestDemoLLMDJSONSaysWhenTreesWereMissing(t *testing.T) {
	for _, trees := range []bool{false, true} {
		res := &demo.LLMDResult{Layout: "zones", Seed: 1, Configs: map[string]demo.LLMDConfigResult{"headroom": {Requests: 3}},
			Run: &demo.Result{XGBoost: trees}}
		var stdout, stderr bytes.Buffer
		if err := writeLLMD(&stdout, &stderr, res, true); err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
			t.Fatalf("trees %v: stdout is not one JSON value: %v\n%s", trees, err, stdout.String())
		}
		if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, []string{"configs", "layout", "seed"}) {
			t.Errorf("trees %v: JSON keys %v", trees, keys)
		}
		warned := strings.Contains(stderr.String(), "linear models only")
		if warned == trees {
			t.Errorf("trees %v: stderr %q", trees, stderr.String())
		}
	}
}
