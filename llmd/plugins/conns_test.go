package plugins

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/headroomhq/headroom/llmd/internal/headroomtest"
)

// connServer answers each POST with its body reversed, counting the
// connections it accepts.
func connServer(t *testing.T, handle func(w http.ResponseWriter, body []byte)) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var dials atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != pairsPath || r.Header.Get("Content-Type") != "application/json" ||
			r.ContentLength != int64(len(body)) {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		handle(w, body)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &dials
}

func echo(w http.ResponseWriter, body []byte) { _, _ = w.Write(append([]byte("got "), body...)) }

func TestConnsReuseAConnection(t *testing.T) {
	srv, dials := connServer(t, echo)
	p := newConns(srv.URL, pairsPath, nil)
	if p == nil {
		t.Fatal("no direct connections to an http:// URL")
	}
	for _, body := range []string{"a", strings.Repeat("b", 100<<10), "c"} {
		status, data, err := p.post(context.Background(), []byte(body), nil, maxBuffer)
		if err != nil || status != http.StatusOK || string(data) != "got "+body {
			t.Fatalf("post %.10q: %d %.20q %v", body, status, data, err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d connections for three calls in turn, want 1", n)
	}
}

func TestConnsRetryOnceOnAConnectionClosedWhileIdle(t *testing.T) {
	srv, dials := connServer(t, echo)
	p := newConns(srv.URL, pairsPath, nil)
	ctx := context.Background()
	if _, _, err := p.post(ctx, []byte("a"), nil, maxBuffer); err != nil {
		t.Fatal(err)
	}
	srv.CloseClientConnections() // as a predictor closing an idle connection
	status, data, err := p.post(ctx, []byte("b"), nil, maxBuffer)
	if err != nil || status != http.StatusOK || string(data) != "got b" {
		t.Fatalf("after the predictor closed the idle connection: %d %q %v", status, data, err)
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

func TestConnsAnswersThatCloseOrAreChunked(t *testing.T) {
	srv, dials := connServer(t, func(w http.ResponseWriter, body []byte) {
		if string(body) == "close" {
			w.Header().Set("Connection", "close")
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		for range 3 { // unsized and flushed: chunked
			_, _ = w.Write(body)
			w.(http.Flusher).Flush()
		}
	})
	p := newConns(srv.URL, pairsPath, nil)
	for _, body := range []string{"close", "x", "y"} {
		status, data, err := p.post(context.Background(), []byte(body), []byte("kept:"), maxBuffer)
		if err != nil || status != http.StatusServiceUnavailable || string(data) != "kept:"+strings.Repeat(body, 3) {
			t.Fatalf("post %q: %d %q %v", body, status, data, err)
		}
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (the first answer closed its own)", n)
	}
}

func TestConnsDeadline(t *testing.T) {
	release := make(chan struct{})
	srv, _ := connServer(t, func(w http.ResponseWriter, body []byte) {
		<-release
		echo(w, body)
	})
	defer close(release)
	p := newConns(srv.URL, pairsPath, nil)
	for _, tt := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, context.DeadlineExceeded},
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			_, _, err := p.post(ctx, []byte("slow"), nil, maxBuffer)
			if !errors.Is(err, tt.want) {
				t.Errorf("err %v, want %v", err, tt.want)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("returned after %v", took)
			}
		})
	}
}

func TestNewConnsOnlyForPlainHTTP(t *testing.T) {
	proxy := func(r *http.Request) (*url.URL, error) { // as HTTP_PROXY with NO_PROXY=127.0.0.1,localhost,::1
		if h := r.URL.Hostname(); h == "127.0.0.1" || h == "localhost" || h == "::1" {
			return nil, nil
		}
		return url.Parse("http://proxy.example:3128")
	}
	for _, tt := range []struct {
		base string
		want string // the address dialled; "" for net/http
	}{
		{"http://127.0.0.1:8001", "127.0.0.1:8001"},
		{"http://localhost", "localhost:80"},
		{"http://[::1]:8001/base", "[::1]:8001"},
		{"https://127.0.0.1:8001", ""},
		{"http://user:pw@127.0.0.1:8001", ""},
		{"http://predictor.example:8001", ""}, // through the proxy
		{"::bad", ""},
	} {
		p := newConns(tt.base, pairsPath, proxy)
		got := ""
		if p != nil {
			got = p.addr
		}
		if got != tt.want {
			t.Errorf("%s: direct address %q, want %q", tt.base, got, tt.want)
		}
	}
	if p := newConns("http://127.0.0.1:8001/base", pairsPath, proxy); !strings.HasPrefix(string(p.request), "POST /base/predict/pairs HTTP/1.1\r\nHost: 127.0.0.1:8001\r\n") {
		t.Errorf("request head %q", p.request)
	}
}

// BenchmarkPairsCall is one /predict/pairs call's round trip from the
// producer's client to a predictor process on loopback that has no model
// (it answers 503 at once: the figures are the client's and the server's
// hand-offs and system calls, not a prediction's work), through the direct
// connections and through net/http's transport with the same buffers, the
// two in turns; it prints the p50 and p99 of each.
func BenchmarkPairsCall(b *testing.B) {
	addr := headroomtest.FreePort(b)
	cmd := exec.Command(headroomtest.Binary(b), "predictor", "--data-dir", b.TempDir(), "--predictor-listen", addr,
		"--trainer-url", "http://"+headroomtest.FreePort(b), "--log-level", "error")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	direct, transport := newClient([]string{"http://" + addr}, ""), newClient([]string{"http://" + addr}, "")
	transport.direct[0] = nil
	req := benchPairsRequest()
	body, err := appendPairsRequest(nil, &req)
	if err != nil {
		b.Fatal(err)
	}
	call := func(c *client) time.Duration {
		start := time.Now()
		status, data, err := c.postPairs(context.Background(), 0, body, nil, maxBuffer)
		if err != nil || status != http.StatusServiceUnavailable {
			b.Fatalf("%d %s %v", status, data, err)
		}
		return time.Since(start)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, _, err := direct.postPairs(context.Background(), 0, body, nil, maxBuffer); err == nil {
			break
		} else if time.Now().After(deadline) {
			b.Fatalf("predictor at %s did not start: %v", addr, err)
		}
	}
	call(transport)
	var d, t []time.Duration
	for b.Loop() {
		d, t = append(d, call(direct)), append(t, call(transport))
	}
	for _, m := range []struct {
		name string
		took []time.Duration
	}{{"direct", d}, {"net-http", t}} {
		slices.Sort(m.took)
		b.ReportMetric(float64(m.took[len(m.took)/2])/1e6, m.name+"-p50-ms")
		b.ReportMetric(float64(m.took[len(m.took)*99/100])/1e6, m.name+"-p99-ms")
	}
}

// TestAnswerPastItsLimit: an answer longer than its limit fails the call,
// whether its length is declared or it is chunked, through the direct
// connections and through net/http, and the connection it came on is not
// reused; an answer of exactly the limit is read whole.
func TestAnswerPastItsLimit(t *testing.T) {
	const limit = 1000
	srv, dials := connServer(t, func(w http.ResponseWriter, body []byte) {
		n, _ := strconv.Atoi(strings.TrimPrefix(string(body), "chunked "))
		out := []byte(strings.Repeat("x", n))
		if !strings.HasPrefix(string(body), "chunked ") {
			w.Header().Set("Content-Length", strconv.Itoa(n))
			_, _ = w.Write(out)
			return
		}
		for len(out) > 0 { // unsized and flushed: chunked
			k := min(len(out), 300)
			_, _ = w.Write(out[:k])
			w.(http.Flusher).Flush()
			out = out[k:]
		}
	})
	direct, transport := newClient([]string{srv.URL}, ""), newClient([]string{srv.URL}, "")
	transport.direct[0] = nil
	for _, c := range []struct {
		name   string
		client *client
	}{{"direct", direct}, {"net-http", transport}} {
		for _, body := range []string{"1001", "chunked 1001", "1000000", "chunked 1000000", "1000", "chunked 1000"} {
			status, data, err := c.client.postPairs(context.Background(), 0, []byte(body), nil, limit)
			over := !strings.HasSuffix(body, "1000")
			switch {
			case over && !errors.Is(err, errAnswerTooLarge):
				t.Errorf("%s, answer of %s bytes: %d, %d bytes, %v; want errAnswerTooLarge", c.name, body, status, len(data), err)
			case over && len(data) > limit+1:
				t.Errorf("%s, answer of %s bytes: read %d bytes past its limit of %d", c.name, body, len(data), limit)
			case !over && (err != nil || status != http.StatusOK || len(data) != limit):
				t.Errorf("%s, answer of %s bytes: %d, %d bytes, %v; want it whole", c.name, body, status, len(data), err)
			}
		}
	}
	// The direct calls: the four too large each closed their connection.
	if n := dials.Load(); n < 5 {
		t.Errorf("%d connections for the calls, want a new one after each answer past its limit", n)
	}
}
