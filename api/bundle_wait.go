package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/internal/admission"
	"github.com/headroomhq/headroom/wire"
)

// GET /model/bundle?wait=D is a long poll: a request that would get a 304
// (its If-None-Match names the bundle in service), or a 404 before the
// first bundle, is held until a new version is published or D has passed.
// Predictors keep one such request open, so a new bundle reaches them the
// moment it is published instead of at their next poll; the poll stays as
// the fallback (predictor.Syncer). "New" is by ETag, not by version: a
// predictor holding v57 of a trainer whose bundles were since wiped is
// answered with the new lineage's v1 (bundle.CheckSuccessor takes it, since
// the lineage began after v57 was made).

// Defaults for TrainerOptions.MaxBundleWatchers and
// MaxBundleWatchersPerClient. A predictor holds one long poll; a
// deployment has a few to a few dozen (the manifests' autoscaler stops at
// ten), so 256 leave room for many trainers' worth of predictors while
// bounding what held polls cost: a goroutine, two buffers and a descriptor
// each, about 17 KB (5,000 held polls took 86 MB and, at the descriptor
// limit, the trainer's ingest with them: issue 26). Sixteen per address
// cover a predictor's restarts and several predictors behind one address
// (sidecars on loopback, a proxy that rewrites sources).
const (
	DefaultMaxBundleWatchers          = 256
	DefaultMaxBundleWatchersPerClient = 16
)

// watchRetryAfter is what a long poll refused for the bounds is told to
// wait: a predictor's periodic poll, every 30 s by default, goes on
// meanwhile, and it is never refused.
const watchRetryAfter = 30 * time.Second

// bundleWait is the request's ?wait= (wire.DecodeBundleWait), answering 422
// itself when the value is refused.
func bundleWait(c *gin.Context) (time.Duration, bool) {
	d, errs := wire.DecodeBundleWait(c.Query("wait"))
	if len(errs) > 0 {
		writeValidation(c, errs)
		return 0, false
	}
	return d, true
}

// awaitBundle returns the current bundle once it is one the client does not
// have (its ETag does not match inm), or when wait has passed, the client
// has gone or the server is draining, whichever comes first. A long poll
// (wait > 0) takes a place under the watcher bounds; when none is free it
// answers the request itself, 429 or 503, and ok is false.
func (s *trainerServer) awaitBundle(c *gin.Context, inm string, wait time.Duration) (pub *bundle.Published, ok bool) {
	if wait > 0 {
		addr := clientAddress(c)
		if err := s.watches.Enter(addr); err != nil {
			s.refuseWatch(c, addr, err)
			return nil, false
		}
		defer s.watches.Leave(addr)
		s.watchers.Inc()
		defer s.watchers.Dec()
	}
	held := func(pub *bundle.Published) bool { return etagMatches(inm, pub.ETag()) }
	return s.t.Await(c.Request.Context(), wait, s.opts.Draining, held), true
}

// refuseWatch answers a long poll refused by the watcher bounds: 429 when
// its address holds its most, 503 when all clients together do. The
// connection is closed, so that a refused client holds no descriptor
// (clients refused by the thousand, at the descriptor limit, took the
// trainer's ingest down with them).
func (s *trainerServer) refuseWatch(c *gin.Context, addr string, err error) {
	perClient, total := s.watches.Limits()
	c.Header("Retry-After", fmt.Sprint(int(watchRetryAfter/time.Second)))
	c.Header("Connection", "close")
	s.watchRefusals.Inc()
	if errors.Is(err, admission.ErrClientFull) {
		writeDetail(c, http.StatusTooManyRequests, fmt.Sprintf(
			"%d long polls from %s are held, the most one client may hold (--max-bundle-watchers-per-client); poll without ?wait= or retry later",
			perClient, addr))
		return
	}
	writeDetail(c, http.StatusServiceUnavailable, fmt.Sprintf(
		"%d long polls held, the most the trainer holds (--max-bundle-watchers); poll without ?wait= or retry later", total))
}

// etagMatches reports whether an If-None-Match value names etag.
func etagMatches(inm, etag string) bool {
	return inm != "" && (inm == etag || inm == "*")
}
