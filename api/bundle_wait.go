package api

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/wire"
)

// GET /model/bundle?wait=D is a long poll: a request that would get a 304
// (its If-None-Match names the bundle in service), or a 404 before the
// first bundle, is held until a new version is published or D has passed.
// Predictors keep one such request open, so a new bundle reaches them the
// moment it is published instead of at their next poll; the poll stays as
// the fallback (predictor.Syncer). "New" is by ETag, not by version: a
// predictor holding v57 of a trainer whose bundles were since wiped is
// answered with the new lineage's v1 (model.Supersedes takes it).

// MaxBundleWait bounds ?wait=: the answer must be written within the
// server's write timeout (60 s), and a proxy between predictor and trainer
// may drop a request idle for longer.
const MaxBundleWait = 50 * time.Second

// parseBundleWait reads ?wait=: empty means 0 (answer at once); otherwise a
// Go duration ("30s", "250ms") or a number of seconds ("30", "0.5"), at
// least 0, capped at MaxBundleWait.
func parseBundleWait(raw string) (time.Duration, error) {
	if raw == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil {
		secs, ferr := strconv.ParseFloat(raw, 64)
		if ferr != nil || math.IsNaN(secs) || math.IsInf(secs, 0) {
			return 0, errWaitSyntax
		}
		d = time.Duration(math.Min(secs, MaxBundleWait.Seconds()) * float64(time.Second))
	}
	if d < 0 {
		return 0, errWaitNegative
	}
	return min(d, MaxBundleWait), nil
}

var (
	errWaitSyntax   = errors.New("wait: not a duration such as 30s, nor a number of seconds")
	errWaitNegative = errors.New("wait: negative")
)

// bundleWait is parseBundleWait on the request's ?wait=, answering 422
// itself when the value is refused.
func bundleWait(c *gin.Context) (time.Duration, bool) {
	raw := c.Query("wait")
	d, err := parseBundleWait(raw)
	switch {
	case errors.Is(err, errWaitSyntax):
		writeValidation(c, []wire.FieldError{{Type: "duration_parsing", Loc: []any{"query", "wait"},
			Msg: "Input should be a duration such as 30s, or a number of seconds", Input: raw}})
		return 0, false
	case err != nil:
		writeValidation(c, []wire.FieldError{{Type: "greater_than_equal", Loc: []any{"query", "wait"},
			Msg: "Input should be greater than or equal to 0", Input: raw, Ctx: map[string]any{"ge": 0}}})
		return 0, false
	}
	return d, true
}

// awaitBundle returns the current bundle once it is one the client does not
// have (its ETag does not match inm), or when wait has passed, the client
// has gone or the server is draining, whichever comes first.
func (s *trainerServer) awaitBundle(ctx context.Context, inm string, wait time.Duration) *model.Published {
	if wait <= 0 {
		return s.t.Current()
	}
	s.watchers.Inc()
	defer s.watchers.Dec()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		next := s.t.Published() // taken before Current: no publication is missed
		pub := s.t.Current()
		if pub != nil && !etagMatches(inm, pub.ETag()) {
			return pub
		}
		select {
		case <-next:
		case <-timer.C:
			return s.t.Current()
		case <-ctx.Done():
			return s.t.Current()
		case <-s.opts.Draining:
			return s.t.Current()
		}
	}
}

// etagMatches reports whether an If-None-Match value names etag.
func etagMatches(inm, etag string) bool {
	return inm != "" && (inm == etag || inm == "*")
}
