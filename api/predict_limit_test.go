package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/headroomhq/headroom/predictor"
)

// stalledWriter is a ResponseWriter whose Write blocks until released: a
// client that does not read its answer.
type stalledWriter struct {
	header  http.Header
	status  int
	writing chan struct{} // closed when Write is first called
	release chan struct{}
	once    sync.Once
}

func newStalledWriter() *stalledWriter {
	return &stalledWriter{header: http.Header{}, writing: make(chan struct{}), release: make(chan struct{})}
}

func (w *stalledWriter) Header() http.Header  { return w.header }
func (w *stalledWriter) WriteHeader(code int) { w.status = code }
func (w *stalledWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.writing) })
	<-w.release
	return len(p), nil
}

func postFrom(h http.Handler, w http.ResponseWriter, path, body string) {
	req := httptest.NewRequest("POST", "http://localhost:8001"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.RemoteAddr = "10.0.0.9:5000"
	h.ServeHTTP(w, req)
}

// Prediction requests hold their answers' bytes until the client has read
// them; the bytes they may hold together are bounded. A large request
// that finds no room within the wait gets 503 naming the bound, counted;
// the router's small requests have room of their own and are answered
// beside; once the stalled answers are read, large requests pass again.
// Before the bound, 40 slow readers of 10,000-row answers took a predictor
// past its 256 Mi limit (issue 26).
func TestPredictionMemoryIsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	// 2,000 rows hold about 2.4 MB: one fits in the large requests' 3 MiB,
	// two do not.
	h := NewPredictorHandler(benchPredictor(t), PredictorOptions{Registry: reg,
		MaxPredictBytes: 4 << 20, PredictWait: 50 * time.Millisecond})
	large, small := string(benchRows(2000)), string(benchRows(10))

	stalled := newStalledWriter()
	done := make(chan struct{})
	go func() { postFrom(h, stalled, "/predict/bulk", large); close(done) }()
	select {
	case <-stalled.writing:
	case <-time.After(20 * time.Second):
		t.Fatal("the first large request was not answered")
	}
	w := httptest.NewRecorder()
	postFrom(h, w, "/predict/bulk/strict", large)
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "bytes") || w.Header().Get("Retry-After") == "" {
		t.Errorf("a large request beside a stalled one: %d %s, want 503 naming the bytes, with Retry-After", w.Code, w.Body)
	}
	if got := testutil.ToFloat64(limitShed(t, reg, "memory")); got != 1 {
		t.Errorf("shed for memory: %v, want 1", got)
	}
	for range 20 {
		w := httptest.NewRecorder()
		postFrom(h, w, "/predict/bulk/strict", small)
		if w.Code != http.StatusOK {
			t.Fatalf("a 10-row request beside the stalled large one: %d %s", w.Code, w.Body)
		}
	}
	close(stalled.release)
	<-done
	w = httptest.NewRecorder()
	postFrom(h, w, "/predict/bulk/strict", large)
	if w.Code != http.StatusOK {
		t.Errorf("a large request once the stalled answer was read: %d %s", w.Code, w.Body)
	}
}

// limitShed is the predictor's shed counter for bound.
func limitShed(t *testing.T, reg *prometheus.Registry, bound string) prometheus.Counter {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "headroom_predict_shed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == bound {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
				c.Add(m.GetCounter().GetValue())
				return c
			}
		}
	}
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
}

// Large computations take turns on MaxLargePredictions slots: one that
// finds none free within the wait gets 503 naming the bound; small ones
// never wait for a slot; a slot is free again once its holder's answer
// is encoded.
func TestLargeComputationsTakeTurns(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := PredictorOptions{MaxLargePredictions: 1, PredictWait: 30 * time.Millisecond}
	l := newPredictLimiter(&opts, reg)
	c, _ := ginContext()
	first, ok := l.admit(c, 1<<20, largeWork+1)
	if !ok {
		t.Fatal("the first large computation was refused")
	}
	c, w := ginContext()
	if _, ok := l.admit(c, 1<<20, largeWork+1); ok || w.Code != http.StatusServiceUnavailable ||
		!strings.Contains(w.Body.String(), "--max-large-predictions") {
		t.Errorf("a second large computation beside the first: admitted %v, %d %s; want 503 naming the bound", ok, w.Code, w.Body)
	}
	if got := testutil.ToFloat64(limitShed(t, reg, "cpu")); got != 1 {
		t.Errorf("shed for cpu: %v, want 1", got)
	}
	c, _ = ginContext()
	smallOne, ok := l.admit(c, 10<<10, 10)
	if !ok {
		t.Error("a small computation waited for a large one's slot")
	}
	smallOne.release()
	first.computed() // encoded: the slot is free, the place still held
	c, _ = ginContext()
	second, ok := l.admit(c, 1<<20, largeWork+1)
	if !ok {
		t.Fatal("a large computation refused once the slot was free")
	}
	second.release()
	first.release()
	if n := len(l.cpu); n != 0 {
		t.Errorf("%d slots held after every ticket was released", n)
	}
}

