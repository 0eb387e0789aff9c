package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/headroomhq/headroom/internal/orderedjson"
)

// Sweep is the comparison repeated at several offered loads.
type Sweep struct {
	Servers    int           `json:"servers"`
	Burstiness float64       `json:"burstiness"`
	Duration   time.Duration `json:"-"`
	Warmup     time.Duration `json:"-"`
	Seed       uint64        `json:"seed"`
	SLO        SLO           `json:"slo,omitzero"`
	XGBoost    bool          `json:"xgboost"`
	Points     []SweepPoint  `json:"sweep"`
	// WallSeconds is the whole sweep's.
	WallSeconds float64 `json:"wall_seconds"`
}

// SweepPoint is one load of a sweep: a whole demo run at that rate, with its
// own warm-up and service, so that the predicted policy's model learned
// that load.
type SweepPoint struct {
	Rate     float64
	Requests int
	Policies []PolicyResult
	Model    FinalModel
}

// MarshalJSON writes {"rate", "requests", "policies": {name: {...}}, "model"},
// the policies keyed by name in the comparison's order.
func (p SweepPoint) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Rate     float64            `json:"rate"`
		Requests int                `json:"requests"`
		Policies orderedjson.Object `json:"policies"`
		Model    FinalModel         `json:"model"`
	}{p.Rate, p.Requests, byName(p.Policies), p.Model})
}

// MarshalJSON adds the durations in seconds.
func (s *Sweep) MarshalJSON() ([]byte, error) {
	type plain Sweep
	return json.Marshal(struct {
		DurationS float64 `json:"duration_s"`
		WarmupS   float64 `json:"warmup_s"`
		*plain
	}{s.Duration.Seconds(), s.Warmup.Seconds(), (*plain)(s)})
}

// Policy returns the named policy's result at point i, or nil.
func (s *Sweep) Policy(i int, name string) *PolicyResult {
	r := Result{Policies: s.Points[i].Policies}
	return r.Policy(name)
}

// ParseRates reads a comma-separated list of request rates.
func ParseRates(list string) ([]float64, error) {
	var rates []float64
	for _, f := range strings.Split(list, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(r > 0) || math.IsInf(r, 0) {
			return nil, fmt.Errorf("rate %q: want a positive number of requests per second", f)
		}
		rates = append(rates, r)
	}
	return rates, nil
}

// RunSweep runs the demo at each rate in turn, each run on its own arrivals
// (the same for every policy at that rate) and with its own service, and
// gathers the policies' results. opts.Rate is ignored.
func RunSweep(ctx context.Context, opts Options, rates []float64) (*Sweep, error) {
	if len(rates) == 0 {
		return nil, fmt.Errorf("demo sweep: no rates")
	}
	start := time.Now()
	var s *Sweep
	for _, rate := range rates {
		o := opts
		o.Rate = rate
		res, err := Run(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("demo sweep at %g requests/s: %w", rate, err)
		}
		if s == nil {
			s = &Sweep{Servers: res.Servers, Burstiness: res.Burstiness, Duration: res.Duration, Warmup: res.Warmup,
				Seed: res.Seed, SLO: res.SLO, XGBoost: res.XGBoost}
		}
		s.Points = append(s.Points, SweepPoint{Rate: rate, Requests: res.Requests, Policies: res.Policies, Model: res.Model})
	}
	s.WallSeconds = time.Since(start).Seconds()
	return s, nil
}

// WriteSweepJSON writes the sweep, indented.
func WriteSweepJSON(w io.Writer, r *Sweep) error { return writeIndented(w, "demo sweep", r) }

// WriteSweepTable writes one table per figure (TTFT p50 and p95, SLO
// attainment when SLOs are set): a row per rate, a column per policy.
func WriteSweepTable(w io.Writer, s *Sweep) error {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%d servers, burstiness %.3g, seed %d; every policy on the same arrivals at each rate\n",
		s.Servers, s.Burstiness, s.Seed)
	names := PoliciesFor(s.SLO)
	table := func(title string, get func(*PolicyResult) string) {
		fmt.Fprintf(&buf, "\n%s\n", title)
		tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "req/s\t"+strings.Join(names, "\t")+"\t")
		for i, p := range s.Points {
			cells := []string{strconv.FormatFloat(p.Rate, 'g', -1, 64)}
			for _, name := range names {
				cell := "--"
				if pr := s.Policy(i, name); pr != nil {
					cell = get(pr)
				}
				cells = append(cells, cell)
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
		}
		tw.Flush()
	}
	table("TTFT p50 (ms)", func(p *PolicyResult) string { return fmt.Sprintf("%.1f", p.TTFTP50Ms) })
	table("TTFT p95 (ms)", func(p *PolicyResult) string { return fmt.Sprintf("%.1f", p.TTFTP95Ms) })
	if s.SLO.Set() {
		table("SLO attainment ("+sloString(s.SLO)+")", func(p *PolicyResult) string {
			if p.SLOAttainment == nil {
				return "--"
			}
			return fmt.Sprintf("%.1f%%", 100**p.SLOAttainment)
		})
	}
	_, err := w.Write(buf.Bytes())
	return err
}
