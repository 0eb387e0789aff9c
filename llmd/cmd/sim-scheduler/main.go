// Command sim-scheduler serves llm-d's scheduler to Headroom's simulator
// (package simsched): `headroom demo --pd LAYOUT --llmd URL` routes every
// request of the simulated P/D fleet through llm-d's own scheduling, with
// llm-d's stock P/D config and with Headroom's plugins in it
// (scripts/llmd-pd-demo.sh starts both). It listens on loopback only and
// prints the URL it serves on as its first line.
//
//	sim-scheduler [--listen 127.0.0.1:0] [--config NAME=PATH ...]
//
// Without --config it serves, from the repository's root, llm-d's
// pd-topology-epp-config.yaml as "llm-d" (../shared/upstream/llm-d-router)
// and deploy/llm-d/pd-headroom-epp-config.yaml as "headroom".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/headroomhq/headroom/llmd/simsched"
)

// defaultConfigs are the configs served without --config, relative to the
// repository's root, with llm-d-router's tree beside it.
var defaultConfigs = []string{
	"llm-d=../shared/upstream/llm-d-router/deploy/config/pd-topology-epp-config.yaml",
	"headroom=deploy/llm-d/pd-headroom-epp-config.yaml",
}

type configFlag []string

func (c *configFlag) String() string     { return strings.Join(*c, ",") }
func (c *configFlag) Set(v string) error { *c = append(*c, v); return nil }

func main() {
	// llm-d's errors to stderr, as its runner logs them; until a logger is
	// set, controller-runtime's delegating logger keeps a promise for
	// every logger derived per request, and the process's heap grows with
	// the run.
	ctrllog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sim-scheduler:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("sim-scheduler", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "loopback address to serve on")
	var specs configFlag
	fs.Var(&specs, "config", "NAME=PATH: serve the EndpointPickerConfig at PATH as NAME (repeatable; default: "+strings.Join(defaultConfigs, " ")+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(specs) == 0 {
		specs = defaultConfigs
	}
	configs := map[string][]byte{}
	for _, spec := range specs {
		name, path, ok := strings.Cut(spec, "=")
		if !ok || name == "" || path == "" {
			return fmt.Errorf("--config %q: want NAME=PATH", spec)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("--config %s: %w", name, err)
		}
		configs[name] = b
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", *listen, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--listen %q: the simulator's scheduler serves loopback only", *listen)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s := simsched.New(ctx, configs)
	defer s.Close()
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("listening on http://%s\n", l.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
