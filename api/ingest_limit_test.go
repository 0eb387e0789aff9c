package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/admission"
	"github.com/headroomhq/headroom/internal/polltest"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
)

// An upload over the concurrent-ingest limits, by count or by body bytes,
// waits for room, gets 503 when none frees up in time, stores nothing, and
// gets in as soon as the room frees.
func TestConcurrentIngestLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts TrainerOptions
		hold int64 // bytes the upload in progress holds
	}{
		{"count", TrainerOptions{MaxConcurrentIngest: 1}, 1},
		{"bytes", TrainerOptions{MaxIngestBytes: 4096, Limits: Limits{MaxBodyBytes: 4096}}, 4000},
	} {
		t.Run(tc.name, func(t *testing.T) { testConcurrentIngestLimit(t, tc.opts, tc.hold) })
	}
}

func newLimitedTrainer(t *testing.T, opts TrainerOptions) (*trainerServer, http.Handler, *store.DB, *prometheus.Registry) {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "samples.db"), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tr, err := trainer.New(trainer.Config{}, db)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts.Registry = reg
	s, h := newTrainerServer(tr, db, opts)
	return s, h, db, reg
}

func testConcurrentIngestLimit(t *testing.T, opts TrainerOptions, hold int64) {
	// Refused: an upload being decoded and stored holds the room, and none
	// frees up within the wait.
	const wait = 150 * time.Millisecond
	opts.IngestWait = wait
	s, h, db, reg := newLimitedTrainer(t, opts)
	stored := func() int { c := db.Counts(); return c.Train(features.TTFT) + c.Holdout(features.TTFT) }
	held, ok := s.uploads.Reserve(context.Background(), hold)
	if !ok {
		t.Fatal("idle limiter refused")
	}
	start := time.Now()
	w := do(h, "POST", "/add_training_data_bulk", `{"entries":[`+entry(41, 0, 2)+`]}`)
	waited := time.Since(start)
	if w.Code != 503 || w.Header().Get("Retry-After") == "" || !strings.Contains(decode(t, w)["detail"].(string), "concurrent") {
		t.Fatalf("upload over the limit: %d %v %s; want 503 with Retry-After and a detail", w.Code, w.Header(), w.Body)
	}
	if waited < wait {
		t.Errorf("refused after %v, before the %v wait", waited, wait)
	}
	if got := metricValue(t, reg, "headroom_ingest_shed_total"); got != 1 {
		t.Errorf("headroom_ingest_shed_total = %v, want 1", got)
	}
	// Routes other than ingest are not limited.
	if w := do(h, "GET", "/data/status", ""); w.Code != 200 {
		t.Errorf("/data/status while ingest is full: %d", w.Code)
	}
	s.uploads.Release(held)
	if n := stored(); n != 0 {
		t.Errorf("store holds %d TTFT samples, want none (the refused upload's must be absent)", n)
	}

	// Admitted: a waiting upload gets the room as soon as it frees. The
	// wait is far longer than the test, so nothing but the release can
	// end it, however slow the machine; the release comes only once the
	// upload is seen waiting.
	opts.IngestWait = time.Hour
	s, h, db, reg = newLimitedTrainer(t, opts)
	if held, ok = s.uploads.Reserve(context.Background(), hold); !ok {
		t.Fatal("idle limiter refused")
	}
	waiting := make(chan *httptest.ResponseRecorder)
	go func() { waiting <- do(h, "POST", "/samples", entry(42, 0, 3)) }()
	polltest.Until(t, "the upload queued behind the one holding the room", 10*time.Second, func() bool {
		return metricValue(t, reg, "headroom_ingest_waiting") == 1
	})
	s.uploads.Release(held)
	if w := <-waiting; w.Code != 202 {
		t.Fatalf("the upload waiting for the room: %d %s", w.Code, w.Body)
	}
	if got := metricValue(t, reg, "headroom_ingest_waiting"); got != 0 {
		t.Errorf("headroom_ingest_waiting = %v after admission, want 0", got)
	}
	if c := db.Counts(); c.Train(features.TTFT)+c.Holdout(features.TTFT) != 1 {
		t.Errorf("store holds %d TTFT samples, want 1", c.Train(features.TTFT)+c.Holdout(features.TTFT))
	}
}

