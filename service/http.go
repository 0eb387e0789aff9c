package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/headroomhq/headroom/api"
)

// server is one role's HTTP server on a listener bound by New.
type server struct {
	role  string
	ln    net.Listener
	srv   *http.Server
	conns *connLimit
}

// listen binds addr for role's handler, keeping at most maxConns
// connections open (connLimit), counted in reg. Timeouts are generous on
// idle connections (the router's Go client keeps them 90 s) and strict on
// slow request headers.
func listen(role, addr string, handler http.Handler, maxConns int, reg prometheus.Registerer) (*server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listen %s: %w", role, addr, err)
	}
	conns := newConnLimit(maxConns, role, reg)
	return &server{role: role, ln: ln, conns: conns, srv: &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ConnState:         conns.track,
	}}, nil
}

// url is the server's base URL, "" for no server.
func (s *server) url() string {
	if s == nil {
		return ""
	}
	return "http://" + s.ln.Addr().String()
}

// serve serves until ctx ends, then stops accepting and gives in-flight
// requests up to grace to finish; past it, their connections are closed.
func (s *server) serve(ctx context.Context, grace time.Duration, log *slog.Logger) error {
	log.Info("listening", "role", s.role, "addr", s.ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("%s server: %w", s.role, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		s.srv.Close()
		return fmt.Errorf("%s shutdown: requests still in flight after %v: %w", s.role, grace, err)
	}
	log.Info("stopped", "role", s.role)
	return nil
}

// closeListener releases a listener that was never served (Serve closes
// its own).
func (s *server) closeListener() error {
	if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("%s listener: %w", s.role, err)
	}
	return nil
}

// warnOpenListener says loudly when a server listens beyond loopback with
// no tokens.
func warnOpenListener(log *slog.Logger, addr string, tokens api.Tokens, role string) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return
	}
	ip := net.ParseIP(host)
	loopback := host == "localhost" || (ip != nil && ip.IsLoopback())
	if !loopback && (tokens.Read == "" || tokens.Write == "") {
		log.Warn("listening beyond loopback without bearer tokens: anyone who can reach this address can "+
			"write samples or read models; set --write-token/--read-token or --token-file", "role", role, "addr", addr)
	}
}
