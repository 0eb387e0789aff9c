package api

import (
	"context"
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
// has gone or the server is draining, whichever comes first.
func (s *trainerServer) awaitBundle(ctx context.Context, inm string, wait time.Duration) *model.Published {
	if wait > 0 {
		s.watchers.Inc()
		defer s.watchers.Dec()
	}
	return s.t.Await(ctx, wait, s.opts.Draining, func(pub *model.Published) bool { return etagMatches(inm, pub.ETag()) })
}

// etagMatches reports whether an If-None-Match value names etag.
func etagMatches(inm, etag string) bool {
	return inm != "" && (inm == etag || inm == "*")
}
