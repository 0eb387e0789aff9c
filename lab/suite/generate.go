package suite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/lab/sim/workload"
	"github.com/headroomhq/headroom/lab/trace"
	"github.com/headroomhq/headroom/wire"
)

// Workload kinds.
const (
	KindChat    = "chat"    // independent prompts, workload.Chat
	KindAgentic = "agentic" // sessions resending their history, workload.Agentic
)

// Workload is the traffic of one trace, in a form a manifest can spell out.
type Workload struct {
	Kind string `json:"kind"`
	// Requests is the number of chat requests; agentic traffic has
	// Sessions × Turns.
	Requests           int `json:"requests,omitempty"`
	Sessions           int `json:"sessions,omitempty"`
	Turns              int `json:"turns,omitempty"`
	SystemPromptTokens int `json:"system_prompt_tokens,omitempty"`
	// Prompt is the chat prompt, or the agentic turn's new message.
	Prompt Lengths `json:"prompt"`
	Output Lengths `json:"output"`
	// Rate is requests (or turns) per second; Burstiness the Gamma shape
	// of the gaps (1 Poisson, below 1 bursty).
	Rate       float64 `json:"rate"`
	Burstiness float64 `json:"burstiness"`
	ThinkS     float64 `json:"think_s,omitempty"`
}

// Lengths is a log-normal token-length distribution: median, σ of the log,
// clipped to [Min, Max].
type Lengths struct {
	Median float64 `json:"median"`
	Sigma  float64 `json:"sigma"`
	Min    int     `json:"min"`
	Max    int     `json:"max"`
}

func (l Lengths) logNormal() workload.LogNormal {
	return workload.LogNormal{Mu: math.Log(l.Median), Sigma: l.Sigma, Min: l.Min, Max: l.Max}
}

func (w *Workload) validate() error {
	if !(w.Prompt.Median > 0) || !(w.Output.Median > 0) {
		return fmt.Errorf("workload: prompt and output medians must be positive")
	}
	switch w.Kind {
	case KindChat:
		if w.Requests < 1 {
			return fmt.Errorf("chat workload: %d requests", w.Requests)
		}
	case KindAgentic:
		if w.Sessions < 1 || w.Turns < 1 {
			return fmt.Errorf("agentic workload: %d sessions of %d turns", w.Sessions, w.Turns)
		}
	default:
		return fmt.Errorf("workload kind %q, want %s or %s", w.Kind, KindChat, KindAgentic)
	}
	return nil
}

// requests builds the trace's requests from its workload and seed.
func (t *Trace) requests() ([]*sim.Request, error) {
	w := t.Workload
	arrivals := workload.Arrivals{Rate: w.Rate, Burstiness: w.Burstiness}
	switch w.Kind {
	case KindChat:
		return workload.Chat(workload.ChatOptions{Requests: w.Requests, Prompt: w.Prompt.logNormal(),
			Output: w.Output.logNormal(), Arrivals: arrivals, Seed: t.Seed})
	case KindAgentic:
		return workload.Agentic(workload.AgenticOptions{Sessions: w.Sessions, Turns: w.Turns,
			SystemPromptTokens: w.SystemPromptTokens, Message: w.Prompt.logNormal(), Output: w.Output.logNormal(),
			Think: time.Duration(w.ThinkS * float64(time.Second)), Arrivals: arrivals, Seed: t.Seed})
	}
	return nil, fmt.Errorf("workload kind %q", w.Kind)
}

