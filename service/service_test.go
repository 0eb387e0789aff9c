package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/headroomhq/headroom/store"
)

// run runs svc until the test ends, then checks that Run returned cleanly
// and closes it.
func run(t *testing.T, svc *Service) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("Run did not return within 20 s of cancellation")
		}
		if err := svc.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(out)
}

// ingest posts n samples of each target to a trainer.
func ingest(t *testing.T, trainerURL string, n int) {
	t.Helper()
	var entries []string
	for i := range n {
		row := fmt.Sprintf(`"kv_cache_percentage":%v,"input_token_length":%d,"num_request_waiting":%d,`+
			`"num_request_running":%d,"num_tokens_generated":%d,"prefix_cache_score":0`,
			float64(i%10)/10, 100+10*i, i%3, i%5, 1+i%7)
		entries = append(entries,
			fmt.Sprintf(`{%s,"actual_ttft_ms":%v,"actual_tpot_ms":0}`, row, 50+i),
			fmt.Sprintf(`{%s,"actual_ttft_ms":0,"actual_tpot_ms":%v}`, row, 20+i%7))
	}
	if code, body := post(t, trainerURL+"/add_training_data_bulk", `{"entries":[`+strings.Join(entries, ",")+`]}`); code != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", code, body)
	}
}

const predictBody = `{"kv_cache_percentage":0.3,"input_token_length":300,"num_request_waiting":1,` +
	`"num_request_running":2,"num_tokens_generated":3,"prefix_cache_score":0}`

// An invalid configuration opens nothing: no store, no listener.
func TestNewOpensNothingWhenInvalid(t *testing.T) {
	cfg := testConfig(t, true, true)
	addr := freeAddr(t)
	cfg.Trainer.Listen, cfg.Predictor.Listen = addr, addr
	if svc, err := New(cfg); err == nil {
		svc.Close()
		t.Fatal("New accepted one address for both roles")
	}
	if entries, _ := os.ReadDir(cfg.DataDir); len(entries) != 0 {
		t.Errorf("the data dir has %d entries, want none", len(entries))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the address is held after New failed: %v", err)
	}
	ln.Close()
}

// An address in use is reported by New, and what New had opened (the
// store) is released.
func TestNewReportsAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := testConfig(t, true, true)
	cfg.Predictor.Listen = ln.Addr().String()
	svc, err := New(cfg)
	if err == nil {
		svc.Close()
		t.Fatal("New succeeded on an address in use")
	}
	if !strings.Contains(err.Error(), "predictor listen "+ln.Addr().String()) {
		t.Errorf("error %q does not say which listen failed", err)
	}
	db, err := store.Open(filepath.Join(cfg.DataDir, "samples.db"), store.Options{Timeout: time.Second})
	if err != nil {
		t.Fatalf("the store is still held: %v", err)
	}
	db.Close()
}

// Both roles in one process each answer their own routes on their own
// address (issue 11, row 9: the trainer's used to answer 404), and the
// predictor serves what the trainer publishes.
func TestBothRolesServe(t *testing.T) {
	cfg := testConfig(t, true, true)
	cfg.Trainer.RetrainInterval = time.Hour // the first model comes when samples arrive
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, svc)
	if code, body := get(t, svc.TrainerURL()+"/"); code != http.StatusOK || !strings.Contains(body, `"Latency Predictor is running."`) {
		t.Errorf("trainer root: %d %s", code, body)
	}
	if code, body := get(t, svc.PredictorURL()+"/"); code != http.StatusOK || !strings.Contains(body, "HTTP-based Latency Predictor") {
		t.Errorf("predictor root: %d %s", code, body)
	}
	if code, _ := post(t, svc.PredictorURL()+"/predict", predictBody); code != http.StatusServiceUnavailable {
		t.Errorf("predict before any model: %d, want 503", code)
	}
	// The trainer trains a first model as soon as the samples arrive (its
	// loop runs under Run), and the follow loop puts it into the
	// predictor, in memory.
	ingest(t, svc.TrainerURL(), 150)
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := post(t, svc.PredictorURL()+"/predict", predictBody)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("predict 20 s after the samples arrived: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Under Manual, nothing runs on a timer: Retrain puts the bundle into the
// in-process predictor itself, and a standalone predictor takes it when
// told to Sync.
func TestManual(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t, true, true)
	cfg.Manual = true
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, svc)
	pcfg := testConfig(t, false, true)
	pcfg.Manual = true
	pcfg.Predictor.TrainerURL = svc.TrainerURL()
	alone, err := New(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, alone)

	if _, err := alone.Retrain(ctx); err == nil {
		t.Error("Retrain on a predictor alone succeeded")
	}
	if _, err := svc.Sync(ctx); err == nil {
		t.Error("Sync beside an in-process trainer succeeded")
	}
	ingest(t, svc.TrainerURL(), 150)
	if pub, err := svc.Retrain(ctx); err != nil || pub == nil {
		t.Fatalf("Retrain: %v, %v", pub, err)
	}
	if code, body := post(t, svc.PredictorURL()+"/predict", predictBody); code != http.StatusOK {
		t.Errorf("in-process predictor after Retrain: %d %s", code, body)
	}
	if code, _ := post(t, alone.PredictorURL()+"/predict", predictBody); code != http.StatusServiceUnavailable {
		t.Errorf("standalone predictor before Sync: %d, want 503 (no sync loop under Manual)", code)
	}
	if swapped, err := alone.Sync(ctx); err != nil || !swapped {
		t.Fatalf("Sync: %v, %v", swapped, err)
	}
	if code, body := post(t, alone.PredictorURL()+"/predict", predictBody); code != http.StatusOK {
		t.Errorf("standalone predictor after Sync: %d %s", code, body)
	}
	// The standalone predictor kept the bundle in its data dir.
	if entries, err := os.ReadDir(filepath.Join(pcfg.DataDir, "predictor-bundles")); err != nil || len(entries) == 0 {
		t.Errorf("predictor-bundles: %d entries, %v", len(entries), err)
	}
}

