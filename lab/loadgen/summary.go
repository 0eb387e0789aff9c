package loadgen

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Summary is what a run measured. Latencies are in milliseconds, of
// successful requests only, from the moment the pacer released a request
// (at most one timer tick after its due time; see LagP99Ms) to the last
// byte of its response: time spent waiting for a free connection counts.
type Summary struct {
	PredictorURL string  `json:"predictor_url,omitempty"`
	Path         string  `json:"path,omitempty"`
	TargetRPS    float64 `json:"target_rps"`
	Rows         int     `json:"rows_per_request"`
	Concurrency  int     `json:"concurrency"`
	DurationS    float64 `json:"duration_s"`
	WarmupS      float64 `json:"warmup_s"`
	// WindowS is the time rates are computed over: the duration, or longer
	// when responses to requests due in it came back after it ended.
	WindowS     float64 `json:"window_s"`
	Interrupted bool    `json:"interrupted,omitempty"`

	Requests    uint64            `json:"requests"` // due in the measured window
	OK          uint64            `json:"ok"`
	Errors      uint64            `json:"errors"`
	ErrorKinds  map[string]uint64 `json:"error_kinds"`
	AchievedRPS float64           `json:"achieved_rps"`
	RowsPerS    float64           `json:"rows_per_s"`
	Latency

	// Service is measured from the moment the request was handed to the
	// HTTP client, without any wait for a free connection.
	Service Latency `json:"service"`
	// LagP99Ms is the pacer's own lateness (release − due), 99th percentile.
	LagP99Ms float64 `json:"lag_p99_ms"`
	// ClientCPUSeconds is the CPU time this load generator used.
	ClientCPUSeconds float64 `json:"client_cpu_s"`

	Ingest *IngestSummary `json:"ingest,omitempty"`
	Server *ServerSummary `json:"server,omitempty"`
	// Busy splits the predictions by whether a server was training or
	// swapping bundles when they were released; nil when neither happened
	// or nothing was scraped.
	Busy *BusySummary `json:"while_busy,omitempty"`

	// Runs holds each run when this summary Combines several.
	Runs []*Summary `json:"runs,omitempty"`
}

// Latency is a set of percentiles in milliseconds.
type Latency struct {
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
}

func newLatency(h *Histogram) Latency {
	return Latency{
		MeanMs: ms(h.Mean()), P50Ms: ms(h.Quantile(0.5)), P90Ms: ms(h.Quantile(0.9)),
		P99Ms: ms(h.Quantile(0.99)), P999Ms: ms(h.Quantile(0.999)), MaxMs: ms(h.Max()),
	}
}

// IngestSummary is the ingestion side of a run.
type IngestSummary struct {
	TargetSamplesPerS float64           `json:"target_samples_per_s"`
	Batch             int               `json:"batch"`
	Batches           uint64            `json:"batches"` // due in the measured window
	OK                uint64            `json:"ok"`
	Errors            uint64            `json:"errors"`
	ErrorKinds        map[string]uint64 `json:"error_kinds"`
	SamplesAcked      uint64            `json:"samples_acked"`
	// AckedSamplesPerS counts samples the trainer acknowledged as durably
	// stored (its "accepted"), per second of the window.
	AckedSamplesPerS float64 `json:"acked_samples_per_s"`
	Latency
}

// ServerSummary is what the servers reported about themselves during the
// run, from their /metrics and the trainer's /status.
type ServerSummary struct {
	PredictorRSSMaxMB float64 `json:"predictor_rss_max_mb,omitempty"`
	TrainerRSSMaxMB   float64 `json:"trainer_rss_max_mb,omitempty"`
	// CPU seconds each server used from the first scrape (before the load)
	// to the last (after it): with the requests served, the cost of one
	// request, a figure a busy shared machine distorts far less than
	// latency.
	PredictorCPUSeconds float64 `json:"predictor_cpu_s"`
	TrainerCPUSeconds   float64 `json:"trainer_cpu_s"`
	// ServerP50Ms and ServerP99Ms are the predictor's own view of the
	// load's route (its headroom_http_request_duration_seconds histogram
	// over the window): the upper bound of the bucket holding the quantile,
	// -1 when unknown or past the last bucket. Beside the client's figures
	// they separate the server's time from the machine's queueing.
	ServerP50Ms float64 `json:"server_p50_ms_at_most"`
	ServerP99Ms float64 `json:"server_p99_ms_at_most"`
	// BundleSwaps counts changes of the predictor's bundle version.
	BundleSwaps int `json:"bundle_swaps"`
	// TrainingRuns counts the trainer's runs per target during the run;
	// TrainingSeconds lists the durations seen (one per scrape that saw a
	// new run, so runs faster than the scrape interval can be missed).
	TrainingRuns    map[string]int       `json:"training_runs,omitempty"`
	TrainingSeconds map[string][]float64 `json:"training_seconds,omitempty"`
	// StoredSamples is the trainer's training samples per target at the end.
	StoredSamples map[string]int `json:"stored_samples,omitempty"`
	ScrapeErrors  int            `json:"scrape_errors"`
}

