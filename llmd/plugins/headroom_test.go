package plugins_test

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/headroomhq/headroom/llmd/internal/headroomtest"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// headroom is a Headroom service (`headroom serve`) started for a test on
// loopback ports, its trainer and predictor.
type headroom struct {
	trainer, predictor string
	// predictorPID is the process serving predictor; 0 when it is the
	// trainer's too (serve).
	predictorPID int
}

// startHeadroom starts an empty Headroom that fits linear models only, so
// its models are a function of its samples and every retrain is quick.
func startHeadroom(t testing.TB) *headroom { return startHeadroomWith(t, false) }

// startHeadroomWith starts an empty Headroom (`headroom serve`: trainer and
// predictor in one process), fitting trees (its default model, with the
// xgboost CLI) or lines only, without choosing among configurations, with
// extra flags after the tests' own.
func startHeadroomWith(t testing.TB, trees bool, extra ...string) *headroom {
	t.Helper()
	tAddr, pAddr := headroomtest.FreePort(t), headroomtest.FreePort(t)
	args := append([]string{"serve", "--data-dir", t.TempDir(), "--trainer-listen", tAddr, "--predictor-listen", pAddr}, trainerArgs(trees)...)
	args = append(args, extra...)
	startProcess(t, args...)
	return waitForHeadroom(t, &headroom{trainer: "http://" + tAddr, predictor: "http://" + pAddr})
}

// startHeadroomSidecars starts an empty Headroom as llm-d's chart runs it
// beside the EPP: a trainer process and a predictor process pulling its
// bundles, each with its own settings (the predictor's garbage collection
// is tuned for its small heap; cmd/headroom).
func startHeadroomSidecars(t testing.TB, trees bool) *headroom {
	t.Helper()
	tAddr, pAddr := headroomtest.FreePort(t), headroomtest.FreePort(t)
	startProcess(t, append([]string{"trainer", "--data-dir", t.TempDir(), "--trainer-listen", tAddr}, trainerArgs(trees)...)...)
	pid := startProcess(t, "predictor", "--data-dir", t.TempDir(), "--predictor-listen", pAddr, "--trainer-url", "http://"+tAddr, "--log-level", "warn")
	return waitForHeadroom(t, &headroom{trainer: "http://" + tAddr, predictor: "http://" + pAddr, predictorPID: pid})
}

// trainerArgs are the tests' trainer settings: the synthetic pool's KV
// size, trees or lines only, no search over configurations.
func trainerArgs(trees bool) []string {
	args := []string{"--kv-bytes-per-token", "131072", "--log-level", "warn", "--self-tune=false"}
	if !trees {
		args = append(args, "--no-xgboost", "--model-kind", "linear")
	}
	return args
}

// startProcess runs the headroom command with args until the test ends,
// and returns its process ID. Its collector runs with Headroom's own
// settings, as llm-d's chart runs the sidecars: GOGC and GOMEMLIMIT set
// for the test's process (the EPP's, in BenchmarkSchedulingOverhead) are
// not passed on.
func startProcess(t testing.TB, args ...string) int {
	t.Helper()
	cmd := exec.Command(headroomtest.Binary(t), args...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "GOGC=") || strings.HasPrefix(kv, "GOMEMLIMIT=")
	})
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

