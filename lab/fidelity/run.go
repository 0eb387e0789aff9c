// Package fidelity holds the simulator against real vLLM runs: it reads a
// run's directory (what was served, on what, with which engine arguments,
// under which load, and what the benchmark tool measured), predicts the
// run from the first part alone with sim's Roofline step model, measures
// the prediction the way the tool measured the run, and compares the two
// metric by metric. It also fits the Roofline's global coefficients across
// runs (fit.go) and scores another simulator's per-request output (BLIS's
// TraceV2, blis.go) with the same measure.
package fidelity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/lab/sim/workload"
)

// Tool is how a run was measured, which decides what its latencies count.
type Tool int

const (
	// InferencePerf is an HTTP client (kubernetes-sigs/inference-perf): its
	// latencies run from sending the request to receiving a chunk, so they
	// include the server's frontend; it gives up on a request after 300 s
	// (aiohttp's default time-out) and reports per load stage.
	InferencePerf Tool = iota
	// EngineLog is a log written inside the engine (a vLLM benchmark
	// harness driving AsyncLLM): latencies from the scheduler's queued
	// timestamp, per request.
	EngineLog
)

// inferencePerfTimeout is the time-out of inference-perf's HTTP client
// (aiohttp's default total time-out): every failure in the shared runs is
// one.
const inferencePerfTimeout = 300 * time.Second

// Run is one real run: what a user knows before it (Spec) and what the
// tool measured (Measured, which Predict never reads).
type Run struct {
	Name     string
	Dir      string
	Spec     Spec
	Measured Measurement
}

// Spec is everything a prediction may use: the model's architecture, the
// GPU, the engine arguments, the tool and the workload as the tool
// generates it (inference-perf's stages) or replays it (a request log's
// arrivals and token counts).
type Spec struct {
	Model string
	// ModelDir is the directory of the model's config.json.
	ModelDir string
	Arch     sim.Architecture
	GPU      sim.GPU
	Engine   sim.EngineArgs
	Tool     Tool
	// Stages are the workload's requests, one slice per load stage, with
	// arrivals from the stage's start; Interval separates the stages, each
	// starting when the one before has ended.
	Stages   [][]*sim.Request
	Interval time.Duration
	// Workload is the inference-perf configuration the stages come from;
	// nil for an engine log.
	Workload *workload.InferencePerf
}

// Load reads a run's directory, in the layout of the shared real-vLLM
// data: an inference-perf run (exp-config.yaml with the engine arguments,
// results/config.yaml as inference-perf parsed it, results/stage_N_
// lifecycle_metrics.json) or an engine log (meta.json with the engine
// arguments, requests.jsonl). The model's config.json is found in a
// models/ directory beside the run or above it, and the GPU's data sheet
// in a hardware/ directory (gpu names one, else the run's path does).
func Load(dir, gpu string) (*Run, error) {
	r := &Run{Name: filepath.Base(filepath.Clean(dir)), Dir: dir}
	var err error
	switch {
	case exists(filepath.Join(dir, "exp-config.yaml")):
		err = r.loadInferencePerf()
	case exists(filepath.Join(dir, "requests.jsonl")):
		err = r.loadEngineLog()
	default:
		err = errors.New("neither exp-config.yaml (an inference-perf run) nor requests.jsonl (an engine log)")
	}
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", dir, err)
	}
	if r.Spec.Arch, r.Spec.ModelDir, err = findModel(dir, r.Spec.Model); err != nil {
		return nil, fmt.Errorf("run %s: %w", dir, err)
	}
	if r.Spec.GPU, err = findGPU(dir, gpu); err != nil {
		return nil, fmt.Errorf("run %s: %w", dir, err)
	}
	return r, nil
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// loadInferencePerf reads the engine arguments of exp-config.yaml and the
// workload of results/config.yaml (what inference-perf parsed, which is
// what ran: the submitted profile.yaml may carry keys it ignored).
func (r *Run) loadInferencePerf() error {
	var exp struct {
		Model               string  `yaml:"model"`
		TP                  int     `yaml:"tensor_parallelism"`
		MaxModelLen         int     `yaml:"max_model_len"`
		MaxNumBatchedTokens int     `yaml:"max_num_batched_tokens"`
		MaxNumSeqs          int     `yaml:"max_num_seqs"`
		GPUMemoryUtil       float64 `yaml:"gpu_memory_utilization"`
		PrefixCaching       *bool   `yaml:"enable_prefix_caching"`
	}
	if err := readYAML(filepath.Join(r.Dir, "exp-config.yaml"), &exp); err != nil {
		return err
	}
	ip, err := ReadInferencePerf(filepath.Join(r.Dir, "results", "config.yaml"))
	if err != nil {
		return err
	}
	e := engineArgs(exp.TP, exp.MaxNumSeqs, exp.MaxNumBatchedTokens, &exp.MaxModelLen, exp.GPUMemoryUtil, exp.PrefixCaching)
	stages, err := ip.StageRequests()
	if err != nil {
		return err
	}
	r.Spec = Spec{Model: exp.Model, Engine: e, Tool: InferencePerf, Stages: stages, Interval: ip.Interval, Workload: &ip}
	m, err := readStageMetrics(filepath.Join(r.Dir, "results"), len(stages), ip.Data.OutputLen)
	if err != nil {
		return err
	}
	r.Measured = m
	return nil
}

