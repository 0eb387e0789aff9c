// Package loadgen drives a running predictor (and optionally a trainer) with
// the router's protocol at a fixed rate and summarises what it saw.
//
// The load is open-loop: request i is due at start + i/rate whatever
// happened to the requests before it, and its latency is measured from
// that due time, so a stalled server shows as latency rather than as a
// politely slower client (the coordinated-omission trap of closed-loop
// generators). Runs are bounded: a fixed schedule over a fixed duration, a
// per-request timeout, and a bounded backlog beyond which due requests are
// counted as errors rather than queued without limit.
package loadgen

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Config is one load run.
type Config struct {
	// PredictorURL is the prediction server's base URL; needed when Rate > 0.
	PredictorURL string
	// Path is the prediction route, /predict/bulk/strict (default) or
	// /predict/bulk; both take {"requests": [...]}.
	Path string
	// Rate is prediction requests per second; 0 sends none (ingest only).
	Rate float64
	// Rows is rows per prediction request; default 10.
	Rows int
	// Concurrency bounds prediction requests in flight (and connections);
	// default 36, the router's LATENCY_MAX_CONCURRENT_DISPATCHES.
	Concurrency int

	// TrainerURL is the training server's base URL; needed when IngestRate
	// > 0. When set it is also scraped for training runs and memory.
	TrainerURL string
	// IngestRate is training samples per second sent to
	// /add_training_data_bulk; 0 sends none.
	IngestRate float64
	// IngestBatch is samples per ingest request; default 1000.
	IngestBatch int
	// IngestConcurrency bounds ingest requests in flight; default 16, the
	// uploads a trainer handles at once (api.DefaultMaxConcurrentIngest).
	IngestConcurrency int

	// Duration is the measured window. Warmup runs the same load before it,
	// unrecorded, so connection setup and first-touch costs stay out of the
	// figures.
	Duration time.Duration
	Warmup   time.Duration
	// Timeout bounds one request; default 10 s, the router client's.
	Timeout time.Duration

	// Source gives the rows; nil means Generator{Seed: 1}.
	Source Source

	// ScrapeInterval is how often the servers' /metrics and the trainer's
	// /status are read during the run (memory, training runs, bundle
	// swaps); default 1 s, negative disables scraping.
	ScrapeInterval time.Duration

	// Token, when set, is sent as a bearer token on every request.
	Token string

	// GoClient sends with Go's net/http client, as the router does, rather
	// than the lean HTTP/1.1 client (conn.go), which costs the shared CPU a
	// fraction as much. The server sees the same requests either way.
	GoClient bool

	// AllowRemote permits targets beyond loopback. A load generator aimed
	// at someone else's server by a typo is a denial-of-service tool, so
	// the default refuses.
	AllowRemote bool
}

// Limits that keep one run bounded whatever the flags say.
const (
	MaxRate        = 1e6
	MaxIngestRate  = 1e7
	MaxDuration    = time.Hour
	MaxRows        = 100000
	MaxIngestBatch = 100000
	MaxConcurrency = 10000
)

// withDefaults fills zero fields and checks the result.
func (c Config) withDefaults() (Config, error) {
	if c.Path == "" {
		c.Path = "/predict/bulk/strict"
	}
	if c.Rows == 0 {
		c.Rows = 10
	}
	if c.Concurrency == 0 {
		c.Concurrency = 36
	}
	if c.IngestBatch == 0 {
		c.IngestBatch = 1000
	}
	if c.IngestConcurrency == 0 {
		c.IngestConcurrency = 16
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.ScrapeInterval == 0 {
		c.ScrapeInterval = time.Second
	}
	if c.Source == nil {
		c.Source = Generator{Seed: 1}
	}
	return c, c.validate()
}

func (c Config) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Rate >= 0 && c.Rate <= MaxRate, "rate %v: want 0 to %v requests/s", c.Rate, MaxRate)
	check(c.IngestRate >= 0 && c.IngestRate <= MaxIngestRate, "ingest rate %v: want 0 to %v samples/s", c.IngestRate, float64(MaxIngestRate))
	check(c.Rate > 0 || c.IngestRate > 0, "nothing to send: set a prediction rate, an ingest rate or both")
	check(c.Duration > 0 && c.Duration <= MaxDuration, "duration %v: want more than 0 and at most %v", c.Duration, MaxDuration)
	check(c.Warmup >= 0 && c.Warmup <= MaxDuration, "warmup %v: want 0 to %v", c.Warmup, MaxDuration)
	check(c.Rows >= 1 && c.Rows <= MaxRows, "rows %d: want 1 to %d", c.Rows, MaxRows)
	check(c.IngestBatch >= 1 && c.IngestBatch <= MaxIngestBatch, "ingest batch %d: want 1 to %d", c.IngestBatch, MaxIngestBatch)
	check(c.Concurrency >= 1 && c.Concurrency <= MaxConcurrency, "concurrency %d: want 1 to %d", c.Concurrency, MaxConcurrency)
	check(c.IngestConcurrency >= 1 && c.IngestConcurrency <= MaxConcurrency, "ingest concurrency %d: want 1 to %d", c.IngestConcurrency, MaxConcurrency)
	check(c.Timeout > 0, "timeout %v: want more than 0", c.Timeout)
	check(c.Path == "/predict/bulk/strict" || c.Path == "/predict/bulk", "path %q: want /predict/bulk/strict or /predict/bulk", c.Path)
	if c.Rate > 0 {
		errs = append(errs, CheckTarget("predictor URL", c.PredictorURL, c.AllowRemote))
	}
	if !c.GoClient {
		for _, u := range []string{c.PredictorURL, c.TrainerURL} {
			check(!strings.HasPrefix(u, "https:"), "%s: the lean client speaks plain http; use the Go client for https", u)
		}
	}
	if c.IngestRate > 0 || c.TrainerURL != "" {
		errs = append(errs, CheckTarget("trainer URL", c.TrainerURL, c.AllowRemote))
	}
	return errors.Join(errs...)
}

// CheckTarget accepts an http URL whose host is loopback: localhost or a
// loopback IP literal. Other names are refused even if they resolve to
// loopback today, since what they resolve to can change between the check
// and the run.
func CheckTarget(what, raw string, allowRemote bool) error {
	if raw == "" {
		return fmt.Errorf("%s: missing", what)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%s %q: %w", what, raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%s %q: want an http:// or https:// URL", what, raw)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("%s %q: no host", what, raw)
	}
	if allowRemote || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("%s %q: host %s is not loopback (localhost, 127.0.0.0/8, ::1); "+
		"a load test sends thousands of requests a second, so aim it at a server you run "+
		"here, or pass --allow-remote if you mean to", what, raw, host)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