// waitForHeadroom waits until h's servers answer.
func waitForHeadroom(t testing.TB, h *headroom) *headroom {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, u := range []string{h.trainer, h.predictor} {
		for {
			resp, err := http.Get(u + "/healthz")
			if err == nil {
				resp.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("headroom at %s did not start: %v", u, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return h
}

// sample is a training entry of the synthetic pool the tests train on.
type sample map[string]any

// The synthetic pool: a prefill's TTFT is 20 ms plus 0.05 ms per uncached
// prompt token plus 80 ms per waiting request; TPOT 10 ms plus 1.5 ms per
// running request; a KV transfer 1 ms plus its bytes over the link's
// bandwidth (bytes per ms): NVLink on a node, slower across racks, much
// slower across zones.
var bandwidth = map[string]float64{"same-node": 300e6, "same-rack": 40e6, "same-zone": 10e6, "cross-zone": 1e6}

const bytesPerToken = 131072

func poolTTFT(tokens int, prefix float64, waiting int) float64 {
	return 20 + 0.05*float64(tokens)*(1-prefix) + 80*float64(waiting)
}

func poolTPOT(running int) float64 { return 10 + 1.5*float64(running) }

func transferMs(class string, tokens int) float64 {
	return 1 + float64(tokens)*bytesPerToken/bandwidth[class]
}

// placements of a prefill and a decode pod for each link class.
var placements = map[string][2]map[string]string{
	"same-node":  {{"node": "a1", "rack": "r1", "zone": "za", "region": "eu"}, {"node": "a1", "rack": "r1", "zone": "za", "region": "eu"}},
	"same-rack":  {{"node": "a1", "rack": "r1", "zone": "za", "region": "eu"}, {"node": "a2", "rack": "r1", "zone": "za", "region": "eu"}},
	"same-zone":  {{"node": "a1", "rack": "r1", "zone": "za", "region": "eu"}, {"node": "a3", "rack": "r2", "zone": "za", "region": "eu"}},
	"cross-zone": {{"node": "a1", "rack": "r1", "zone": "za", "region": "eu"}, {"node": "b1", "rack": "r9", "zone": "zb", "region": "eu"}},
}

// trainingSamples are n split requests' entries over every link class, and
// n TPOT entries, drawn from the synthetic pool with seed.
func trainingSamples(n int, seed uint64) []sample {
	r := rand.New(rand.NewPCG(seed, 1))
	classes := []string{"same-node", "same-rack", "same-zone", "cross-zone"}
	var out []sample
	for i := range n {
		tokens, prefix, waiting, running := 200+r.IntN(3800), float64(r.IntN(3))/4, r.IntN(4), r.IntN(16)
		class := classes[i%len(classes)]
		moved := tokens - int(float64(tokens)*prefix)
		xfer := transferMs(class, moved)
		place := placements[class]
		out = append(out, sample{
			"kv_cache_percentage": 0.3, "input_token_length": tokens, "num_request_waiting": waiting,
			"num_request_running": running, "num_tokens_generated": 0, "prefix_cache_score": prefix, "pod_type": "prefill",
			"actual_ttft_ms": poolTTFT(tokens, prefix, waiting) + xfer, "actual_tpot_ms": 0,
			"actual_kv_transfer_ms": xfer, "kv_transfer_tokens": moved, "kv_bytes_per_token": bytesPerToken,
			"prefill_topology": place[0], "decode_topology": place[1],
		}, sample{
			"kv_cache_percentage": 0.3, "input_token_length": tokens, "num_request_waiting": r.IntN(4),
			"num_request_running": running, "num_tokens_generated": 0, "prefix_cache_score": 0, "pod_type": "decode",
			"actual_ttft_ms": 0, "actual_tpot_ms": poolTPOT(running),
		})
	}
	return out
}

// post sends body to url and returns the answer's status and body.
func post(t testing.TB, url string, body any) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// train posts samples and waits until the predictor ranks pairs with a
// transfer model.
func (h *headroom) train(t testing.TB, samples []sample) {
	t.Helper()
	if code, body := post(t, h.trainer+"/add_training_data_bulk", map[string]any{"entries": samples}); code != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", code, body)
	}
	probe := map[string]any{"input_token_length": 1000,
		"prefill": []any{map[string]any{"pod": "p", "topology": placements["same-rack"][0], "kv_cache_percentage": 0, "num_request_waiting": 0, "num_request_running": 0, "prefix_cache_score": 0}},
		"decode":  []any{map[string]any{"pod": "d", "topology": placements["same-rack"][1], "kv_cache_percentage": 0, "num_request_waiting": 0, "num_request_running": 0, "prefix_cache_score": 0}}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		// Retrain now rather than at the next tick.
		post(t, h.predictor+"/reload", nil)
		code, body := post(t, h.predictor+"/predict/pairs", probe)
		var a struct {
			Transfer bool `json:"kv_transfer_model"`
			Unknown  int  `json:"unknown_transfer_pairs"`
		}
		if code == http.StatusOK && json.Unmarshal(body, &a) == nil && a.Transfer && a.Unknown == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pair model after 60 s: %d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitForTrees waits until the bundle in service has trees for both
// targets.
func (h *headroom) waitForTrees(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		post(t, h.predictor+"/reload", nil)
		resp, err := http.Get(h.predictor + "/model/info")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if bytes.Count(b, []byte(`"kind":"linear+log-trees"`)) >= 2 {
				return
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatal("no trees in service after 2 minutes")
}

// recordingProxy forwards to target and keeps every POST body and the
// status target answered it with.
type recordingProxy struct {
	URL    string
	mu     sync.Mutex
	bodies [][]byte
	codes  []int
}

func newRecordingProxy(t testing.TB, target string) *recordingProxy {
	p := &recordingProxy{}
	srv := newLoopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.Path, bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		if r.Method == http.MethodPost {
			p.mu.Lock()
			p.bodies, p.codes = append(p.bodies, body), append(p.codes, resp.StatusCode)
			p.mu.Unlock()
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	p.URL = srv
	return p
}

// last is the last POST body and the status it got.
func (p *recordingProxy) last(t testing.TB) ([]byte, int) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.bodies) == 0 {
		t.Fatal("no call through the proxy")
	}
	return p.bodies[len(p.bodies)-1], p.codes[len(p.codes)-1]
}

// newLoopbackServer serves h on a loopback port until the test ends.
func newLoopbackServer(t testing.TB, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return "http://" + l.Addr().String()
}
