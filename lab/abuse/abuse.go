// Package abuse runs the hostile and careless clients of issue 26 against a
// Headroom service running on loopback, and measures what they cost it:
// slow readers of large answers, held long polls by the thousand, floods
// of pair rankings beside the router's hot path, bursts of poisoned or
// repeated samples. Each scenario reports its figures beside the target
// the service is held to (docs/RELIABILITY.md, "Hostile clients").
//
// Every request goes to loopback: a scenario refuses any other address.
// Each is bounded in time (Config.Duration) and in the connections it
// opens (Config.Clients).
package abuse

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/headroomhq/headroom/lab/loadgen"
)

// Config is what a scenario runs against and how hard.
type Config struct {
	PredictorURL string // e.g. http://127.0.0.1:8001
	TrainerURL   string // e.g. http://127.0.0.1:8000
	// Clients is the number of hostile clients (each scenario has its own
	// default, the issue's); Duration how long they run.
	Clients  int
	Duration time.Duration
	// Rows is the rows per hostile prediction request (slow readers).
	Rows int
	// ReadRate is what a slow reader reads, in bytes a second.
	ReadRate int
	// Candidates is the prefill and decode candidates per pair request;
	// K the pairs asked for (0: none said, the server's default).
	Candidates, K int
	// ProbeRate is the router's hot path beside: 10-row requests a second.
	ProbeRate float64
	// HostileAddrs is the number of loopback addresses the hostile clients
	// connect from, 127.0.0.2 onwards (default 1): an attacker's pod has an
	// address of its own, while the router's calls, the probes, come from
	// 127.0.0.1. Bounds per client address then apply to the attacker, and
	// more addresses test the bounds in all.
	HostileAddrs int
	// SampleRate is the router's own samples a second sent beside a
	// poisoning (0: 20; negative: none, the poison alone).
	SampleRate int
	// Token is sent as a bearer token with every request, when set.
	Token string
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Figure is one measured value, with the target it is held to.
type Figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Target is the bound, e.g. "<= 128"; Met whether Value keeps it.
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
}

// Result is one scenario's figures and counts.
type Result struct {
	Scenario string         `json:"scenario"`
	Figures  []Figure       `json:"figures"`
	Counts   map[string]int `json:"counts,omitempty"`
}

// add appends a figure without a target.
func (r *Result) add(name string, v float64, unit string) {
	r.Figures = append(r.Figures, Figure{Name: name, Value: v, Unit: unit})
}

// atMost appends a figure held to v <= bound.
func (r *Result) atMost(name string, v float64, unit string, bound float64) {
	met := v <= bound
	r.Figures = append(r.Figures, Figure{Name: name, Value: v, Unit: unit, Target: fmt.Sprintf("<= %g", bound), Met: &met})
}

// Met reports whether every figure with a target keeps it.
func (r *Result) Met() bool {
	for _, f := range r.Figures {
		if f.Met != nil && !*f.Met {
			return false
		}
	}
	return true
}

// WriteText writes r as lines of "scenario  figure  value unit  target".
func (r *Result) WriteText(w io.Writer) {
	for _, f := range r.Figures {
		verdict := ""
		if f.Met != nil {
			verdict = fmt.Sprintf("  target %s %s: %s", f.Target, f.Unit, map[bool]string{true: "met", false: "NOT MET"}[*f.Met])
		}
		fmt.Fprintf(w, "%-14s %-44s %12.2f %-4s%s\n", r.Scenario, f.Name, f.Value, f.Unit, verdict)
	}
	keys := make([]string, 0, len(r.Counts))
	for k := range r.Counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%-14s %-44s %12d\n", r.Scenario, k, r.Counts[k])
	}
}

// A Scenario is one kind of hostile client.
type Scenario struct {
	Name    string
	Summary string
	run     func(ctx context.Context, c Config) (*Result, error)
	// duration is how long it runs when Config.Duration is not set (0:
	// 20 s): a poisoning runs through the retrains after it.
	duration time.Duration
}

