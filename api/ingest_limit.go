package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/headroomhq/headroom/internal/admission"
)

// Defaults for TrainerOptions.MaxConcurrentIngest, MaxIngestBytes and
// IngestWait.
//
// Sixteen uploads at once, not fewer, because the store commits the uploads
// that wait for it together (group commit) and a commit costs about the same
// however many uploads it holds. Into the default scheme's full store, each
// upload's 1,000 samples spread over all its buckets, four admitted uploads
// acknowledged about 35,000 samples/s with nothing else running; eight,
// 40,500 and sixteen the 50,000 asked for while 5,000 prediction requests a
// second were served on the same two cores (docs/PERFORMANCE.md).
const (
	DefaultMaxConcurrentIngest = 16
	DefaultMaxIngestBytes      = 128 << 20
	DefaultIngestWait          = time.Second
)

// ingestLimiter bounds the training uploads being decoded and stored at
// once, by count and by the body bytes they hold (an admission.Queue). An
// upload takes its place once its body has arrived, reserving the body's
// length: one that reserved its declared length before reading let two
// clients declaring 64 MB and sending a byte a second refuse every other
// upload for as long as they liked (issue 11 row 5). An upload that does
// not fit waits, first come first served, for up to the wait, then gets 503
// with Retry-After: the reference had no bound at all (docs/PROTOCOL.md §9
// item 18).
type ingestLimiter struct {
	*admission.Queue
	wait time.Duration
	shed prometheus.Counter
}

func newIngestLimiter(maxUploads int, maxBytes int64, wait time.Duration, reg prometheus.Registerer) *ingestLimiter {
	if maxUploads <= 0 {
		maxUploads = DefaultMaxConcurrentIngest
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxIngestBytes
	}
	if wait <= 0 {
		wait = DefaultIngestWait
	}
	shed := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "headroom_ingest_shed_total",
		Help: "Training uploads refused with 503 because the concurrent-ingest limits stayed full for the whole wait.",
	})
	waiting := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "headroom_ingest_waiting",
		Help: "Training uploads waiting for room under the concurrent-ingest limits.",
	})
	reg.MustRegister(shed, waiting)
	return &ingestLimiter{Queue: admission.NewQueue(maxUploads, maxBytes, waiting), wait: wait, shed: shed}
}

// acquire reserves room for an upload whose body of n bytes has arrived,
// or answers 503 and returns false when none frees up within the wait or
// the client goes away. A true return must be paired with Release of the
// returned bytes.
func (l *ingestLimiter) acquire(c *gin.Context, n int64) (int64, bool) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), l.wait)
	defer cancel()
	if got, ok := l.Reserve(ctx, n); ok {
		return got, true
	}
	l.shed.Inc()
	maxUploads, maxBytes := l.Limits()
	c.Header("Retry-After", "1")
	writeDetail(c, http.StatusServiceUnavailable, fmt.Sprintf(
		"too many concurrent training uploads (at most %d or %d body bytes at once, waited %s); nothing from this request was stored, retry later",
		maxUploads, maxBytes, l.wait))
	return 0, false
}

// DefaultMaxIngestPerClient is TrainerOptions.MaxIngestPerClient's default.
const DefaultMaxIngestPerClient = 32

// clientLimiter bounds the uploads whose bodies are still arriving, per
// client address and by the bytes they hold together (an
// admission.Arrivals, whose byte bound is MaxIngestBytes).
type clientLimiter struct{ *admission.Arrivals }

func newClientLimiter(max int, maxBytes int64) *clientLimiter {
	if max <= 0 {
		max = DefaultMaxIngestPerClient
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxIngestBytes
	}
	return &clientLimiter{admission.NewArrivals(max, maxBytes)}
}

// meter makes the request's body count against the arriving bound; the
// returned function gives the bytes back once the body is done with.
func (l *clientLimiter) meter(c *gin.Context) (release func()) {
	c.Request.Body, release = l.Meter(c.Request.Body)
	return release
}

// clientAddress is the request's peer address without its port.
func clientAddress(c *gin.Context) string {
	host, _, err := net.SplitHostPort(c.Request.RemoteAddr)
	if err != nil {
		return c.Request.RemoteAddr
	}
	return host
}

// enter counts the request against its address, or answers 429 and returns
// false when the address has its maximum; leave must follow a true return.
func (l *clientLimiter) enter(c *gin.Context) bool {
	addr := clientAddress(c)
	if l.Enter(addr) == nil {
		return true
	}
	c.Header("Retry-After", "1")
	writeDetail(c, http.StatusTooManyRequests, fmt.Sprintf(
		"%d uploads from %s are still sending their bodies, the most one client may have; nothing from this request was stored, retry later",
		l.MaxPerClient(), addr))
	return false
}

func (l *clientLimiter) leave(c *gin.Context) { l.Leave(clientAddress(c)) }
