package api

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"
)

// guardWrites refuses state-changing requests that a web page, rather than
// a router, a proxy or an operator, could have made: a page can send a
// simple cross-site POST (text/plain, a form, a typeless Blob) that needs no
// CORS preflight, and a page on a name that resolves to 127.0.0.1 (DNS
// rebinding) is even same-origin. A developer's trainer on localhost with
// no token answered such a /flush by deleting every sample (issue 11
// row 6). Refused, each with 403 or 415 and a detail:
//   - a body type other than JSON; no Content-Type at all only from a
//     browser (one that sends Origin), since the reference's clients may
//     omit it;
//   - an Origin (a browser's) that is not the request's own Host;
//   - when no write token is configured, a Host that is not loopback
//     (localhost, *.localhost), not an IP literal (rebinding needs a
//     name), and not in allowedHosts. With a token, the token is the proof:
//     a cross-site page cannot attach it without a CORS preflight, which
//     nothing here answers.
func guardWrites(tokens Tokens, allowedHosts []string) gin.HandlerFunc {
	allowed := map[string]bool{}
	for _, h := range allowedHosts {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			allowed[hostOnly(h)] = true
		}
	}
	return func(c *gin.Context) {
		origin := c.GetHeader("Origin")
		if !isJSONContentType(c.GetHeader("Content-Type"), origin != "") {
			writeDetail(c, http.StatusUnsupportedMediaType, fmt.Sprintf(
				"Content-Type %q: state-changing requests must send application/json", c.GetHeader("Content-Type")))
			c.Abort()
			return
		}
		if origin != "" && !sameOrigin(origin, c.Request.Host) {
			writeDetail(c, http.StatusForbidden, fmt.Sprintf(
				"Origin %q is not this server (%q): cross-site requests may not change state", origin, c.Request.Host))
			c.Abort()
			return
		}
		if tokens.Write == "" && !trustedHost(c.Request.Host, allowed) {
			writeDetail(c, http.StatusForbidden, fmt.Sprintf(
				"Host %q is not loopback, an IP address or an allowed host name (--allowed-hosts), and no write token is configured: refused, as a DNS-rebinding page would be",
				c.Request.Host))
			c.Abort()
			return
		}
	}
}

// isJSONContentType accepts application/json and any +json type; a missing
// type only from a client that is not a browser.
func isJSONContentType(ct string, browser bool) bool {
	if ct == "" {
		return !browser
	}
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// sameOrigin reports whether a browser's Origin names the host (and port)
// the request was sent to. "null" (sandboxed frames, files) never does.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(withDefaultPort(u.Host, u.Scheme), withDefaultPort(host, u.Scheme))
}

func withDefaultPort(hostport, scheme string) string {
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		return hostport
	}
	if scheme == "https" {
		return net.JoinHostPort(strings.Trim(hostport, "[]"), "443")
	}
	return net.JoinHostPort(strings.Trim(hostport, "[]"), "80")
}

// hostOnly strips a port and IPv6 brackets.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

func trustedHost(hostport string, allowed map[string]bool) bool {
	h := strings.ToLower(strings.TrimSuffix(hostOnly(hostport), "."))
	switch {
	case h == "":
		return false // HTTP/1.0 without Host: nothing says where it was meant to go
	case h == "localhost" || strings.HasSuffix(h, ".localhost"):
		return true
	case net.ParseIP(h) != nil:
		return true
	}
	return allowed[h]
}