// Scenarios lists every scenario, by name.
var Scenarios = []Scenario{
	{"slow-readers", "40 clients post 10,000-row /predict/bulk requests and read the answers slowly; predictor RSS", slowReaders, 0},
	{"held-polls", "3,200 long polls held on the trainer, refused ones retried; ingest latency beside them", heldPolls, 0},
	{"pairs-flood", "32 clients post 64 x 64 /predict/pairs in a loop; the 10-row hot path's latency beside them", pairsFlood, 0},
	{"bulk-flood", "32 clients post 10,000-row /predict/bulk/strict in a loop; the 10-row hot path's latency beside them", bulkFlood, 0},
	{"idle-conns", "3,200 connections to the trainer that send nothing, reopened when closed; ingest latency beside them", idleConns, 0},
	{"replay", "a trainer's address serves genuine bundles that are not current (an older lineage, version, a restamp, the future); bundles taken", replay, 0},
	{"slowloris", "clients trickle large prediction and ingest bodies a few bytes at a time; hot path and ingest beside them", slowloris, 0},
	{"burst-x20", "one upload of 500 rows with TTFT x 20 beside the router's samples; the served model's clean MAPE after", poison("burst-x20"), time.Minute},
	{"burst-slow-x3", "50 rows a step of TTFT x 3 on prompts over 300 tokens, a step every 5 s; the served model's clean MAPE after", poison("burst-slow-x3"), 2 * time.Minute},
	{"holdout-flood", "one upload of 1,000 copies of one row with TTFT x 20; the served model's clean MAPE after", poison("holdout-flood"), time.Minute},
	{"burst-spread", "500 rows of TTFT x 20 in 25 uploads from 5 addresses in turn, one every 2 s; clean MAPE after", poison("burst-spread"), time.Minute},
	{"retry-loop", "one upload of 100 rows with TTFT x 20 resent every second, 30 times; clean MAPE after", poison("retry-loop"), time.Minute},
	{"drift-x2", "a real drift: every TTFT of the router's samples doubles and stays so; the error and bounds on the new workload after", poison("drift-x2"), 7 * time.Minute},
}

// Run runs the scenario named name.
func Run(ctx context.Context, name string, c Config) (*Result, error) {
	for _, s := range Scenarios {
		if s.Name == name {
			if c.Duration <= 0 {
				c.Duration = cmp.Or(s.duration, 20*time.Second)
			}
			if c.Log == nil {
				c.Log = io.Discard
			}
			return s.run(ctx, c)
		}
	}
	names := make([]string, len(Scenarios))
	for i, s := range Scenarios {
		names[i] = s.Name
	}
	return nil, fmt.Errorf("no scenario %q (known: %s)", name, strings.Join(names, ", "))
}

// loopback returns raw's host:port once it is an http URL on loopback.
func loopback(what, raw string) (string, error) {
	if err := loadgen.CheckTarget(what, raw, false); err != nil {
		return "", err
	}
	u, _ := url.Parse(raw)
	if u.Scheme != "http" {
		return "", fmt.Errorf("%s %q: the scenarios speak plain http", what, raw)
	}
	if u.Port() == "" {
		return u.Hostname() + ":80", nil
	}
	return u.Host, nil
}

// hostileDialer is the dialer of hostile client i: from the i-th of
// HostileAddrs loopback addresses when target (host:port) is on IPv4
// loopback, else from wherever the system chooses.
func hostileDialer(c Config, target string, i int) *net.Dialer {
	host, _, err := net.SplitHostPort(target)
	ip := net.ParseIP(host)
	if err != nil || ip == nil || ip.To4() == nil || !ip.IsLoopback() {
		return &net.Dialer{}
	}
	n := min(orDefault(c.HostileAddrs, 1), 250)
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%n))}}
}

// orDefault is v, or def when v is not positive.
func orDefault[T int | float64](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// client is an HTTP client for the probes: one that does not share its
// connections with the hostile clients, and gives up after 10 s as the
// router's does.
func client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
}

// durationMs is d in milliseconds.
func durationMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