// Run returns once its context ends, may run once, and Close releases the
// store.
func TestRunStopsAndCloseReleases(t *testing.T) {
	cfg := testConfig(t, true, false)
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	if code, _ := get(t, svc.TrainerURL()+"/healthz"); code != http.StatusOK {
		t.Errorf("healthz: %d", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}
	if err := svc.Run(context.Background()); err == nil {
		t.Error("a second Run succeeded")
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := svc.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := http.Get(svc.TrainerURL() + "/healthz"); err == nil {
		t.Error("the trainer still answers after Close")
	}
	db, err := store.Open(filepath.Join(cfg.DataDir, "samples.db"), store.Options{Timeout: time.Second})
	if err != nil {
		t.Fatalf("the store is still held after Close: %v", err)
	}
	db.Close()
}

// Close without Run releases the listeners too.
func TestCloseWithoutRun(t *testing.T) {
	svc, err := New(testConfig(t, true, true))
	if err != nil {
		t.Fatal(err)
	}
	addrs := []string{strings.TrimPrefix(svc.TrainerURL(), "http://"), strings.TrimPrefix(svc.PredictorURL(), "http://")}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	for _, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s still held after Close: %v", addr, err)
			continue
		}
		ln.Close()
	}
	if err := svc.Run(context.Background()); err == nil {
		t.Error("Run after Close succeeded")
	}
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

// A predictor's long poll for the next bundle does not hold the shutdown:
// it is answered as Run begins to drain, and Run returns without running
// into ShutdownGrace.
func TestRunAnswersLongPollsWhenDraining(t *testing.T) {
	cfg := testConfig(t, true, false)
	cfg.ShutdownGrace = 30 * time.Second
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	polled := make(chan int, 1)
	go func() {
		resp, err := http.Get(svc.TrainerURL() + "/model/bundle?wait=60s")
		if err != nil {
			polled <- 0
			return
		}
		resp.Body.Close()
		polled <- resp.StatusCode
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, metrics := get(t, svc.TrainerURL()+"/metrics")
		if strings.Contains(metrics, "\nheadroom_bundle_watchers 1\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the long poll was not held within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run held by the long poll")
	}
	if code := <-polled; code != http.StatusNotFound {
		t.Errorf("the held poll got %d, want 404 (no bundle yet)", code)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("shutdown took %v", d)
	}
}

// A trainer URL's user information (basic-auth credentials, or a token
// given as the user name) is sent to the trainer and never shown: not by
// the open root, not by /status, not by the dashboard page, not in the
// log, whether the trainer answers or not.
func TestTrainerURLCredentialsNotShown(t *testing.T) {
	log := &syncWriter{}
	cfg := testConfig(t, false, true)
	cfg.Predictor.TrainerURL = "http://sync-user:s3cret-pass@" + freeAddr(t)
	cfg.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, svc)
	if _, err := svc.Sync(context.Background()); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("sync with no trainer: %v, want an error without the password", err)
	}
	pages := map[string]string{}
	for _, path := range []string{"/", "/status"} {
		_, pages[path] = get(t, svc.PredictorURL()+path)
	}
	req, _ := http.NewRequest("GET", svc.PredictorURL()+"/", nil)
	req.Header.Set("Accept", "text/html")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	pages["dashboard"] = string(page)
	if !strings.Contains(pages["/"], "127.0.0.1") {
		t.Errorf("root does not name the trainer at all: %s", pages["/"])
	}
	for name, body := range pages {
		if strings.Contains(body, "s3cret") || strings.Contains(body, "sync-user") {
			t.Errorf("%s shows the trainer URL's credentials: %s", name, body)
		}
	}
	if strings.Contains(log.String(), "s3cret") {
		t.Errorf("the log shows the trainer URL's password:\n%s", log.String())
	}
}

// syncWriter keeps what the service's goroutines write, one at a time.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
