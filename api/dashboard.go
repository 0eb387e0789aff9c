package api

import (
	"bytes"
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/headroomhq/headroom/dashboard"
)

// wantsPage reports whether GET / came from a browser, which names
// text/html in Accept; API clients (curl's */*, the reference's
// test-suite, JSON clients) keep the reference's JSON.
func wantsPage(c *gin.Context) bool {
	return c.NegotiateFormat(gin.MIMEJSON, gin.MIMEHTML) == gin.MIMEHTML
}

// servePage answers with the dashboard page. The page shows what
// /model/info does, so a read token set for that guards the page too.
func servePage(c *gin.Context, tokens Tokens, snapshot func(ctx context.Context) (dashboard.Snapshot, error)) {
	if requireToken(tokens, readAccess)(c); c.IsAborted() {
		return
	}
	s, err := snapshot(c.Request.Context())
	if err != nil {
		writeDetail(c, http.StatusInternalServerError, err.Error())
		return
	}
	var page bytes.Buffer
	if err := dashboard.Render(&page, s); err != nil {
		writeDetail(c, http.StatusInternalServerError, err.Error())
		return
	}
	c.Header("Cache-Control", "no-store")
	// Nothing on the page comes from elsewhere; say so to the browser.
	c.Header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
	c.Header("Vary", "Accept")
	c.Data(http.StatusOK, "text/html; charset=utf-8", page.Bytes())
}
