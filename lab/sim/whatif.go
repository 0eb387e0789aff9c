package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/headroomhq/headroom/internal/orderedjson"
)

// Result is one configuration's run.
type Result struct {
	Config  Config
	Summary Summary
}

// WhatIfOptions are the parts of a what-if run beside its
// configurations.
type WhatIfOptions struct {
	// NewRouter gives each run its own router (a router may keep state);
	// nil means DefaultLoadPrefix.
	NewRouter func() Router
	// ClientTimeout is FleetOptions.ClientTimeout: clients give up on
	// requests not finished this long after they sent them (0: never).
	ClientTimeout time.Duration
}

// WhatIf replays the same requests through a fresh fleet under each
// configuration, in order.
func WhatIf(ctx context.Context, reqs []*Request, cfgs []Config, opts WhatIfOptions) ([]Result, error) {
	out := make([]Result, 0, len(cfgs))
	for _, cfg := range cfgs {
		var r Router
		if opts.NewRouter != nil {
			r = opts.NewRouter()
		}
		f, err := Simulate(ctx, cfg, FleetOptions{Router: r, ClientTimeout: opts.ClientTimeout}, reqs...)
		if err != nil {
			return nil, fmt.Errorf("config %q: %w", cfg.Name, err)
		}
		out = append(out, Result{Config: cfg, Summary: f.Summary()})
	}
	return out, nil
}

// metric is one line of a what-if report.
type metric struct {
	key   string // JSON key
	label string // table label
	get   func(*Summary) float64
	// percent shows the value as a percentage, and its change in points.
	percent bool
	integer bool
}

var metrics = []metric{
	{key: "completed", label: "completed requests", get: func(s *Summary) float64 { return float64(s.Completed) }, integer: true},
	{key: "rejected", label: "rejected (too big)", get: func(s *Summary) float64 { return float64(s.Rejected) }, integer: true},
	{key: "timed_out", label: "timed out (client gave up)", get: func(s *Summary) float64 { return float64(s.TimedOut) }, integer: true},
	{key: "duration_s", label: "makespan (s)", get: func(s *Summary) float64 { return s.Duration.Seconds() }},
	{key: "throughput_rps", label: "throughput (req/s)", get: func(s *Summary) float64 { return s.ThroughputRPS }},
	{key: "output_tokens_per_s", label: "output tokens/s", get: func(s *Summary) float64 { return s.OutputTokensPerS }},
	{key: "prefix_hit_rate", label: "prefix hit rate", get: func(s *Summary) float64 { return s.PrefixHitRate }, percent: true},
	{key: "preemptions", label: "preemptions", get: func(s *Summary) float64 { return float64(s.Preemptions) }, integer: true},
	{key: "kv_evictions", label: "KV blocks evicted", get: func(s *Summary) float64 { return float64(s.Evictions) }, integer: true},
	{key: "ttft_p50_ms", label: "TTFT p50 (ms)", get: func(s *Summary) float64 { return s.TTFT.P50 }},
	{key: "ttft_p90_ms", label: "TTFT p90 (ms)", get: func(s *Summary) float64 { return s.TTFT.P90 }},
	{key: "ttft_p95_ms", label: "TTFT p95 (ms)", get: func(s *Summary) float64 { return s.TTFT.P95 }},
	{key: "ttft_p99_ms", label: "TTFT p99 (ms)", get: func(s *Summary) float64 { return s.TTFT.P99 }},
	{key: "tpot_p50_ms", label: "TPOT p50 (ms)", get: func(s *Summary) float64 { return s.TPOT.P50 }},
	{key: "tpot_p95_ms", label: "TPOT p95 (ms)", get: func(s *Summary) float64 { return s.TPOT.P95 }},
	{key: "e2e_p50_ms", label: "E2E p50 (ms)", get: func(s *Summary) float64 { return s.E2E.P50 }},
	{key: "e2e_p95_ms", label: "E2E p95 (ms)", get: func(s *Summary) float64 { return s.E2E.P95 }},
}

