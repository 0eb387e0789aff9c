package service

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/headroomhq/headroom/internal/polltest"
)

// At its connection limit a server closes the oldest connection that is
// not serving a request to take a new one: silent connections cannot keep
// a client that sends its request from being served, and a request in
// progress (here one held, as a long poll is) is never cut to make room.
func TestConnLimitClosesSilentConnectionsFirst(t *testing.T) {
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	})
	reg := prometheus.NewRegistry()
	srv, err := listen("test", "127.0.0.1:0", handler, 3, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.serve(ctx, 5*time.Second, slog.New(slog.DiscardHandler)) }()
	defer func() { close(release); cancel(); <-done }()
	addr := srv.ln.Addr().String()

	holdDone := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/hold")
		if err == nil {
			resp.Body.Close()
		}
		holdDone <- err
	}()
	<-held
	var silent []net.Conn
	for range 6 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	// Each silent connection past the limit closed an older silent one.
	polltest.Until(t, "silent connections closed to stay at the limit", 10*time.Second, func() bool {
		return testutil.ToFloat64(srv.conns.evicted) >= 4
	})
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 5 {
		resp, err := client.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("request %d beside the silent connections: %v", i, err)
		}
		resp.Body.Close()
	}
	closed := 0
	for _, c := range silent {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF {
			closed++
		}
	}
	if closed < 4 {
		t.Errorf("%d of 6 silent connections closed by the server, want at least 4", closed)
	}
	select {
	case err := <-holdDone:
		t.Fatalf("the held request ended while the server made room: %v", err)
	default:
	}
	if got := testutil.ToFloat64(srv.conns.gauge); got > 3 {
		t.Errorf("%v connections open, over the limit of 3", got)
	}
}