// Issue 11 row 5: two connections declaring 64 MB bodies and sending a
// byte a second held the whole ingest byte budget: every other upload was
// refused for as long as they kept at it. Now a body takes no place in the
// limits until it has arrived, a body slower than the minimum rate is cut
// off with 408 after the grace, and one address may have only so many
// bodies arriving at once.
func TestSlowUploadsCannotStarveIngest(t *testing.T) {
	_, h, db, _ := newLimitedTrainer(t, TrainerOptions{
		MaxIngestPerClient: 3, IngestWait: 100 * time.Millisecond,
		Limits: Limits{MinBodyRate: 1 << 20, BodyGrace: 2 * time.Second},
	})
	srv := httptest.NewServer(h)
	defer srv.Close()

	type slowConn struct {
		conn  net.Conn
		reply chan string
	}
	open := func() slowConn {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		fmt.Fprintf(conn, "POST /add_training_data_bulk HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{",
			srv.Listener.Addr(), 64<<20)
		sc := slowConn{conn, make(chan string, 1)}
		go func() {
			b, _ := io.ReadAll(conn)
			sc.reply <- string(b)
		}()
		return sc
	}
	slow := []slowConn{open(), open()}
	post := func(body string) (int, string) {
		resp, err := http.Post(srv.URL+"/add_training_data_bulk", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i := range 5 {
		if code, body := post(`{"entries":[` + entry(float64(40+i), 0, i) + `]}`); code != 202 {
			t.Fatalf("upload %d beside two stalled 64 MB uploads: %d %s", i, code, body)
		}
	}
	if c := db.Counts(); c.Train(features.TTFT)+c.Holdout(features.TTFT) != 5 {
		t.Fatalf("store holds %d samples, want 5", c.Train(features.TTFT)+c.Holdout(features.TTFT))
	}
	// Three bodies arriving at once is the most one address may have: of
	// two more stalled uploads, one is refused at once with 429; the other
	// three are cut off after the grace with 408.
	all := append(slow, open(), open())
	var got []string
	for i, sc := range all {
		select {
		case r := <-sc.reply:
			switch {
			case strings.Contains(r, " 429 "):
				got = append(got, "429")
			case strings.Contains(r, " 408 ") && strings.Contains(r, "too slowly"):
				got = append(got, "408")
			default:
				t.Errorf("stalled upload %d: %q, want 408 or 429", i, r)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("stalled upload %d not cut off", i)
		}
	}
	slices.Sort(got)
	if strings.Join(got, " ") != "408 408 408 429" {
		t.Errorf("stalled uploads answered %v, want three 408 and one 429", got)
	}
	if code, body := post(`{"entries":[` + entry(50, 0, 9) + `]}`); code != 202 {
		t.Fatalf("upload after the stalled ones were cut: %d %s", code, body)
	}
}

// metricValue reads an unlabelled counter or gauge from reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			m := f.GetMetric()[0]
			if m.Gauge != nil {
				return m.Gauge.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// Bodies still arriving hold at most MaxIngestBytes together: a body that
// would pass that fails at once (503 over HTTP), and the bytes come back
// when an arriving body is done with.
func TestArrivingBodiesAreBounded(t *testing.T) {
	l := newClientLimiter(0, 100)
	newCtx := func(body string) (*gin.Context, *httptest.ResponseRecorder) {
		w := httptest.NewRecorder()
		c, _ := gin.CreateTestContext(w)
		c.Request = httptest.NewRequest("POST", "/add_training_data_bulk", strings.NewReader(body))
		return c, w
	}
	first, _ := newCtx(strings.Repeat("a", 70))
	releaseFirst := l.meter(first)
	if b, err := io.ReadAll(first.Request.Body); err != nil || len(b) != 70 {
		t.Fatalf("a body within the bound: %d bytes, %v", len(b), err)
	}
	second, w := newCtx(strings.Repeat("b", 40))
	releaseSecond := l.meter(second)
	_, _, err := readBody(second, Limits{MaxBodyBytes: 1 << 20})
	if !errors.Is(err, admission.ErrArrivingFull) {
		t.Fatalf("a body past the bound: %v, want admission.ErrArrivingFull", err)
	}
	writeBodyError(second, err, 1<<20)
	if w.Code != 503 || w.Header().Get("Retry-After") == "" {
		t.Errorf("answered %d %v, want 503 with Retry-After", w.Code, w.Header())
	}
	releaseSecond()
	releaseFirst()
	if n := l.Arriving(); n != 0 {
		t.Fatalf("%d bytes still counted after both were done with", n)
	}
	third, _ := newCtx(strings.Repeat("c", 100))
	defer l.meter(third)()
	if b, err := io.ReadAll(third.Request.Body); err != nil || len(b) != 100 {
		t.Fatalf("a body of the whole bound once the others are done: %d bytes, %v", len(b), err)
	}
}

// Over HTTP: the body that would pass the bound fails with 503, not the
// one already arriving (a plain counter failed both, whichever read next).
func TestArrivingBodyFailsAloneAtTheBound(t *testing.T) {
	_, h, db, _ := newLimitedTrainer(t, TrainerOptions{MaxIngestBytes: 4096, Limits: Limits{MaxBodyBytes: 4096}})
	pr, pw := io.Pipe()
	slow := httptest.NewRequest("POST", "http://localhost:8000/add_training_data_bulk", pr)
	slow.Header.Set("Content-Type", "application/json")
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, slow)
		done <- w
	}()
	// A pipe's Write returns once the handler has read every byte; the
	// second returns once the handler is reading again, so it has counted
	// the first.
	for _, part := range []string{`{"entries":[` + entry(30, 3, 1) + strings.Repeat(" ", 3000), " "} {
		if _, err := io.WriteString(pw, part); err != nil {
			t.Fatal(err)
		}
	}
	big := `{"entries":[` + entry(31, 3, 2) + `]}` + strings.Repeat(" ", 1500)
	if w := do(h, "POST", "/add_training_data_bulk", big); w.Code != 503 || !strings.Contains(w.Body.String(), "arriving") {
		t.Fatalf("a body past the arriving bound: %d %s, want 503", w.Code, w.Body)
	}
	io.WriteString(pw, `]}`)
	pw.Close()
	if w := <-done; w.Code != 202 {
		t.Fatalf("the body already arriving: %d %s, want 202", w.Code, w.Body)
	}
	if c := db.Counts(); c.Train(features.TTFT)+c.Holdout(features.TTFT) != 1 {
		t.Errorf("store holds %d samples, want 1", c.Train(features.TTFT)+c.Holdout(features.TTFT))
	}
}

// The minimum transfer rate holds on the prediction routes too: a
// prediction body trickling in is cut off with 408 after the grace.
func TestSlowPredictionBodyIsCut(t *testing.T) {
	s := newService(t, Tokens{})
	h := NewPredictorHandler(s.pred, PredictorOptions{Limits: Limits{MinBodyRate: 1 << 20, BodyGrace: time.Second}})
	srv := httptest.NewServer(h)
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /predict/bulk/strict HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{",
		srv.Listener.Addr(), 1<<20)
	reply, _ := io.ReadAll(conn)
	if !strings.Contains(string(reply), " 408 ") || !strings.Contains(string(reply), "too slowly") {
		t.Fatalf("a stalled prediction body: %q, want 408", reply)
	}
}
