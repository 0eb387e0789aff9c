package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scraper reads what the servers say about themselves while the load runs:
// resident memory from /metrics (the Prometheus process collector), the
// predictor's bundle version, and the trainer's training runs from /status.
// It is used by one goroutine at a time.
type scraper struct {
	client                   *http.Client
	predictorURL, trainerURL string

	predictorRSSMax, trainerRSSMax float64
	predictorCPU, trainerCPU       cpuSpan
	// The predictor's own latency histogram for the load's route, at the
	// window's start and at the latest scrape.
	route                 string
	routeFirst, routeLast map[float64]float64 // le → cumulative count
	bundleVersion         float64
	haveVersion           bool
	swaps                 int
	firstRuns, lastRuns   map[string]int
	durations             map[string][]float64
	stored                map[string]int
	errors                int
	// Busy spans (busy.go): the trainer's training runs, and the
	// predictor's bundle loads after the first scrape.
	training, loads []span
	loadedAt        float64 // the predictor's bundle loaded timestamp
}

func newScraper(client *http.Client, predictorURL, trainerURL, route string) *scraper {
	return &scraper{client: client, predictorURL: predictorURL, trainerURL: trainerURL, route: route,
		durations: map[string][]float64{}}
}

// run scrapes every interval until stop closes or ctx ends.
func (s *scraper) run(ctx context.Context, interval time.Duration, stop <-chan struct{}) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-tick.C:
			s.once(ctx)
		}
	}
}

// startWindow scrapes and restarts the servers' CPU clocks and latency
// histogram from here.
func (s *scraper) startWindow(ctx context.Context) {
	s.predictorCPU, s.trainerCPU = cpuSpan{}, cpuSpan{}
	s.routeFirst = nil
	s.once(ctx)
	if s.routeFirst == nil {
		// No request has reached the route yet: every count starts at 0.
		s.routeFirst = map[float64]float64{}
	}
}

// once scrapes every configured server once; failures are counted, not
// fatal: a load run's figures do not depend on them.
func (s *scraper) once(ctx context.Context) {
	if s.predictorURL != "" {
		s.scrapeMetrics(ctx, s.predictorURL, func(m exposition) {
			if h := m.routeHistogram(s.route); h != nil {
				if s.routeFirst == nil {
					s.routeFirst = h
				}
				s.routeLast = h
			}
			s.predictorRSSMax = max(s.predictorRSSMax, m.valueOr0("process_resident_memory_bytes"))
			s.predictorCPU.see(m)
			if v, ok := m.value("headroom_predictor_bundle_loaded_timestamp_seconds"); ok {
				if s.loadedAt != 0 && v != s.loadedAt {
					s.loads = append(s.loads, busySpan(time.Unix(0, int64(v*1e9)), 0))
				}
				s.loadedAt = v
			}
			if v, ok := m.value("headroom_predictor_bundle_version"); ok {
				if s.haveVersion && v != s.bundleVersion {
					s.swaps++
				}
				s.bundleVersion, s.haveVersion = v, true
			}
		})
	}
	if s.trainerURL != "" {
		s.scrapeMetrics(ctx, s.trainerURL, func(m exposition) {
			s.trainerRSSMax = max(s.trainerRSSMax, m.valueOr0("process_resident_memory_bytes"))
			s.trainerCPU.see(m)
		})
		s.scrapeStatus(ctx)
	}
}

// cpuSpan is a process's CPU seconds at its first and latest scrape.
type cpuSpan struct {
	first, last float64
	seen        bool
}

func (c *cpuSpan) see(m exposition) {
	v, ok := m.value("process_cpu_seconds_total")
	if !ok {
		return
	}
	if !c.seen {
		c.first, c.seen = v, true
	}
	c.last = v
}

func (c *cpuSpan) seconds() float64 { return c.last - c.first }

func (s *scraper) get(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return body, nil
}

func (s *scraper) scrapeMetrics(ctx context.Context, base string, use func(exposition)) {
	body, err := s.get(ctx, base+"/metrics")
	if err != nil {
		s.errors++
		return
	}
	m, err := parseExposition(body)
	if err != nil {
		s.errors++
		return
	}
	use(m)
}

// exposition is one scrape of a server's /metrics: its metric families by
// name.
type exposition map[string]*dto.MetricFamily

// parseExposition parses the Prometheus text format with the Prometheus
// library's own parser.
func parseExposition(body []byte) (exposition, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	m, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return m, nil
}

