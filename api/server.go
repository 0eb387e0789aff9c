// Package api is Headroom's HTTP surface: llm-d's wire contract for the
// trainer and the predictor, plus Headroom's own routes. Handlers are thin:
// decoding and validation are pure functions in this package, everything
// else lives in store, trainer and predictor.
package api

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// Limits bound what one request may ask for.
type Limits struct {
	MaxBodyBytes int64 // default 64 MiB
	MaxRows      int   // rows per prediction request, default 10,000
	MaxEntries   int   // entries per ingest request, default 100,000
}

func (l *Limits) setDefaults() {
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = 64 << 20
	}
	if l.MaxRows <= 0 {
		l.MaxRows = 10000
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = 100000
	}
}

// Tokens are optional bearer tokens. Router-facing reads (predictions, model
// info) need Read when it is set; writes (ingest, flush, reload) need Write.
// Health, readiness and the root stay open for the kubelet.
type Tokens struct {
	Read  string
	Write string
}

// access classifies a route for Tokens.
type access int

const (
	open access = iota
	readAccess
	writeAccess
)

// requireToken rejects requests without the token of their class. The
// comparison takes constant time so a token cannot be guessed byte by byte
// from response timings. The write token also grants read access.
func requireToken(tokens Tokens, a access) gin.HandlerFunc {
	return func(c *gin.Context) {
		want := tokens.Read
		if a == writeAccess {
			want = tokens.Write
		}
		if a == open || want == "" {
			return
		}
		got := strings.TrimPrefix(c.GetHeader("Authorization"), "Bearer ")
		ok := subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
		if !ok && a == readAccess && tokens.Write != "" {
			ok = subtle.ConstantTimeCompare([]byte(got), []byte(tokens.Write)) == 1
		}
		if !ok {
			c.Header("WWW-Authenticate", `Bearer realm="headroom"`)
			writeDetail(c, http.StatusUnauthorized, "missing or wrong bearer token")
			c.Abort()
		}
	}
}

// newEngine returns a gin engine with the reference's 404 and 405 bodies,
// panic recovery, and per-route metrics.
func newEngine(m *httpMetrics) *gin.Engine {
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.Use(m.middleware(), gin.CustomRecovery(func(c *gin.Context, err any) {
		writeDetail(c, http.StatusInternalServerError, fmt.Sprintf("internal error: %v", err))
	}))
	r.NoRoute(func(c *gin.Context) { writeDetail(c, http.StatusNotFound, "Not Found") })
	r.NoMethod(func(c *gin.Context) { writeDetail(c, http.StatusMethodNotAllowed, "Method Not Allowed") })
	return r
}

// writeDetail answers {"detail": "<msg>"}, the reference's error shape for
// handler errors.
func writeDetail(c *gin.Context, status int, msg string) {
	c.JSON(status, gin.H{"detail": msg})
}

// writeValidation answers 422 {"detail": [...]}.
func writeValidation(c *gin.Context, errs []FieldError) {
	c.JSON(http.StatusUnprocessableEntity, gin.H{"detail": errs})
}

// errBodyTooLarge is returned by readBody past the limit.
var errBodyTooLarge = errors.New("request body too large")

// bodyPool recycles request body buffers on the hot path.
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// readBody reads the request body into a pooled buffer, refusing more than
// limit bytes. The caller must call release when done with the bytes.
func readBody(c *gin.Context, limit int64) (body []byte, release func(), err error) {
	buf := bodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	release = func() {
		if buf.Cap() <= 4<<20 { // do not pin huge buffers
			bodyPool.Put(buf)
		}
	}
	if c.Request.ContentLength > limit {
		return nil, release, errBodyTooLarge
	}
	if c.Request.ContentLength > 0 {
		buf.Grow(int(c.Request.ContentLength))
	}
	n, err := buf.ReadFrom(io.LimitReader(c.Request.Body, limit+1))
	if err != nil {
		return nil, release, fmt.Errorf("read request body: %w", err)
	}
	if n > limit {
		return nil, release, errBodyTooLarge
	}
	return buf.Bytes(), release, nil
}

// readBodyOrFail reads the body and answers the error itself; ok is false
// when the handler must return.
func readBodyOrFail(c *gin.Context, limit int64) ([]byte, func(), bool) {
	body, release, err := readBody(c, limit)
	switch {
	case errors.Is(err, errBodyTooLarge):
		release()
		writeDetail(c, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", limit))
		return nil, nil, false
	case err != nil:
		release()
		writeDetail(c, http.StatusBadRequest, err.Error())
		return nil, nil, false
	}
	return body, release, true
}

// checkContentType refuses bodies declared as something other than JSON.
// A missing Content-Type is accepted, as the reference does.
func checkContentType(c *gin.Context) bool {
	ct := c.GetHeader("Content-Type")
	if ct == "" {
		return true
	}
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	if mt == "application/json" || strings.HasSuffix(mt, "+json") {
		return true
	}
	writeDetail(c, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: send application/json", ct))
	return false
}

// timestamp formats t as RFC 3339 in UTC with a Z, microsecond precision.
func timestamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.999999Z07:00")
}

// nullableTimestamp is timestamp, or nil for the zero time.
func nullableTimestamp(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return timestamp(t)
}

// httpMetrics counts requests and their latency per route.
type httpMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer, server string) *httpMetrics {
	m := &httpMetrics{
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
	reg.MustRegister(m.requests, m.latency)
	return m
}

func (m *httpMetrics) middleware() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := c.FullPath()
		if route == "" {
			route = "unmatched"
		}
		m.requests.WithLabelValues(route, c.Request.Method, strconv.Itoa(c.Writer.Status())).Inc()
		m.latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
	}
}
