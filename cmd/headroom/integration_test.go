package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"
)

// sharedTrace finds the recorded H200 trace beside the repository, or skips.
func sharedTrace(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for ; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		if filepath.Dir(dir) == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
	}
	path := filepath.Join(dir, "..", "shared", "data", "traces", "sharegpt-h200.jsonl")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("shared trace not available (%v): this test needs ../shared beside the repository", err)
	}
	return path
}

func readTrace(t testing.TB, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("trace line %d: %v", len(rows)+1, err)
		}
		rows = append(rows, m)
	}
	return rows
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startCommand runs a headroom subcommand in the background until the test
// ends, and checks that it then exits cleanly.
func startCommand(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var logs bytes.Buffer
	go func() { done <- run(ctx, args, io.Discard, &syncWriter{w: &logs}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("headroom %s exited %d; log:\n%s", args[0], code, logs.String())
			}
		case <-time.After(20 * time.Second):
			var stacks strings.Builder
			pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			t.Errorf("headroom %s did not stop within 20 s of cancellation; goroutines:\n%s", args[0], stacks.String())
		}
	})
}

func waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func postJSON(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func getJSON(url string, into any) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if into != nil {
		err = json.NewDecoder(resp.Body).Decode(into)
	}
	return resp.StatusCode, err
}

// The prediction response as llm-d's router client decodes it: counts are
// ints and times are RFC 3339, so a float count or a zoneless time fails here
// as it would there.
type strictResponse struct {
	Predictions []struct {
		TTFTMs        float64    `json:"ttft_ms"`
		TPOTMs        float64    `json:"tpot_ms"`
		PredictedAt   time.Time  `json:"predicted_at"`
		ModelType     string     `json:"model_type"`
		ObjectiveType string     `json:"objective_type"`
		Quantile      float64    `json:"quantile"`
		LastModelLoad *time.Time `json:"last_model_load"`
		TTFTBounds    []float64  `json:"ttft_prediction_bounds"`
		TPOTBounds    []float64  `json:"tpot_prediction_bounds"`
	} `json:"predictions"`
	TotalRequests         int     `json:"total_requests"`
	SuccessfulPredictions int     `json:"successful_predictions"`
	FailedPredictions     int     `json:"failed_predictions"`
	ProcessingTimeMs      float64 `json:"processing_time_ms"`
}

