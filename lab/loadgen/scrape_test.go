package loadgen

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
)

// serverMetrics is what a server's /metrics shows: a latency histogram
// like api's, with observations per route, plus the process collector and
// the predictor's bundle gauge, written by the Prometheus library itself.
func serverMetrics(t *testing.T, observations map[string][]float64, bundleVersion float64) []byte {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:        routeHistogram,
		Help:        "Time from request start to response written, by route.",
		ConstLabels: prometheus.Labels{"server": "predictor"},
		Buckets:     []float64{.001, .005, .01},
	}, []string{"route"})
	version := prometheus.NewGauge(prometheus.GaugeOpts{Name: "headroom_predictor_bundle_version", Help: "version"})
	reg.MustRegister(latency, version, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for route, seconds := range observations {
		for _, v := range seconds {
			latency.WithLabelValues(route).Observe(v)
		}
	}
	version.Set(bundleVersion)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range families {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// repeat is n copies of v.
func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestRouteHistogramQuantiles(t *testing.T) {
	const route = "/predict/bulk/strict"
	early := map[string][]float64{route: repeat(0.0005, 10), "/metrics": repeat(0.02, 999)}
	later := map[string][]float64{route: slices.Concat(repeat(0.0005, 10+90), repeat(0.004, 9), repeat(0.008, 1)),
		"/metrics": repeat(0.02, 999)}
	parse := func(obs map[string][]float64) exposition {
		m, err := parseExposition(serverMetrics(t, obs, 7))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	first, last := parse(early).routeHistogram(route), parse(later).routeHistogram(route)
	if len(first) != 4 || first[math.Inf(1)] != 10 || last[math.Inf(1)] != 110 || last[0.001] != 100 {
		t.Fatalf("parsed %v, %v", first, last)
	}
	// Of the 100 requests in between: 90 within 1 ms, 99 within 5 ms.
	for _, tc := range []struct{ q, want float64 }{{0.5, 0.001}, {0.9, 0.001}, {0.99, 0.005}, {1, 0.01}} {
		if got := histogramQuantile(first, last, tc.q); got != tc.want {
			t.Errorf("q%v = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := histogramQuantile(last, last, 0.5); !math.IsNaN(got) {
		t.Errorf("no requests: %v, want NaN", got)
	}
	if parse(later).routeHistogram("/predict") != nil {
		t.Error("matched a route by prefix")
	}
}

func TestExpositionValues(t *testing.T) {
	m, err := parseExposition(serverMetrics(t, map[string][]float64{"/x": {0.1}}, 7))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m.value("headroom_predictor_bundle_version"); !ok || v != 7 {
		t.Errorf("bundle version %v, %v; want 7", v, ok)
	}
	if rss, ok := m.value("process_resident_memory_bytes"); !ok || rss <= 0 {
		t.Errorf("resident memory %v, %v; want > 0 from the process collector", rss, ok)
	}
	if cpu, ok := m.value("process_cpu_seconds_total"); !ok || cpu < 0 {
		t.Errorf("cpu seconds %v, %v", cpu, ok)
	}
	// A labelled series is not an unlabelled value, and a missing one is 0.
	if v, ok := m.value(routeHistogram); ok {
		t.Errorf("histogram read as a value: %v", v)
	}
	if v, ok := m.value("no_such_metric"); ok || m.valueOr0("no_such_metric") != 0 {
		t.Errorf("missing metric: %v, %v", v, ok)
	}
}

// A body that is not the text format is an error (counted as a failed
// scrape), not a scrape of zeros.
func TestParseExpositionRejectsGarbage(t *testing.T) {
	for _, body := range []string{"<html>502 Bad Gateway</html>\n", "metric{unterminated 1\n"} {
		if _, err := parseExposition([]byte(body)); err == nil || !strings.Contains(err.Error(), "parse metrics") {
			t.Errorf("%q: err = %v", body, err)
		}
	}
}
