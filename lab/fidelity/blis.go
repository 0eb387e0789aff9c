package fidelity

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/headroomhq/headroom/lab/sim"
)

// ReadBLISTrace reads the per-request output of BLIS (the inference-sim
// simulator: `blis run --trace-output P` or `blis replay --trace-output P`
// writes P.csv, TraceV2) and measures it as tool measures a run: each
// request's stage from its client ("stage-N-…", inference-perf workloads)
// or stage 0, its latencies from its send time (an HTTP client's) or from
// its arrival (an engine log's: BLIS has no queued time; requests arrive
// at the engine), a request that did not end "ok" a failure. For an engine
// log the requests are also returned one by one, in request_id order.
func ReadBLISTrace(path string, tool Tool) (Measurement, error) {
	f, err := os.Open(path)
	if err != nil {
		return Measurement{}, err
	}
	defer f.Close()
	rd := csv.NewReader(f)
	header, err := rd.Read()
	if err != nil {
		return Measurement{}, fmt.Errorf("%s: header: %w", path, err)
	}
	col := make(map[string]int, len(header))
	for i, h := range header {
		col[h] = i
	}
	for _, need := range []string{"request_id", "client_id", "output_tokens", "arrival_time_us", "send_time_us",
		"first_chunk_time_us", "last_chunk_time_us", "status"} {
		if _, ok := col[need]; !ok {
			return Measurement{}, fmt.Errorf("%s: no column %s: not a BLIS TraceV2 data file", path, need)
		}
	}
	type rec struct {
		id    int
		l     latency
		start float64 // µs
		end   float64
	}
	byStage := map[int][]rec{}
	stages := 0
	for line := 2; ; line++ {
		row, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Measurement{}, fmt.Errorf("%s line %d: %w", path, line, err)
		}
		num := func(name string) float64 {
			v, _ := strconv.ParseFloat(row[col[name]], 64)
			return v
		}
		id, err := strconv.Atoi(row[col["request_id"]])
		if err != nil {
			return Measurement{}, fmt.Errorf("%s line %d: request_id %q", path, line, row[col["request_id"]])
		}
		stage := 0
		if c := row[col["client_id"]]; strings.HasPrefix(c, "stage-") {
			rest := strings.TrimPrefix(c, "stage-")
			if i := strings.IndexByte(rest, '-'); i > 0 {
				stage, _ = strconv.Atoi(rest[:i])
			}
		}
		origin := num("send_time_us")
		if tool == EngineLog {
			origin = num("arrival_time_us")
		}
		r := rec{id: id, start: origin}
		if row[col["status"]] == "ok" {
			first, last := num("first_chunk_time_us"), num("last_chunk_time_us")
			r.l = latency{ttft: (first - origin) / 1e3, e2e: (last - origin) / 1e3, perToken: math.NaN(), ok: true}
			if n := num("output_tokens"); n > 1 {
				r.l.perToken = (last - first) / 1e3 / (n - 1)
			}
			r.end = last
		}
		byStage[stage] = append(byStage[stage], r)
		stages = max(stages, stage+1)
	}
	var m Measurement
	for k := range stages {
		recs := byStage[k]
		ls := make([]latency, len(recs))
		first, last := math.Inf(1), math.Inf(-1)
		for i, r := range recs {
			ls[i] = r.l
			first = min(first, r.start)
			if r.l.ok {
				last = max(last, r.end)
			}
		}
		m.Stages = append(m.Stages, stageOf(ls, max(0, (last-first)/1e6)))
		if tool == EngineLog {
			m.Requests = make([]RequestTimes, len(recs))
			for i := range m.Requests {
				m.Requests[i] = RequestTimes{TTFTMs: math.NaN(), E2EMs: math.NaN()}
			}
			for _, r := range recs {
				if r.id >= 0 && r.id < len(recs) && r.l.ok {
					m.Requests[r.id] = RequestTimes{TTFTMs: r.l.ttft, E2EMs: r.l.e2e}
				}
			}
		}
	}
	return m, nil
}