// loadEngineLog reads meta.json's engine arguments and requests.jsonl:
// the arrivals and token counts are the workload, the engine's
// timestamps the measurement.
func (r *Run) loadEngineLog() error {
	var meta struct {
		Model  string `json:"model"`
		Kwargs struct {
			TP                  int     `json:"tensor_parallel_size"`
			DP                  int     `json:"data_parallel_size"`
			MaxNumSeqs          int     `json:"max_num_seqs"`
			MaxNumBatchedTokens int     `json:"max_num_batched_tokens"`
			MaxModelLen         *int    `json:"max_model_len"`
			GPUMemoryUtil       float64 `json:"gpu_memory_utilization"`
			PrefixCaching       *bool   `json:"enable_prefix_caching"`
			KVCacheDtype        string  `json:"kv_cache_dtype"`
			Quantization        *string `json:"quantization"`
		} `json:"engine_kwargs"`
	}
	data, err := os.ReadFile(filepath.Join(r.Dir, "meta.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return fmt.Errorf("meta.json: %w", err)
	}
	k := meta.Kwargs
	switch {
	case k.DP > 1:
		return fmt.Errorf("meta.json: data parallel %d: only one engine is modelled", k.DP)
	case k.KVCacheDtype != "" && k.KVCacheDtype != "auto":
		return fmt.Errorf("meta.json: kv_cache_dtype %q: only auto is modelled", k.KVCacheDtype)
	case k.Quantization != nil:
		return fmt.Errorf("meta.json: quantization %q is not modelled", *k.Quantization)
	}
	e := engineArgs(k.TP, k.MaxNumSeqs, k.MaxNumBatchedTokens, k.MaxModelLen, k.GPUMemoryUtil, k.PrefixCaching)
	path := filepath.Join(r.Dir, "requests.jsonl")
	reqs, err := workload.ReadLogFile(path)
	if err != nil {
		return err
	}
	r.Spec = Spec{Model: meta.Model, Engine: e, Tool: EngineLog, Stages: [][]*sim.Request{reqs}}
	m, err := readEngineLog(path)
	if err != nil {
		return err
	}
	r.Measured = m
	return nil
}

// ReadInferencePerf reads an inference-perf configuration (as it writes
// the one it parsed to results/config.yaml): shared_prefix data, constant
// or poisson load stages, streaming, ignore_eos. A poisson load is taken
// as constant: the same rate, a little less regular.
func ReadInferencePerf(path string) (workload.InferencePerf, error) {
	var cfg struct {
		Data struct {
			Type         string                 `yaml:"type"`
			SharedPrefix *workload.SharedPrefix `yaml:"shared_prefix"`
		} `yaml:"data"`
		Load struct {
			Type     string  `yaml:"type"`
			Interval float64 `yaml:"interval"`
			Stages   []struct {
				Rate     float64 `yaml:"rate"`
				Duration float64 `yaml:"duration"`
			} `yaml:"stages"`
		} `yaml:"load"`
		Server struct {
			IgnoreEOS bool `yaml:"ignore_eos"`
		} `yaml:"server"`
		API struct {
			Streaming bool `yaml:"streaming"`
		} `yaml:"api"`
	}
	if err := readYAML(path, &cfg); err != nil {
		return workload.InferencePerf{}, err
	}
	switch {
	case cfg.Data.Type != "shared_prefix" || cfg.Data.SharedPrefix == nil:
		return workload.InferencePerf{}, fmt.Errorf("%s: data type %q: only shared_prefix is modelled", path, cfg.Data.Type)
	case cfg.Load.Type != "constant" && cfg.Load.Type != "poisson":
		return workload.InferencePerf{}, fmt.Errorf("%s: load type %q: want constant or poisson", path, cfg.Load.Type)
	case !cfg.Server.IgnoreEOS:
		return workload.InferencePerf{}, fmt.Errorf("%s: ignore_eos false: output lengths are then the model's, which a simulator cannot know", path)
	case !cfg.API.Streaming:
		return workload.InferencePerf{}, fmt.Errorf("%s: streaming false: the time to first token is then not measured", path)
	}
	ip := workload.InferencePerf{Data: *cfg.Data.SharedPrefix, Interval: seconds(cfg.Load.Interval), Seed: 1}
	for _, st := range cfg.Load.Stages {
		ip.Stages = append(ip.Stages, workload.Stage{Rate: st.Rate, Duration: seconds(st.Duration)})
	}
	return ip, nil
}

// engineArgs are the engine arguments a run's files record over vLLM's
// defaults: a zero or absent one leaves the default.
func engineArgs(tp, seqs, tokens int, modelLen *int, util float64, caching *bool) sim.EngineArgs {
	e := sim.DefaultEngineArgs()
	e.TP = max(tp, 1)
	if seqs > 0 {
		e.MaxNumSeqs = seqs
	}
	if tokens > 0 {
		e.MaxNumBatchedTokens = tokens
	}
	if modelLen != nil {
		e.MaxModelLen = *modelLen
	}
	if util > 0 {
		e.GPUMemoryUtilization = util
	}
	if caching != nil {
		e.PrefixCaching = *caching
	}
	return e
}

func readYAML(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ancestors are dir and every directory above it, nearest first.
func ancestors(dir string) []string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	var out []string
	for d := abs; ; d = filepath.Dir(d) {
		out = append(out, d)
		if filepath.Dir(d) == d {
			return out
		}
	}
}

// findModel reads the config.json of model (a HuggingFace id, owner/name)
// from the nearest models/ directory that has it: models/<name>/config.json,
// the name matched case-insensitively.
func findModel(dir, model string) (sim.Architecture, string, error) {
	name := strings.ToLower(model[strings.LastIndex(model, "/")+1:])
	if name == "" {
		return sim.Architecture{}, "", fmt.Errorf("no model named")
	}
	for _, d := range ancestors(dir) {
		entries, err := os.ReadDir(filepath.Join(d, "models"))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if strings.ToLower(e.Name()) == name {
				md := filepath.Join(d, "models", e.Name())
				a, err := sim.ReadArchitecture(filepath.Join(md, "config.json"))
				a.Name = model
				return a, md, err
			}
		}
	}
	return sim.Architecture{}, "", fmt.Errorf("model %s: no models/%s/config.json beside the run or above it", model, name)
}