// TestServiceLearnsTrace runs a trainer and a separate predictor on free
// ports, feeds the recorded H200 trace, and checks that the predictor gets a
// bundle that learned it and answers in the router's shapes.
func TestServiceLearnsTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("retrains with xgboost every 500 ms on the whole trace; skipped with -short")
	}
	trace := readTrace(t, sharedTrace(t))
	trainerAddr, predictorAddr := freeAddr(t), freeAddr(t)
	startCommand(t, "trainer", "--data-dir", t.TempDir(), "--trainer-listen", trainerAddr, "--retrain-interval", "500ms")
	startCommand(t, "predictor", "--data-dir", t.TempDir(), "--predictor-listen", predictorAddr,
		"--trainer-url", "http://"+trainerAddr, "--sync-interval", "500ms")
	trainerURL, predictorURL := "http://"+trainerAddr, "http://"+predictorAddr
	waitFor(t, "both servers healthy", 10*time.Second, func() bool {
		a, _ := getJSON(trainerURL+"/healthz", nil)
		b, _ := getJSON(predictorURL+"/healthz", nil)
		return a == 200 && b == 200
	})

	// Before any model the predictor says so instead of inventing numbers.
	row := map[string]any{"kv_cache_percentage": 0.01, "input_token_length": 300, "num_request_waiting": 0,
		"num_request_running": 10, "num_tokens_generated": 1, "prefix_cache_score": 0}
	if code, body := postJSON(t, predictorURL+"/predict/bulk/strict", map[string]any{"requests": []any{row}}); code != 503 {
		t.Fatalf("prediction before any model: status %d (%s), want 503", code, body)
	}

	for start := 0; start < len(trace); start += 1000 {
		batch := trace[start:min(start+1000, len(trace))]
		code, body := postJSON(t, trainerURL+"/add_training_data_bulk", map[string]any{"entries": batch})
		if code != 202 {
			t.Fatalf("ingest: status %d: %s", code, body)
		}
		if want := fmt.Sprintf(`"message":"Accepted %d training samples."`, len(batch)); !strings.Contains(string(body), want) {
			t.Fatalf("ingest answer %s lacks %s", body, want)
		}
	}

	var info struct {
		Version uint64 `json:"version"`
		TTFT    struct {
			Ready   bool `json:"ready"`
			Holdout struct {
				MAPE float64 `json:"mape"`
				Rows int     `json:"rows"`
			} `json:"holdout"`
		} `json:"ttft"`
		TPOT struct {
			Ready   bool `json:"ready"`
			Holdout struct {
				MAPE float64 `json:"mape"`
				Rows int     `json:"rows"`
			} `json:"holdout"`
		} `json:"tpot"`
	}
	// A retrain may land between two ingest batches; wait for the bundle
	// trained on everything the store holds, then for the predictor to serve it.
	type coverage struct {
		Version uint64 `json:"version"`
		TTFT    struct {
			Stored  int `json:"train_samples"`
			Trained int `json:"trained_on_samples"`
		} `json:"ttft"`
		TPOT struct {
			Stored  int `json:"train_samples"`
			Trained int `json:"trained_on_samples"`
		} `json:"tpot"`
	}
	var full coverage
	waitFor(t, "a bundle trained on every stored sample", 60*time.Second, func() bool {
		var c coverage
		code, err := getJSON(trainerURL+"/model/info", &c)
		if code != 200 || err != nil || c.TTFT.Trained == 0 || c.TTFT.Trained != c.TTFT.Stored || c.TPOT.Trained != c.TPOT.Stored {
			return false
		}
		full = c
		return true
	})
	waitFor(t, "the predictor to serve that bundle", 60*time.Second, func() bool {
		code, err := getJSON(predictorURL+"/model/info", &info)
		return code == 200 && err == nil && info.Version >= full.Version && info.TTFT.Ready && info.TPOT.Ready
	})
	t.Logf("bundle %d: TTFT holdout MAPE %.1f%% on %d rows, TPOT %.1f%% on %d rows",
		info.Version, info.TTFT.Holdout.MAPE, info.TTFT.Holdout.Rows, info.TPOT.Holdout.MAPE, info.TPOT.Holdout.Rows)
	if info.TPOT.Holdout.Rows < 100 || info.TPOT.Holdout.MAPE >= 15 {
		t.Errorf("TPOT holdout MAPE %.1f%% on %d rows; want under 15%% on at least 100", info.TPOT.Holdout.MAPE, info.TPOT.Holdout.Rows)
	}

	// Predictions for the trace's rows come back in order: each bulk item
	// equals the single-row answer for the same row.
	var reqs []any
	for _, r := range trace[:200] {
		q := map[string]any{}
		for k, v := range r {
			if !strings.HasPrefix(k, "actual_") {
				q[k] = v
			}
		}
		q["num_tokens_generated"] = 1
		reqs = append(reqs, q)
	}
	code, body := postJSON(t, predictorURL+"/predict/bulk/strict", map[string]any{"requests": reqs})
	if code != 200 {
		t.Fatalf("bulk strict: status %d: %s", code, body)
	}
	var resp strictResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("bulk strict answer does not decode as the router decodes it: %v\n%s", err, body[:min(len(body), 500)])
	}
	if len(resp.Predictions) != len(reqs) || resp.TotalRequests != len(reqs) || resp.SuccessfulPredictions != len(reqs) || resp.FailedPredictions != 0 {
		t.Fatalf("bulk strict: %d predictions, totals %d/%d/%d for %d rows", len(resp.Predictions),
			resp.TotalRequests, resp.SuccessfulPredictions, resp.FailedPredictions, len(reqs))
	}
	for i := 0; i < len(reqs); i += 37 {
		code, body := postJSON(t, predictorURL+"/predict", reqs[i])
		if code != 200 {
			t.Fatalf("predict row %d: status %d: %s", i, code, body)
		}
		var one struct {
			TTFTMs float64 `json:"ttft_ms"`
			TPOTMs float64 `json:"tpot_ms"`
		}
		if err := json.Unmarshal(body, &one); err != nil {
			t.Fatal(err)
		}
		got := resp.Predictions[i]
		if got.TTFTMs != one.TTFTMs || got.TPOTMs != one.TPOTMs {
			t.Errorf("row %d: bulk says %v/%v, single %v/%v", i, got.TTFTMs, got.TPOTMs, one.TTFTMs, one.TPOTMs)
		}
		if !(got.TTFTMs > 0 && got.TPOTMs > 0) || got.ModelType != "xgboost" || got.LastModelLoad == nil ||
			len(got.TTFTBounds) != 2 || got.TTFTBounds[0] > got.TTFTMs || got.TTFTBounds[1] < got.TTFTMs {
			t.Errorf("row %d: prediction %+v is not a well-formed positive prediction", i, got)
		}
	}

	// The router's background calls decode too.
	var dl struct {
		ModelType   string          `json:"model_type"`
		ModelStatus map[string]bool `json:"model_status"`
	}
	if code, err := getJSON(trainerURL+"/model/download/info", &dl); code != 200 || err != nil || dl.ModelType != "xgboost" || !dl.ModelStatus["ttft_model_ready"] {
		t.Errorf("/model/download/info: %d %v %+v", code, err, dl)
	}
	var trees []map[string]any
	if code, err := getJSON(trainerURL+"/model/ttft/xgb/json", &trees); code != 200 || err != nil || len(trees) == 0 {
		t.Errorf("/model/ttft/xgb/json: status %d, %v, %d trees", code, err, len(trees))
	}
}

// syncWriter serialises writes from the servers' loggers.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
