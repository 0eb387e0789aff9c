package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for TrainerOptions.MaxConcurrentIngest and IngestWait.
const (
	DefaultMaxConcurrentIngest = 4
	DefaultIngestWait          = time.Second
)

// ingestLimiter bounds the training uploads being read, decoded and stored at
// once. Each may hold a body of up to Limits.MaxBodyBytes and its decoded
// samples, and every commit is serialised by the store anyway, so admitting
// more only multiplies memory while they queue for the same fsync. An upload
// over the limit waits briefly for a slot, then gets 503 with Retry-After:
// the reference had no bound at all (spec §7 item 18).
type ingestLimiter struct {
	slots chan struct{}
	wait  time.Duration
	shed  prometheus.Counter
}

func newIngestLimiter(limit int, wait time.Duration, reg prometheus.Registerer) *ingestLimiter {
	if limit <= 0 {
		limit = DefaultMaxConcurrentIngest
	}
	if wait <= 0 {
		wait = DefaultIngestWait
	}
	l := &ingestLimiter{
		slots: make(chan struct{}, limit),
		wait:  wait,
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "headroom_ingest_shed_total",
			Help: "Training uploads refused with 503 because the concurrent-ingest limit stayed full for the whole wait.",
		}),
	}
	reg.MustRegister(l.shed)
	return l
}

// acquire takes a slot, or answers 503 and returns false when none frees up
// within the wait or the client goes away. A true return must be paired
// with release.
func (l *ingestLimiter) acquire(c *gin.Context) bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	timer := time.NewTimer(l.wait)
	defer timer.Stop()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-timer.C:
	case <-c.Request.Context().Done():
	}
	l.shed.Inc()
	c.Header("Retry-After", "1")
	writeDetail(c, http.StatusServiceUnavailable, fmt.Sprintf(
		"too many concurrent training uploads (limit %d, waited %s); nothing from this request was stored, retry later",
		cap(l.slots), l.wait))
	return false
}

func (l *ingestLimiter) release() { <-l.slots }