// findGPU reads a GPU data sheet from the nearest hardware/ directory: the
// one gpu names (a file name without .json), else the one the run's path
// names: the sheet whose name starts with one of the run's directory names
// (RTXPRO6000 finds rtxpro6000.json; h100 finds h100-sxm.json and
// h100-nvl.json, and then takes the SXM part, the form of a data-centre
// server's H100s). A gpu that names no sheet is looked up among sim.GPUs.
func findGPU(dir, gpu string) (sim.GPU, error) {
	key := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
				return r
			}
			return -1
		}, strings.ToLower(s))
	}
	for _, d := range ancestors(dir) {
		hw := filepath.Join(d, "hardware")
		entries, err := os.ReadDir(hw)
		if err != nil {
			continue
		}
		var sheets []string
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".json") {
				sheets = append(sheets, strings.TrimSuffix(e.Name(), ".json"))
			}
		}
		if gpu != "" {
			if i := slices.IndexFunc(sheets, func(s string) bool { return key(s) == key(gpu) }); i >= 0 {
				return sim.ReadGPU(filepath.Join(hw, sheets[i]+".json"))
			}
			break
		}
		for _, part := range slices.Backward(strings.Split(filepath.ToSlash(dir), "/")) {
			k := key(part)
			if len(k) < 3 {
				continue
			}
			var match []string
			for _, s := range sheets {
				if strings.HasPrefix(key(s), k) {
					match = append(match, s)
				}
			}
			if len(match) > 1 {
				if i := slices.IndexFunc(match, func(s string) bool { return strings.Contains(key(s), "sxm") }); i >= 0 {
					match = match[i : i+1]
				}
			}
			if len(match) == 1 {
				return sim.ReadGPU(filepath.Join(hw, match[0]+".json"))
			}
		}
	}
	if gpu != "" {
		if g, ok := sim.LookupGPU(gpu); ok {
			return g, nil
		}
		return sim.GPU{}, fmt.Errorf("gpu %q: no hardware/%s.json beside the run or above it, and not one of %s",
			gpu, gpu, strings.Join(sim.GPUNames(), ", "))
	}
	return sim.GPU{}, fmt.Errorf("no GPU data sheet in a hardware/ directory matches the run's path; name one with --gpu")
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