func (s *Summary) fillPredict(t *tally, window time.Duration) {
	s.WindowS = window.Seconds()
	s.OK = t.ok
	s.ErrorKinds = t.errs
	s.Errors = sum(t.errs)
	s.Requests = s.OK + s.Errors
	s.AchievedRPS = float64(t.ok) / window.Seconds()
	s.RowsPerS = float64(t.units) / window.Seconds()
	s.Latency = newLatency(&t.latency)
	s.Service = newLatency(&t.service)
	s.LagP99Ms = ms(t.lag.Quantile(0.99))
}

func newIngestSummary(cfg Config, t *tally, window time.Duration) *IngestSummary {
	errs := sum(t.errs)
	return &IngestSummary{
		TargetSamplesPerS: cfg.IngestRate, Batch: cfg.IngestBatch,
		Batches: t.ok + errs, OK: t.ok, Errors: errs, ErrorKinds: t.errs,
		SamplesAcked: t.units, AckedSamplesPerS: float64(t.units) / window.Seconds(),
		Latency: newLatency(&t.latency),
	}
}

func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// WriteText prints the summary for a person.
func (s *Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	if len(s.Runs) > 1 {
		fmt.Fprintf(&b, "median of %d runs (counts are totals, memory the largest of any run)\n", len(s.Runs))
		for i, r := range s.Runs {
			fmt.Fprintf(&b, "  run %d:", i+1)
			if r.TargetRPS > 0 {
				fmt.Fprintf(&b, " %.1f req/s, p50 %.3f p99 %.3f p99.9 %.3f ms, errors %d;", r.AchievedRPS, r.P50Ms, r.P99Ms, r.P999Ms, r.Errors)
			}
			if r.Busy != nil {
				fmt.Fprintf(&b, " p99 busy %.3f / outside %.3f ms;", r.Busy.P99Ms, r.Busy.Outside.P99Ms)
			}
			if r.Ingest != nil {
				fmt.Fprintf(&b, " ingest %.0f samples/s, errors %d;", r.Ingest.AckedSamplesPerS, r.Ingest.Errors)
			}
			b.WriteString("\n")
		}
	}
	if s.TargetRPS > 0 {
		fmt.Fprintf(&b, "predict  %s%s  %d rows/request  target %.0f req/s for %.0fs (+%.0fs warm-up), %d connections\n",
			s.PredictorURL, s.Path, s.Rows, s.TargetRPS, s.DurationS, s.WarmupS, s.Concurrency)
		fmt.Fprintf(&b, "  achieved %.1f req/s (%.0f rows/s)  ok %d  errors %d%s\n",
			s.AchievedRPS, s.RowsPerS, s.OK, s.Errors, kinds(s.ErrorKinds))
		writeLatency(&b, "latency", s.Latency)
		writeLatency(&b, "service", s.Service)
		fmt.Fprintf(&b, "  pacer lag p99 %.3f ms  load generator CPU %.2f s\n", s.LagP99Ms, s.ClientCPUSeconds)
	}
	if bs := s.Busy; bs != nil {
		truncated := ""
		if bs.Truncated {
			truncated = " (the first of them: timeline full)"
		}
		fmt.Fprintf(&b, "while busy  %d training runs, %d bundle swaps: %.1f s, %d requests%s\n",
			bs.Training.Spans, bs.Swaps.Spans, bs.Seconds, bs.Requests, truncated)
		writeLatency(&b, "busy", bs.Latency)
		writeLatency(&b, "training", bs.Training.Latency)
		writeLatency(&b, "swaps", bs.Swaps.Latency)
		writeLatency(&b, "outside", bs.Outside)
		fmt.Fprintf(&b, "  p99 busy / outside %.2fx\n", bs.P99Ratio)
	}
	if in := s.Ingest; in != nil {
		fmt.Fprintf(&b, "ingest   target %.0f samples/s in batches of %d\n", in.TargetSamplesPerS, in.Batch)
		fmt.Fprintf(&b, "  acknowledged %d samples (%.0f/s)  batches ok %d  errors %d%s\n",
			in.SamplesAcked, in.AckedSamplesPerS, in.OK, in.Errors, kinds(in.ErrorKinds))
		writeLatency(&b, "latency", in.Latency)
	}
	if sv := s.Server; sv != nil {
		fmt.Fprintf(&b, "servers  predictor RSS max %.1f MB, CPU %.2f s  trainer RSS max %.1f MB, CPU %.2f s  bundle swaps %d  scrape errors %d\n",
			sv.PredictorRSSMaxMB, sv.PredictorCPUSeconds, sv.TrainerRSSMaxMB, sv.TrainerCPUSeconds, sv.BundleSwaps, sv.ScrapeErrors)
		if sv.PredictorCPUSeconds > 0 && s.OK > 0 {
			fmt.Fprintf(&b, "  predictor CPU per request %.1f µs\n", sv.PredictorCPUSeconds/float64(s.OK)*1e6)
		}
		if sv.ServerP99Ms > 0 {
			fmt.Fprintf(&b, "  predictor's own latency histogram: p50 ≤ %g ms, p99 ≤ %g ms\n", sv.ServerP50Ms, sv.ServerP99Ms)
		}
		for _, tg := range slices.Sorted(maps.Keys(sv.TrainingRuns)) {
			fmt.Fprintf(&b, "  training %s: %d runs, seconds %v\n", tg, sv.TrainingRuns[tg], sv.TrainingSeconds[tg])
		}
		if len(sv.StoredSamples) > 0 {
			fmt.Fprintf(&b, "  stored training samples %v\n", sv.StoredSamples)
		}
	}
	if s.Interrupted {
		b.WriteString("interrupted before the schedule ended\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeLatency(b *strings.Builder, name string, l Latency) {
	fmt.Fprintf(b, "  %s ms: mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n",
		name, l.MeanMs, l.P50Ms, l.P90Ms, l.P99Ms, l.P999Ms, l.MaxMs)
}

func kinds(m map[string]uint64) string {
	if len(m) == 0 {
		return ""
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// Combine summarises several runs of one configuration, the way a noisy
// shared machine should be reported: rates, latencies and CPU times are the
// median over the runs, counts (requests, errors, samples) are totals, and
// memory is the largest seen. Runs keeps every run. It returns nil for no
// runs.
func Combine(runs []*Summary) *Summary {
	if len(runs) == 0 {
		return nil
	}
	out := *runs[0]
	out.Runs = runs
	med := func(f func(*Summary) float64) float64 { return median(collect(runs, f)) }
	out.WindowS = med(func(s *Summary) float64 { return s.WindowS })
	out.Requests, out.OK, out.Errors, out.ErrorKinds = 0, 0, 0, map[string]uint64{}
	for _, r := range runs {
		out.Requests += r.Requests
		out.OK += r.OK
		out.Errors += r.Errors
		for k, v := range r.ErrorKinds {
			out.ErrorKinds[k] += v
		}
		out.Interrupted = out.Interrupted || r.Interrupted
	}
	out.AchievedRPS = med(func(s *Summary) float64 { return s.AchievedRPS })
	out.RowsPerS = med(func(s *Summary) float64 { return s.RowsPerS })
	out.Latency = medianLatency(runs, func(s *Summary) Latency { return s.Latency })
	out.Service = medianLatency(runs, func(s *Summary) Latency { return s.Service })
	out.LagP99Ms = med(func(s *Summary) float64 { return s.LagP99Ms })
	out.ClientCPUSeconds = med(func(s *Summary) float64 { return s.ClientCPUSeconds })

	if runs[0].Ingest != nil {
		in := *runs[0].Ingest
		in.Batches, in.OK, in.Errors, in.SamplesAcked, in.ErrorKinds = 0, 0, 0, 0, map[string]uint64{}
		var ins []*Summary
		for _, r := range runs {
			if r.Ingest == nil {
				continue
			}
			ins = append(ins, r)
			in.Batches += r.Ingest.Batches
			in.OK += r.Ingest.OK
			in.Errors += r.Ingest.Errors
			in.SamplesAcked += r.Ingest.SamplesAcked
			for k, v := range r.Ingest.ErrorKinds {
				in.ErrorKinds[k] += v
			}
		}
		in.AckedSamplesPerS = median(collect(ins, func(s *Summary) float64 { return s.Ingest.AckedSamplesPerS }))
		in.Latency = medianLatency(ins, func(s *Summary) Latency { return s.Ingest.Latency })
		out.Ingest = &in
	}

	var busy []*Summary
	for _, r := range runs {
		if r.Busy != nil {
			busy = append(busy, r)
		}
	}
	if len(busy) > 0 {
		bs := BusySummary{
			Latency: medianLatency(busy, func(s *Summary) Latency { return s.Busy.Latency }),
			Outside: medianLatency(busy, func(s *Summary) Latency { return s.Busy.Outside }),
			// The median of each run's own ratio: the runs' noise differs.
			P99Ratio: median(collect(busy, func(s *Summary) float64 { return s.Busy.P99Ratio })),
		}
		part := func(f func(*BusySummary) BusyPart) BusyPart {
			var p BusyPart
			var with []*Summary // runs with requests in this kind of span
			for _, r := range busy {
				p.Spans += f(r.Busy).Spans
				p.Seconds += f(r.Busy).Seconds
				p.Requests += f(r.Busy).Requests
				if f(r.Busy).Requests > 0 {
					with = append(with, r)
				}
			}
			if len(with) > 0 {
				p.Latency = medianLatency(with, func(s *Summary) Latency { return f(s.Busy).Latency })
			}
			return p
		}
		bs.Training = part(func(b *BusySummary) BusyPart { return b.Training })
		bs.Swaps = part(func(b *BusySummary) BusyPart { return b.Swaps })
		for _, r := range busy {
			bs.Seconds += r.Busy.Seconds
			bs.Requests += r.Busy.Requests
			bs.Truncated = bs.Truncated || r.Busy.Truncated
		}
		out.Busy = &bs
	}

	if runs[0].Server != nil {
		sv := *runs[0].Server
		var svs []*Summary
		sv.TrainingRuns, sv.TrainingSeconds, sv.BundleSwaps, sv.ScrapeErrors = map[string]int{}, map[string][]float64{}, 0, 0
		for _, r := range runs {
			if r.Server == nil {
				continue
			}
			svs = append(svs, r)
			sv.PredictorRSSMaxMB = max(sv.PredictorRSSMaxMB, r.Server.PredictorRSSMaxMB)
			sv.TrainerRSSMaxMB = max(sv.TrainerRSSMaxMB, r.Server.TrainerRSSMaxMB)
			sv.BundleSwaps += r.Server.BundleSwaps
			sv.ScrapeErrors += r.Server.ScrapeErrors
			for k, v := range r.Server.TrainingRuns {
				sv.TrainingRuns[k] += v
			}
			for k, v := range r.Server.TrainingSeconds {
				sv.TrainingSeconds[k] = append(sv.TrainingSeconds[k], v...)
			}
			sv.StoredSamples = r.Server.StoredSamples // the last run's
		}
		sv.PredictorCPUSeconds = median(collect(svs, func(s *Summary) float64 { return s.Server.PredictorCPUSeconds }))
		sv.ServerP50Ms = median(collect(svs, func(s *Summary) float64 { return s.Server.ServerP50Ms }))
		sv.ServerP99Ms = median(collect(svs, func(s *Summary) float64 { return s.Server.ServerP99Ms }))
		sv.TrainerCPUSeconds = median(collect(svs, func(s *Summary) float64 { return s.Server.TrainerCPUSeconds }))
		out.Server = &sv
	}
	return &out
}

func collect(runs []*Summary, f func(*Summary) float64) []float64 {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	return v
}

func medianLatency(runs []*Summary, f func(*Summary) Latency) Latency {
	field := func(g func(Latency) float64) float64 {
		return median(collect(runs, func(s *Summary) float64 { return g(f(s)) }))
	}
	return Latency{
		MeanMs: field(func(l Latency) float64 { return l.MeanMs }),
		P50Ms:  field(func(l Latency) float64 { return l.P50Ms }),
		P90Ms:  field(func(l Latency) float64 { return l.P90Ms }),
		P99Ms:  field(func(l Latency) float64 { return l.P99Ms }),
		P999Ms: field(func(l Latency) float64 { return l.P999Ms }),
		MaxMs:  field(func(l Latency) float64 { return l.MaxMs }),
	}
}

// median of v (the mean of the middle two for an even count); 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