// Samples simulates the trace and returns what llm-d's router would have
// recorded, in the order it would have: a TTFT row when each first token
// arrives (whole milliseconds, as the router truncates them) and a TPOT row
// when each request of more than one output token finishes, each with the
// chosen server's features at dispatch and a timestamp of trace.Epoch() plus
// the simulated time of the event. A P/D trace's rows are described at PD.
func (t *Trace) Samples(ctx context.Context) ([]features.Sample, error) {
	reqs, err := t.requests()
	if err != nil {
		return nil, fmt.Errorf("trace %q: %w", t.Name, err)
	}
	if t.PD != nil {
		rows, err := t.pdSamples(ctx, reqs)
		if err != nil {
			return nil, fmt.Errorf("trace %q: %w", t.Name, err)
		}
		return rows, nil
	}
	router, ok := sim.NewRouter(t.Router)
	if !ok {
		return nil, fmt.Errorf("trace %q: unknown router %q", t.Name, t.Router)
	}
	var rows []features.Sample
	at := func(d time.Duration) time.Time { return trace.Epoch().Add(d) }
	_, err = sim.Simulate(ctx, t.Fleet, sim.FleetOptions{
		Router: router,
		Hooks: sim.Hooks{
			OnFirstToken: func(o *sim.Outcome) {
				if ms := math.Trunc(float64(o.TTFT()) / 1e6); ms > 0 {
					rows = append(rows, features.Sample{Row: o.Row, ActualTTFTMs: ms, Timestamp: at(o.FirstToken)})
				}
			},
			OnFinish: func(o *sim.Outcome) {
				if o.Request.OutputTokens > 1 {
					rows = append(rows, features.Sample{Row: o.Row, ActualTPOTMs: float64(o.TPOT()) / 1e6,
						Timestamp: at(o.Finish)})
				}
			},
		},
	}, reqs...)
	if err != nil {
		return nil, fmt.Errorf("trace %q: simulate: %w", t.Name, err)
	}
	return rows, nil
}

// Encode writes samples as an llm-d JSONL trace, one wire.AppendEntry line
// each.
func Encode(samples []features.Sample) []byte {
	var buf []byte
	for i := range samples {
		buf = wire.AppendEntry(buf, &samples[i])
		buf = append(buf, '\n')
	}
	return buf
}

// Generate simulates every trace of m and writes it into dir with the
// manifest, filling in each trace's Rows and SHA256. Each file is read back
// through package trace before it is written, so a suite holds only rows the
// service would accept. With check, a trace whose manifest already has a
// digest must regenerate to exactly those bytes: that is how a committed
// manifest proves the suite is reproducible, and how a change to the
// simulator that moves the suite is noticed rather than silently absorbed.
func Generate(ctx context.Context, m *Manifest, dir string, check bool) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("generate suite: %w", err)
	}
	for i := range m.Traces {
		t := &m.Traces[i]
		samples, err := t.Samples(ctx)
		if err != nil {
			return err
		}
		data := Encode(samples)
		if _, err := trace.Read(bytes.NewReader(data)); err != nil {
			return fmt.Errorf("trace %q: generated rows do not read back: %w", t.Name, err)
		}
		sum := digest(data)
		if check && t.SHA256 != "" && (t.SHA256 != sum || t.Rows != len(samples)) {
			return fmt.Errorf("trace %q regenerates to %d rows with SHA-256 %s, the manifest says %d rows and %s: the simulator or the generator changed (generate without the check to accept the new suite)",
				t.Name, len(samples), sum, t.Rows, t.SHA256)
		}
		if err := os.WriteFile(filepath.Join(dir, t.File()), data, 0o644); err != nil {
			return fmt.Errorf("generate suite: %w", err)
		}
		t.Rows, t.SHA256 = len(samples), sum
	}
	data, err := m.Encode()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestName), data, 0o644); err != nil {
		return fmt.Errorf("generate suite: %w", err)
	}
	return nil
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Load reads a suite directory's manifest and traces, checking each file
// against the manifest's digest: figures computed from a file that is not
// the one the manifest describes would be attributed to the wrong workload.
func Load(dir string) (*Manifest, [][]features.Sample, error) {
	m, err := ReadManifest(filepath.Join(dir, ManifestName))
	if err != nil {
		return nil, nil, err
	}
	out := make([][]features.Sample, len(m.Traces))
	for i := range m.Traces {
		t := &m.Traces[i]
		path := filepath.Join(dir, t.File())
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("load suite: %w", err)
		}
		if got := digest(data); got != t.SHA256 {
			return nil, nil, fmt.Errorf("load suite: %s has SHA-256 %s, the manifest says %s; regenerate it with `headroom suite --manifest %s`",
				path, got, t.SHA256, filepath.Join(dir, ManifestName))
		}
		if out[i], err = trace.Read(bytes.NewReader(data)); err != nil {
			return nil, nil, fmt.Errorf("load suite %s: %w", path, err)
		}
	}
	return m, out, nil
}
