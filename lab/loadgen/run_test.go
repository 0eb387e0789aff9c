package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/headroomhq/headroom/service"
)

// services is a trainer and a predictor as the service assembles them, on
// loopback listeners. Nothing retrains on a timer (Manual): only
// startServices does. The tests reach them over HTTP only.
type services struct {
	trainerURL   string
	predictorURL string
}

func startServices(t *testing.T, withModel bool) *services {
	t.Helper()
	cfg := service.DefaultConfig()
	cfg.DataDir, cfg.Manual, cfg.ShutdownGrace = t.TempDir(), true, 5*time.Second
	tc := service.DefaultTrainerConfig()
	tc.Listen, tc.XGBoost, tc.Nice = "127.0.0.1:0", nil, 0 // linear only: fast
	tc.Store.NoSync = true
	pc := service.DefaultPredictorConfig()
	pc.Listen, pc.TrainerURL = "127.0.0.1:0", ""
	cfg.Trainer, cfg.Predictor = &tc, &pc
	svc, err := service.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		if err := svc.Close(); err != nil {
			t.Error(err)
		}
	})
	s := &services{trainerURL: svc.TrainerURL(), predictorURL: svc.PredictorURL()}
	if withModel {
		body := AppendIngestBody(nil, Generator{Seed: 9}, 0, 300)
		resp, err := http.Post(s.trainerURL+"/add_training_data_bulk", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("ingest of the first samples: %d", resp.StatusCode)
		}
		pub, err := svc.Retrain(context.Background())
		if err != nil || pub == nil {
			t.Fatalf("retrain: %v, %v", pub, err)
		}
	}
	return s
}

// trainerCounts is what the trainer's GET /status says it stores.
type trainerCounts struct {
	Samples map[string]struct{ Train, Holdout int } `json:"samples"`
}

func (s *services) counts(t *testing.T) trainerCounts {
	t.Helper()
	resp, err := http.Get(s.trainerURL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c trainerCounts
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("trainer /status: %d %v", resp.StatusCode, err)
	}
	return c
}

// storedSamples counts the target samples the trainer holds, holdout
// included.
func (s *services) storedSamples(t *testing.T) int {
	n := 0
	for _, c := range s.counts(t).Samples {
		n += c.Train + c.Holdout
	}
	return n
}

func TestRunAgainstInProcessServers(t *testing.T) {
	for _, goClient := range []bool{false, true} {
		name := "lean client"
		if goClient {
			name = "Go client"
		}
		t.Run(name, func(t *testing.T) { testRun(t, goClient) })
	}
}

