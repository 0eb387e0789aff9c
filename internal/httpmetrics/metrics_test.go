package httpmetrics

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The cached series count exactly what WithLabelValues would.
func TestHTTPMetricsCountPerSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, "test")
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(m.Middleware())
	r.GET("/ok", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	r.POST("/ok", func(c *gin.Context) { c.String(http.StatusTeapot, "no") })
	calls := []struct {
		method, path string
		n            int
	}{{"GET", "/ok", 5}, {"POST", "/ok", 3}, {"GET", "/missing", 2}}
	for _, call := range calls {
		for range call.n {
			r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(call.method, call.path, nil))
		}
	}
	for _, want := range []struct {
		route, method, code string
		n                   float64
	}{{"/ok", "GET", "200", 5}, {"/ok", "POST", "418", 3}, {"unmatched", "GET", "404", 2}} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues(want.route, want.method, want.code)); got != want.n {
			t.Errorf("%s %s %s: %v requests, want %v", want.method, want.route, want.code, got, want.n)
		}
	}
	if got := testutil.CollectAndCount(m.latency); got != 2 {
		t.Errorf("%d latency series, want 2 (/ok and unmatched)", got)
	}
	if n := len(*m.series.Load()); n != 3 {
		t.Errorf("%d cached series, want 3", n)
	}
}

func TestHTTPMetricsCacheIsBounded(t *testing.T) {
	m := New(prometheus.NewRegistry(), "test")
	for i := range maxCachedSeries + 50 {
		m.lookup(seriesKey{route: "unmatched", method: fmt.Sprintf("M%d", i), code: 404}).requests.Inc()
	}
	if n := len(*m.series.Load()); n != maxCachedSeries {
		t.Fatalf("%d cached series, want the bound %d", n, maxCachedSeries)
	}
	// Past the bound, series still count.
	if got := testutil.ToFloat64(m.requests.WithLabelValues("unmatched", fmt.Sprintf("M%d", maxCachedSeries+10), "404")); got != 1 {
		t.Fatalf("uncached series counted %v, want 1", got)
	}
}

// Issue 11 row 8: 300 requests with invented methods made 300 series of
// headroom_http_requests_total, with no token needed. Methods outside the
// standard set count under one label value.
func TestLabelsAreBounded(t *testing.T) {
	m := New(prometheus.NewRegistry(), "test")
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(m.Middleware())
	r.GET("/ok", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	for i := range 300 {
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(fmt.Sprintf("INVENTED%d", i), "/ok", nil))
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(fmt.Sprintf("X%d", i), fmt.Sprintf("/nowhere/%d", i), nil))
	}
	for _, method := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"} {
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, "/ok", nil))
	}
	if n := testutil.CollectAndCount(m.requests); n > 10 {
		t.Errorf("%d request series after 600 requests with invented methods and paths, want at most 10", n)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("unmatched", "other", "404")); got != 600 {
		t.Errorf("invented methods counted %v under route=\"unmatched\", method=\"other\", want 600", got)
	}
}
