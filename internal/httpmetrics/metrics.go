// Package httpmetrics counts a gin server's requests and their latency per
// route, for Prometheus, without a lock or an allocation per request.
package httpmetrics

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts requests and their latency per route.
//
// Resolving a labelled series (WithLabelValues) hashes the label values and
// takes a read lock on every request; the series a server answers with are
// few, so they are resolved once and kept in an immutable map that is
// replaced, copy on write, when a new one appears. Lookups take no lock and
// allocate nothing.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec

	mu     sync.Mutex // serialises additions to series
	series atomic.Pointer[map[seriesKey]httpSeries]
}

// seriesKey names one request series; route is gin's full path
// ("unmatched" for none), so its values are bounded by the routes.
type seriesKey struct {
	route, method string
	code          int
}

type httpSeries struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

// maxCachedSeries bounds the cache. Routes, methods (methodLabel) and codes
// (statusLabel) are bounded, so the series are too; the bound is a second
// line of defence, past which series are resolved on every request.
const maxCachedSeries = 256

// New registers the request counter and latency histogram of one server
// (the label server="<server>") with reg.
func New(reg prometheus.Registerer, server string) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "headroom_http_requests_total",
			Help:        "HTTP requests by route, method and status code.",
			ConstLabels: prometheus.Labels{"server": server},
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "headroom_http_request_duration_seconds",
			Help:        "Time from request start to response written, by route.",
			ConstLabels: prometheus.Labels{"server": server},
			Buckets:     []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"route"}),
	}
	m.series.Store(&map[seriesKey]httpSeries{})
	reg.MustRegister(m.requests, m.latency)
	return m
}

// lookup returns the series for k, resolving and caching it on first use.
func (m *Metrics) lookup(k seriesKey) httpSeries {
	if s, ok := (*m.series.Load())[k]; ok {
		return s
	}
	s := httpSeries{
		requests: m.requests.WithLabelValues(k.route, k.method, strconv.Itoa(k.code)),
		latency:  m.latency.WithLabelValues(k.route),
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.series.Load()
	if _, ok := old[k]; !ok && len(old) < maxCachedSeries {
		next := make(map[seriesKey]httpSeries, len(old)+1)
		for key, v := range old {
			next[key] = v
		}
		next[k] = s
		m.series.Store(&next)
	}
	return s
}

// Middleware counts each request under gin's route pattern ("unmatched"
// for none), its method and its status code.
// methodLabel is the method as a metric label: the standard methods as
// they are, every other one as "other". A client may send any token as a
// method, and each became a series of its own: 300 requests with invented
// methods made 300 series (issue 11 row 8).
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "other"
}

// statusLabel keeps the status code label within the codes HTTP defines
// (100-599), so that label is bounded too; 0 otherwise.
func statusLabel(code int) int {
	if code < 100 || code > 599 {
		return 0
	}
	return code
}

func (m *Metrics) Middleware() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := c.FullPath()
		if route == "" {
			route = "unmatched"
		}
		s := m.lookup(seriesKey{route: route, method: methodLabel(c.Request.Method), code: statusLabel(c.Writer.Status())})
		s.requests.Inc()
		s.latency.Observe(time.Since(start).Seconds())
	}
}
