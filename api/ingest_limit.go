package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
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
// once, by count and by the body bytes they hold. An upload takes its place
// once its body has arrived, reserving the body's length: one that reserved
// its declared length before reading let two clients declaring 64 MB and
// sending a byte a second refuse every other upload for as long as they
// liked (issue 11 row 5). An upload that does not fit
// waits, first come first served, for up to the wait, then gets 503 with
// Retry-After: the reference had no bound at all (docs/PROTOCOL.md §9 item 18).
//
// Invariant, under mu: uploads ≤ maxUploads and bytes ≤ maxBytes; a waiter
// is either in queue or has been granted (its ready channel closed and its
// reservation counted), never both.
type ingestLimiter struct {
	maxUploads int
	maxBytes   int64
	wait       time.Duration
	shed       prometheus.Counter
	waiting    prometheus.Gauge // len(queue)

	mu      sync.Mutex
	uploads int
	bytes   int64
	queue   []*ingestWaiter
}

type ingestWaiter struct {
	n     int64
	ready chan struct{}
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
	l := &ingestLimiter{
		maxUploads: maxUploads,
		maxBytes:   maxBytes,
		wait:       wait,
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "headroom_ingest_shed_total",
			Help: "Training uploads refused with 503 because the concurrent-ingest limits stayed full for the whole wait.",
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "headroom_ingest_waiting",
			Help: "Training uploads waiting for room under the concurrent-ingest limits.",
		}),
	}
	reg.MustRegister(l.shed, l.waiting)
	return l
}

// reserve takes room for one upload of n body bytes (clamped to the byte
// limit, so that any upload can run alone), waiting until ctx ends. It
// returns the bytes reserved, to give back with free, and whether it got
// them.
func (l *ingestLimiter) reserve(ctx context.Context, n int64) (int64, bool) {
	n = min(max(n, 0), l.maxBytes)
	l.mu.Lock()
	if len(l.queue) == 0 && l.fits(n) {
		l.take(n)
		l.mu.Unlock()
		return n, true
	}
	w := &ingestWaiter{n: n, ready: make(chan struct{})}
	l.queue = append(l.queue, w)
	l.waiting.Set(float64(len(l.queue)))
	l.mu.Unlock()

	select {
	case <-w.ready:
		return n, true
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-w.ready: // granted while ctx ended: keep it
		return n, true
	default:
	}
	for i, q := range l.queue {
		if q == w {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			l.waiting.Set(float64(len(l.queue)))
			break
		}
	}
	l.grant() // w may have been holding back smaller waiters behind it
	return 0, false
}

// free gives back a reservation of n bytes and admits the waiters that now
// fit.
func (l *ingestLimiter) free(n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.uploads--
	l.bytes -= n
	l.grant()
}

func (l *ingestLimiter) fits(n int64) bool {
	return l.uploads < l.maxUploads && l.bytes+n <= l.maxBytes
}

func (l *ingestLimiter) take(n int64) {
	l.uploads++
	l.bytes += n
}

// grant admits waiters in arrival order while the first fits. Called with
// mu held.
func (l *ingestLimiter) grant() {
	for len(l.queue) > 0 && l.fits(l.queue[0].n) {
		w := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		l.take(w.n)
		close(w.ready)
		l.waiting.Set(float64(len(l.queue)))
	}
}

// acquire reserves room for an upload whose body of n bytes has arrived,
// or answers 503 and returns false when none frees up within the wait or
// the client goes away. A true return must be paired with free of the
// returned bytes.
func (l *ingestLimiter) acquire(c *gin.Context, n int64) (int64, bool) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), l.wait)
	defer cancel()
	if got, ok := l.reserve(ctx, n); ok {
		return got, true
	}
	l.shed.Inc()
	c.Header("Retry-After", "1")
	writeDetail(c, http.StatusServiceUnavailable, fmt.Sprintf(
		"too many concurrent training uploads (at most %d or %d body bytes at once, waited %s); nothing from this request was stored, retry later",
		l.maxUploads, l.maxBytes, l.wait))
	return 0, false
}

// DefaultMaxIngestPerClient is TrainerOptions.MaxIngestPerClient's default.
const DefaultMaxIngestPerClient = 32

// clientLimiter bounds the uploads of one client address whose bodies are
// still arriving: each holds a goroutine and the bytes received so far, and
// without a bound one client could open them by the thousand.
//
// It also bounds the bytes all arriving bodies hold together (maxBytes): a
// body takes its place in ingestLimiter only once it has arrived, so
// without this bound 32 clients sending 64 MiB bodies at full speed would
// hold 2 GiB before any of them was admitted. A body that would pass the
// bound fails at once with 503; a slow one holds only what it has sent.
type clientLimiter struct {
	max      int
	maxBytes int64
	arriving atomic.Int64 // bytes received by bodies still arriving
	mu       sync.Mutex
	n        map[string]int
}

func newClientLimiter(max int, maxBytes int64) *clientLimiter {
	if max <= 0 {
		max = DefaultMaxIngestPerClient
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxIngestBytes
	}
	return &clientLimiter{max: max, maxBytes: maxBytes, n: map[string]int{}}
}

// errArrivingFull is returned by a metered body past the arriving bound.
var errArrivingFull = errors.New("the training uploads arriving at once hold the most body bytes allowed")

// meteredBody charges the bytes it reads to the limiter's arriving total.
type meteredBody struct {
	io.ReadCloser
	l    *clientLimiter
	read int64
}

// Read fails a body whose bytes would take the total past the bound,
// without counting them: compare-and-swap, so that the body that would
// pass the bound fails, not another one reading at the same moment.
func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	for {
		cur := b.l.arriving.Load()
		if cur+int64(n) > b.l.maxBytes {
			return n, errArrivingFull
		}
		if b.l.arriving.CompareAndSwap(cur, cur+int64(n)) {
			break
		}
	}
	b.read += int64(n)
	return n, err
}

// meter makes the request's body count against the arriving bound; the
// returned function gives the bytes back once the body is done with.
func (l *clientLimiter) meter(c *gin.Context) (release func()) {
	b := &meteredBody{ReadCloser: c.Request.Body, l: l}
	c.Request.Body = b
	return func() { l.arriving.Add(-b.read) }
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
	l.mu.Lock()
	ok := l.n[addr] < l.max
	if ok {
		l.n[addr]++
	}
	l.mu.Unlock()
	if !ok {
		c.Header("Retry-After", "1")
		writeDetail(c, http.StatusTooManyRequests, fmt.Sprintf(
			"%d uploads from %s are still sending their bodies, the most one client may have; nothing from this request was stored, retry later",
			l.max, addr))
	}
	return ok
}

func (l *clientLimiter) leave(c *gin.Context) {
	addr := clientAddress(c)
	l.mu.Lock()
	if l.n[addr]--; l.n[addr] <= 0 {
		delete(l.n, addr) // the map holds only addresses with uploads
	}
	l.mu.Unlock()
}