func testRun(t *testing.T, goClient bool) {
	s := startServices(t, true)
	before := s.storedSamples(t)
	cfg := Config{
		PredictorURL: s.predictorURL, TrainerURL: s.trainerURL,
		Rate: 400, Duration: 750 * time.Millisecond, Warmup: 100 * time.Millisecond, Rows: 10, Concurrency: 4,
		IngestRate: 2000, IngestBatch: 100, IngestConcurrency: 2,
		ScrapeInterval: 200 * time.Millisecond, GoClient: goClient,
	}
	sum, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errors != 0 || len(sum.ErrorKinds) != 0 {
		t.Fatalf("errors: %d %v", sum.Errors, sum.ErrorKinds)
	}
	// The schedule is exact: requests due in [warmup, warmup+duration).
	if want := uint64(cfg.Rate * cfg.Duration.Seconds()); sum.Requests != want || sum.OK != want {
		t.Errorf("requests %d, ok %d; want %d of each", sum.Requests, sum.OK, want)
	}
	if math.Abs(sum.RowsPerS-10*sum.AchievedRPS) > 1e-6*sum.RowsPerS {
		t.Errorf("rows/s %v is not 10 × req/s %v", sum.RowsPerS, sum.AchievedRPS)
	}
	if sum.WindowS < cfg.Duration.Seconds() || sum.AchievedRPS > cfg.Rate {
		t.Errorf("window %vs, achieved %v req/s for a target of %v", sum.WindowS, sum.AchievedRPS, cfg.Rate)
	}
	checkOrdered(t, "latency", sum.Latency)
	checkOrdered(t, "service", sum.Service)
	if sum.Service.P50Ms > sum.P50Ms || sum.Service.MaxMs > sum.MaxMs {
		t.Errorf("service time %+v exceeds latency %+v", sum.Service, sum.Latency)
	}

	in := sum.Ingest
	if in == nil {
		t.Fatal("no ingest summary")
	}
	wantBatches := uint64(cfg.IngestRate / float64(cfg.IngestBatch) * cfg.Duration.Seconds())
	if in.Errors != 0 || in.Batches != wantBatches || in.OK != wantBatches || in.SamplesAcked != wantBatches*100 {
		t.Errorf("ingest: %+v; want %d batches of 100, all acknowledged", in, wantBatches)
	}
	checkOrdered(t, "ingest", in.Latency)
	// Warm-up batches are sent too, just not counted; the store holds both.
	warm := uint64(cfg.IngestRate / float64(cfg.IngestBatch) * cfg.Warmup.Seconds())
	if got := s.storedSamples(t) - before; got < int(in.SamplesAcked) || got > int((wantBatches+warm)*100*2) {
		t.Errorf("store grew by %d target samples for %d acknowledged entries", got, in.SamplesAcked)
	}

	sv := sum.Server
	if sv == nil || sv.ScrapeErrors != 0 {
		t.Fatalf("server summary %+v", sv)
	}
	if sv.ServerP50Ms <= 0 || sv.ServerP99Ms < sv.ServerP50Ms || sv.ServerP99Ms > 10000 {
		t.Errorf("predictor's own latency p50 ≤ %v ms, p99 ≤ %v ms", sv.ServerP50Ms, sv.ServerP99Ms)
	}
	if c := s.counts(t).Samples; sv.StoredSamples["ttft"] != c["ttft"].Train || sv.StoredSamples["tpot"] != c["tpot"].Train {
		t.Errorf("scraped stored samples %v, trainer stores %+v", sv.StoredSamples, c)
	}

	// The JSON has the fields scripts rely on, at the top level.
	data, err := json.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"achieved_rps", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "errors", "error_kinds", "ingest"} {
		if _, ok := top[k]; !ok {
			t.Errorf("summary JSON lacks %q: %s", k, data)
		}
	}
	var text strings.Builder
	if err := sum.WriteText(&text); err != nil || !strings.Contains(text.String(), "achieved") {
		t.Errorf("text summary: %v\n%s", err, text.String())
	}
}

func checkOrdered(t *testing.T, what string, l Latency) {
	t.Helper()
	if !(0 < l.P50Ms && l.P50Ms <= l.P90Ms && l.P90Ms <= l.P99Ms && l.P99Ms <= l.P999Ms && l.P999Ms <= l.MaxMs && l.MeanMs <= l.MaxMs) {
		t.Errorf("%s percentiles out of order: %+v", what, l)
	}
}