// WriteBLISInputs writes what BLIS needs to simulate runs into dir: for an
// inference-perf run its workload spec (<run>.yaml: BLIS's inference_perf
// block, with the run's stages and shared_prefix data), for an engine log
// a TraceV2 trace of its requests (<run>.trace.yaml and <run>.trace.csv:
// arrivals and token counts), and hardware.json, BLIS's hardware config
// for every GPU of the runs (figures from the runs' data sheets). It
// returns one BLIS command line per run, which writes the per-request
// trace ReadBLISTrace reads (<dir>/<run>.csv).
func WriteBLISInputs(dir string, runs []*Run) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	hw := map[string]map[string]any{}
	var cmds []string
	for _, r := range runs {
		s := r.Spec
		key := blisGPU(s.GPU)
		hw[key] = map[string]any{
			"TFlopsPeak": s.GPU.DenseFLOPS / 1e12, "BwPeakTBs": s.GPU.MemoryBandwidth / 1e12,
			"MemoryGiB": s.GPU.MemoryBytes / (1 << 30), "mfuPrefill": 0.45, "mfuDecode": 0.30,
		}
		out := filepath.Join(dir, r.Name)
		common := fmt.Sprintf("--model %s --model-config-folder %s --hardware %s --hardware-config %s --tp %d --max-num-seqs %d --max-num-batched-tokens %d --gpu-memory-utilization %g --trace-output %s",
			strings.ToLower(s.Model), s.ModelDir, key, filepath.Join(dir, "hardware.json"), s.Engine.TP,
			s.Engine.MaxNumSeqs, s.Engine.MaxNumBatchedTokens, s.Engine.GPUMemoryUtilization, out)
		if s.Engine.MaxModelLen > 0 {
			common += fmt.Sprintf(" --max-model-len %d", s.Engine.MaxModelLen)
		}
		switch s.Tool {
		case InferencePerf:
			if s.Workload == nil {
				return nil, fmt.Errorf("run %s: no inference-perf workload", r.Name)
			}
			var b strings.Builder
			fmt.Fprintf(&b, "version: \"1\"\nseed: 42\ninference_perf:\n  stages:\n")
			total := 0
			for _, st := range s.Workload.Stages {
				fmt.Fprintf(&b, "    - rate: %g\n      duration: %g\n", st.Rate, st.Duration.Seconds())
				total += st.Requests()
			}
			d := s.Workload.Data
			fmt.Fprintf(&b, "  shared_prefix:\n    num_unique_system_prompts: %d\n    num_users_per_system_prompt: %d\n    system_prompt_len: %d\n    question_len: %d\n    output_len: %d\n    enable_multi_turn_chat: false\n",
				d.NumGroups, d.NumPromptsPerGroup, d.SystemPromptLen, d.QuestionLen, d.OutputLen)
			if err := os.WriteFile(out+".yaml", []byte(b.String()), 0o644); err != nil {
				return nil, err
			}
			cmds = append(cmds, fmt.Sprintf("blis run %s --workload-spec %s.yaml --num-requests %d", common, out, total))
		case EngineLog:
			header := "trace_version: 3\ntime_unit: microseconds\nmode: generated\nwarm_up_requests: 0\nworkload_seed: 42\n"
			if err := os.WriteFile(out+".trace.yaml", []byte(header), 0o644); err != nil {
				return nil, err
			}
			var b strings.Builder
			b.WriteString("request_id,client_id,tenant_id,slo_class,session_id,round_index,prefix_group,prefix_length,streaming,input_tokens,output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,reason_ratio,model,deadline_us,server_input_tokens,arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,status,error_message,finish_reason\n")
			for i, q := range s.Stages[0] {
				at := q.Arrival.Microseconds()
				fmt.Fprintf(&b, "%d,client-%d,,standard,,0,,0,true,%d,%d,%d,0,0,0,0,,0,0,%d,%d,0,0,0,ok,,\n",
					i, i, q.PromptTokens, q.OutputTokens, q.PromptTokens, at, at)
			}
			if err := os.WriteFile(out+".trace.csv", []byte(b.String()), 0o644); err != nil {
				return nil, err
			}
			// A replay stops at twice the last arrival unless told otherwise.
			cmds = append(cmds, fmt.Sprintf("blis replay %s --trace-header %s.trace.yaml --trace-data %s.trace.csv --horizon 100000000000", common, out, out))
		}
	}
	data, err := json.MarshalIndent(hw, "", "  ")
	if err != nil {
		return nil, err
	}
	return cmds, os.WriteFile(filepath.Join(dir, "hardware.json"), data, 0o644)
}

// blisGPU names a GPU as BLIS's hardware config does (H100 for the SXM
// part, its only H100).
func blisGPU(g sim.GPU) string {
	k := strings.ToUpper(strings.NewReplacer(" ", "", "-", "", "_", "").Replace(g.Name))
	if strings.HasPrefix(k, "H100") && strings.Contains(k, "SXM") {
		return "H100"
	}
	return k
}