// /predict/pairs answers the default k of each list when a request does
// not say, k when it does (all when k is at least the pairs), and refuses
// with 422 a request of more pairs than the cost cap, however few
// candidates each list has. Before: every pair, 1.97 MB for 64 × 64.
func TestPredictPairsDefaultKAndCostCap(t *testing.T) {
	s := newService(t, Tokens{})
	s.ingestAndTrain(t, 300)
	withTransfer(t, s.pred, pairsTransferModel(t))
	h := NewPredictorHandler(s.pred, PredictorOptions{Limits: Limits{MaxPairCandidates: 8, MaxPairs: 32}, PairsK: 3})
	for _, tc := range []struct {
		p, d        int
		extra       string
		code        int
		pairs, none int
	}{
		{4, 8, "", 200, 3, 3},
		{4, 8, `,"k":0`, 200, 3, 3},
		{4, 8, `,"k":10`, 200, 10, 8},
		{4, 8, `,"k":64`, 200, 32, 8},
		{8, 8, `,"k":64`, 422, 0, 0},
		{5, 7, "", 422, 0, 0},
	} {
		name := fmt.Sprintf("%dx%d%s", tc.p, tc.d, tc.extra)
		w := do(h, "POST", "/predict/pairs", pairsRequestBody(tc.p, tc.d, tc.extra))
		if w.Code != tc.code {
			t.Errorf("%s: %d %s, want %d", name, w.Code, w.Body, tc.code)
			continue
		}
		ans := decode(t, w)
		if tc.code == 422 {
			if !strings.Contains(w.Body.String(), "--max-pairs") {
				t.Errorf("%s: %s, want a detail naming --max-pairs", name, w.Body)
			}
			continue
		}
		if got := len(ans["pairs"].([]any)); got != tc.pairs {
			t.Errorf("%s: %d pairs, want %d", name, got, tc.pairs)
		}
		if got := len(ans["no_split"].([]any)); got != tc.none {
			t.Errorf("%s: %d no-split options, want %d", name, got, tc.none)
		}
		if ans["total_pairs"] != float64(tc.p*tc.d) {
			t.Errorf("%s: total_pairs %v, want %d: every pair is still ranked", name, ans["total_pairs"], tc.p*tc.d)
		}
	}
}

// ginContext is a gin context of a request from one address, recording
// its answer.
func ginContext() (*gin.Context, *httptest.ResponseRecorder) {
	w := httptest.NewRecorder()
	c, _ := gin.CreateTestContext(w)
	c.Request = httptest.NewRequest("POST", "http://localhost:8001/predict/pairs", nil)
	return c, w
}

// POST /reload?accept_older=true is how an operator has a predictor take
// a bundle older than the one it serves; anything else is a plain sync,
// and a value that is not a boolean is refused.
func TestReloadAcceptOlder(t *testing.T) {
	var got []bool
	p, _ := predictor.New(predictor.Mean, 0.9)
	h := NewPredictorHandler(p, PredictorOptions{Reload: func(_ context.Context, acceptOlder bool) (bool, error) {
		got = append(got, acceptOlder)
		return false, nil
	}})
	for _, q := range []string{"", "?accept_older=true", "?accept_older=0"} {
		if w := do(h, "POST", "/reload"+q, ""); w.Code != http.StatusOK {
			t.Errorf("reload%s: %d %s", q, w.Code, w.Body)
		}
	}
	if !slices.Equal(got, []bool{false, true, false}) {
		t.Errorf("reloads asked %v, want [false true false]", got)
	}
	if w := do(h, "POST", "/reload?accept_older=please", ""); w.Code != http.StatusUnprocessableEntity ||
		!strings.Contains(w.Body.String(), "accept_older") {
		t.Errorf("accept_older=please: %d %s, want 422 naming it", w.Code, w.Body)
	}
}