// Each case's answer is certain, however loaded the machine: the servers
// that answer do so at once and the client waits up to 10 s for them; the
// one that times out never answers until the client has given up (50 ms).
func TestRunCountsErrorsByKind(t *testing.T) {
	notReady := startServices(t, false) // no model: every prediction is a 503
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release: // the test is over
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) }) // before slow.Close, which waits for handlers
	short := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"predictions":[{"ttft_ms":1}]}`)) // one prediction for ten rows
	}))
	t.Cleanup(short.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	for _, tc := range []struct {
		name, url, kind string
	}{
		{"not ready", notReady.predictorURL, "status_503"},
		{"timeout", slow.URL, "timeout"},
		{"short answer", short.URL, "bad_response"},
		{"nobody listening", closed.URL, "connect"},
	} {
		for _, goClient := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/go client %v", tc.name, goClient), func(t *testing.T) {
				timeout := 10 * time.Second
				if tc.kind == "timeout" {
					timeout = 50 * time.Millisecond
				}
				sum, err := Run(context.Background(), Config{PredictorURL: tc.url, Rate: 100, Duration: 200 * time.Millisecond,
					Concurrency: 20, Timeout: timeout, ScrapeInterval: -1, GoClient: goClient})
				if err != nil {
					t.Fatal(err)
				}
				if sum.OK != 0 || sum.Errors != 20 || sum.ErrorKinds[tc.kind] != 20 || sum.Requests != 20 {
					t.Fatalf("ok %d errors %d %v; want 20 × %s", sum.OK, sum.Errors, sum.ErrorKinds, tc.kind)
				}
				if sum.AchievedRPS != 0 || sum.P99Ms != 0 {
					t.Errorf("failed requests counted in rates or latencies: %+v", sum)
				}
			})
		}
	}
}

func TestPaceDropsWhatTheBacklogCannotHold(t *testing.T) {
	jobs := make(chan job, 3) // nobody reads: every job past the third is dropped
	start := time.Now()
	dropped := pace(context.Background(), start, start.Add(10*time.Millisecond), start.Add(50*time.Millisecond), 1000, jobs)
	// 50 jobs due; the 10 warm-up ones are not counted when dropped.
	if dropped != 50-10 {
		t.Fatalf("dropped %d, want 40", dropped)
	}
	var got []job
	for j := range jobs { // closed by pace
		got = append(got, j)
	}
	if len(got) != 3 || got[0].index != 0 || got[2].index != 2 || got[0].measured {
		t.Fatalf("queued %+v", got)
	}
	for _, j := range got {
		if j.released.Before(j.due) {
			t.Errorf("job %d released before due", j.index)
		}
	}
}

func TestPaceStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	jobs := make(chan job, 1<<16)
	start := time.Now()
	done := make(chan struct{})
	go func() {
		pace(ctx, start, start, start.Add(time.Hour), 1000, jobs)
		close(done)
	}()
	<-jobs // pacing has begun
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("pace kept running after cancel")
	}
	// A slow machine only releases fewer; never more than the rate allows.
	elapsed := time.Since(start)
	if n := 1 + len(jobs); n > 2+int(elapsed.Seconds()*1000) {
		t.Errorf("%d jobs released in %v at 1000/s", n, elapsed)
	}
}

// An hour's run is interrupted once it has had a success: it stops, says
// so, and counts the requests the interrupt cut off as neither successes
// nor errors. The interrupt comes on an event, not a timer, so a loaded
// machine cannot make it land before the first answer: a worker sends its
// next request only after recording the answer to its last, so the second
// request on any connection means that connection's first was recorded.
func TestRunInterrupted(t *testing.T) {
	s := startServices(t, true)
	target, err := url.Parse(s.predictorURL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	seen := map[string]int{} // requests per client connection
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.RemoteAddr]++
		if seen[r.RemoteAddr] == 2 {
			cancel()
		}
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	// A bound on failure, not a synchronisation: were connections not
	// reused, no second request would ever come.
	var stuck atomic.Bool
	guard := time.AfterFunc(time.Minute, func() { stuck.Store(true); cancel() })
	defer guard.Stop()

	const rate = 200
	began := time.Now()
	sum, err := Run(ctx, Config{PredictorURL: front.URL, Rate: rate, Duration: time.Hour, ScrapeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	// The pacer releases job i at i/rate after the start: no more than
	// this many were sent before Run returned.
	released := int(time.Since(began).Seconds()*rate) + 1
	if stuck.Load() {
		t.Fatal("no connection carried a second request within a minute")
	}
	if !sum.Interrupted || sum.Errors != 0 || sum.OK == 0 || int(sum.OK) > released {
		t.Fatalf("interrupted run (at most %d requests released): %+v", released, sum)
	}
}

func TestCheckIngest(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		n      uint64
		kind   string
	}{
		{202, `{"message":"Accepted 3 training samples.","accepted":3,"rejected":[]}`, 3, ""},
		{202, `{"accepted":0}`, 0, ""},
		{202, `{"message":"ok"}`, 0, "bad_response"},
		{200, `{"accepted":3}`, 0, "status_200"},
		{422, `{"detail":[]}`, 0, "status_422"},
	} {
		n, kind := checkIngest(tc.status, []byte(tc.body))
		if n != tc.n || kind != tc.kind {
			t.Errorf("checkIngest(%d, %s) = %d, %q; want %d, %q", tc.status, tc.body, n, kind, tc.n, tc.kind)
		}
	}
}

// Workers share response buffers: one given back is the next one handed
// out, so a low rate of large responses reuses one warm buffer; the list
// holds at most its capacity.
func TestRespBuffers(t *testing.T) {
	free := newRespBuffers(1)
	a := free.get()
	a.Grow(1 << 20)
	free.put(a)
	free.put(new(bytes.Buffer)) // beyond capacity: dropped
	if b := free.get(); b != a {
		t.Error("the buffer given back was not handed out again")
	}
	if b := free.get(); b == a || b.Cap() != 0 {
		t.Error("an empty list handed out a used buffer")
	}
}