// value is the value of the unlabelled series of a gauge, counter or
// untyped metric, and whether there is one.
func (m exposition) value(name string) (float64, bool) {
	mf := m[name]
	if mf == nil {
		return 0, false
	}
	for _, s := range mf.GetMetric() {
		if len(s.GetLabel()) > 0 {
			continue
		}
		switch {
		case s.Gauge != nil:
			return s.Gauge.GetValue(), true
		case s.Counter != nil:
			return s.Counter.GetValue(), true
		case s.Untyped != nil:
			return s.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// valueOr0 is value, with 0 for a missing series.
func (m exposition) valueOr0(name string) float64 {
	v, _ := m.value(name)
	return v
}

// routeHistogram is the name of the servers' request latency histogram.
const routeHistogram = "headroom_http_request_duration_seconds"

// routeHistogram returns the cumulative bucket counts (upper bound in
// seconds → count, +Inf the total) of the servers' latency histogram for
// route, or nil.
func (m exposition) routeHistogram(route string) map[float64]float64 {
	mf := m[routeHistogram]
	if mf.GetType() != dto.MetricType_HISTOGRAM {
		return nil
	}
	for _, s := range mf.GetMetric() {
		if !hasLabel(s, "route", route) || s.Histogram == nil {
			continue
		}
		h := map[float64]float64{math.Inf(1): float64(s.Histogram.GetSampleCount())}
		for _, b := range s.Histogram.GetBucket() {
			h[b.GetUpperBound()] = float64(b.GetCumulativeCount())
		}
		return h
	}
	return nil
}

func hasLabel(s *dto.Metric, name, value string) bool {
	for _, l := range s.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// histogramQuantile is the upper bound of the bucket holding the q quantile
// of the requests counted between two cumulative snapshots; +Inf when it is
// in the last bucket, NaN when nothing was counted.
func histogramQuantile(first, last map[float64]float64, q float64) float64 {
	bounds := slices.Sorted(maps.Keys(last))
	total := last[math.Inf(1)] - first[math.Inf(1)]
	if total <= 0 {
		return math.NaN()
	}
	for _, b := range bounds {
		if last[b]-first[b] >= q*total {
			return b
		}
	}
	return math.Inf(1)
}

// trainerStatus is the part of the trainer's GET /status the scraper reads.
type trainerStatus struct {
	Training map[string]struct {
		Runs          int       `json:"runs"`
		LastAttempt   time.Time `json:"last_attempt"`
		LastDurationS float64   `json:"last_duration_seconds"`
	} `json:"training"`
	Samples map[string]struct {
		Train int `json:"train"`
	} `json:"samples"`
}

func (s *scraper) scrapeStatus(ctx context.Context) {
	body, err := s.get(ctx, s.trainerURL+"/status")
	if err != nil {
		s.errors++
		return
	}
	var st trainerStatus
	if err := json.Unmarshal(body, &st); err != nil {
		s.errors++
		return
	}
	first := s.firstRuns == nil
	if first {
		s.firstRuns, s.lastRuns = map[string]int{}, map[string]int{}
	}
	for tg, ts := range st.Training {
		if first {
			s.firstRuns[tg] = ts.Runs
		} else if ts.Runs > s.lastRuns[tg] {
			s.durations[tg] = append(s.durations[tg], ts.LastDurationS)
			s.training = append(s.training, busySpan(ts.LastAttempt, time.Duration(ts.LastDurationS*float64(time.Second))))
		}
		s.lastRuns[tg] = ts.Runs
	}
	s.stored = map[string]int{}
	for tg, c := range st.Samples {
		s.stored[tg] = c.Train
	}
}

// bucketMs turns a bucket bound in seconds into milliseconds; -1 stands for
// "beyond the last finite bucket" and for "no requests", which JSON cannot
// carry as Inf or NaN.
func bucketMs(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return -1
	}
	return v * 1000
}

func (s *scraper) summary() *ServerSummary {
	out := &ServerSummary{
		PredictorRSSMaxMB: s.predictorRSSMax / (1 << 20), TrainerRSSMaxMB: s.trainerRSSMax / (1 << 20),
		PredictorCPUSeconds: s.predictorCPU.seconds(), TrainerCPUSeconds: s.trainerCPU.seconds(),
		ServerP50Ms: bucketMs(histogramQuantile(s.routeFirst, s.routeLast, 0.5)),
		ServerP99Ms: bucketMs(histogramQuantile(s.routeFirst, s.routeLast, 0.99)),
		BundleSwaps: s.swaps, StoredSamples: s.stored, ScrapeErrors: s.errors,
	}
	if s.lastRuns != nil {
		out.TrainingRuns = map[string]int{}
		for tg, n := range s.lastRuns {
			out.TrainingRuns[tg] = n - s.firstRuns[tg]
		}
		out.TrainingSeconds = s.durations
	}
	return out
}