// WriteJSON writes {"configs":[...]} with one flat object per
// configuration, in order: its settings, every metric, and for all but the
// first, change_vs_first: each metric's relative change from the first
// configuration (absolute change for prefix_hit_rate; null when the first
// is 0).
func WriteJSON(w io.Writer, results []Result) error {
	// The name first and the metrics in the table's order.
	configs := make([]orderedjson.Object, len(results))
	for i, r := range results {
		c := r.Config
		o := orderedjson.Object{
			{Key: "name", Value: c.Name}, {Key: "servers", Value: c.Servers}, {Key: "kv_blocks", Value: c.KVBlocks},
			{Key: "prefix_caching", Value: c.PrefixCaching}, {Key: "max_num_seqs", Value: c.MaxNumSeqs},
			{Key: "max_num_batched_tokens", Value: c.MaxNumBatchedTokens}, {Key: "cost", Value: c.Cost},
			{Key: "requests", Value: r.Summary.Requests},
		}
		for _, m := range metrics {
			o = append(o, orderedjson.Field{Key: m.key, Value: jsonNumber(m.get(&r.Summary))})
		}
		if i > 0 {
			change := orderedjson.Object{}
			for _, m := range metrics {
				change = append(change, orderedjson.Field{Key: m.key, Value: changeOf(m, &results[0].Summary, &r.Summary)})
			}
			o = append(o, orderedjson.Field{Key: "change_vs_first", Value: change})
		}
		configs[i] = o
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(orderedjson.Object{{Key: "configs", Value: configs}}); err != nil {
		return fmt.Errorf("write what-if json: %w", err)
	}
	return nil
}

// changeOf is a metric's change from base to s: relative, or in points for
// percentages; nil when undefined.
func changeOf(m metric, base, s *Summary) any {
	b, v := m.get(base), m.get(s)
	if m.percent {
		return jsonNumber(v - b)
	}
	if b == 0 {
		if v == 0 {
			return 0.0
		}
		return nil
	}
	return jsonNumber((v - b) / b)
}

// jsonNumber rounds to 6 significant decimals for stable, readable output,
// and maps non-finite values to nil (JSON has no NaN).
func jsonNumber(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return math.Round(v*1e6) / 1e6
}

// WriteTable writes one column per configuration and one row per metric;
// columns after the first show the change from the first.
func WriteTable(w io.Writer, results []Result) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := []string{"configuration"}
	for i, r := range results {
		if i == 0 {
			header = append(header, r.Config.Name)
		} else {
			header = append(header, r.Config.Name, "vs first")
		}
	}
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	settings := []struct {
		label string
		get   func(Config) string
	}{
		{"servers", func(c Config) string { return fmt.Sprint(c.Servers) }},
		{"kv_blocks", func(c Config) string { return fmt.Sprint(c.KVBlocks) }},
		{"prefix_caching", func(c Config) string { return fmt.Sprint(c.PrefixCaching) }},
		{"max_num_seqs", func(c Config) string { return fmt.Sprint(c.MaxNumSeqs) }},
		{"max_num_batched_tokens", func(c Config) string { return fmt.Sprint(c.MaxNumBatchedTokens) }},
	}
	for _, s := range settings {
		row := []string{s.label}
		for i, r := range results {
			row = append(row, s.get(r.Config))
			if i > 0 {
				row = append(row, "")
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	for _, m := range metrics {
		row := []string{m.label}
		for i, r := range results {
			row = append(row, formatValue(m, m.get(&r.Summary)))
			if i > 0 {
				row = append(row, formatChange(m, changeOf(m, &results[0].Summary, &r.Summary)))
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write what-if table: %w", err)
	}
	// Right alignment pads empty cells at the ends of lines; drop that.
	for line := range strings.Lines(buf.String()) {
		if _, err := io.WriteString(w, strings.TrimRight(line, " \n")+"\n"); err != nil {
			return fmt.Errorf("write what-if table: %w", err)
		}
	}
	return nil
}

func formatValue(m metric, v float64) string {
	switch {
	case m.percent:
		return fmt.Sprintf("%.1f%%", 100*v)
	case m.integer:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func formatChange(m metric, c any) string {
	v, ok := c.(float64)
	switch {
	case !ok:
		return "n/a"
	case m.percent:
		return fmt.Sprintf("%+.1f pt", 100*v)
	case v == 0:
		return "="
	case math.Abs(v) < 0.0005:
		return "~0%" // changed, but by less than the precision shown
	default:
		return fmt.Sprintf("%+.1f%%", 100*v)
	}
}
