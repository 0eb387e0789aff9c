package api

import (
	"net/http"
	"strings"
	"testing"
)

const browserAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

// TestRootServesThePageToBrowsers: GET / with a browser's Accept gets the
// dashboard page; every other client keeps the reference's JSON.
func TestRootServesThePageToBrowsers(t *testing.T) {
	s := newService(t, Tokens{})
	s.ingestAndTrain(t, 200)
	for _, h := range []struct {
		name    string
		handler http.Handler
		json    string
	}{{"trainer", s.trainerH, "Latency Predictor is running."}, {"predictor", s.predictH, "HTTP-based Latency Predictor is running"}} {
		w := do(h.handler, "GET", "/", "", "Accept", browserAccept)
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") ||
			!strings.Contains(w.Body.String(), "<title>Headroom "+h.name+"</title>") || !strings.Contains(w.Body.String(), "<svg") {
			t.Errorf("%s, browser: %d %s %.200s", h.name, w.Code, w.Header().Get("Content-Type"), w.Body)
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("%s: Content-Security-Policy %q", h.name, csp)
		}
		for _, accept := range []string{"", "*/*", "application/json", "application/json, text/html;q=0.5"} {
			w := do(h.handler, "GET", "/", "", "Accept", accept)
			if w.Code != 200 || decode(t, w)["message"] != h.json {
				t.Errorf("%s, Accept %q: %d %.200s", h.name, accept, w.Code, w.Body)
			}
		}
	}
}

// TestPageNeedsTheReadToken: the page shows what /model/info does, so a
// read token guards it; the JSON root stays open for the kubelet and the
// reference's clients.
func TestPageNeedsTheReadToken(t *testing.T) {
	s := newService(t, Tokens{Read: "r", Write: "w"})
	for _, h := range []http.Handler{s.trainerH, s.predictH} {
		if w := do(h, "GET", "/", "", "Accept", browserAccept); w.Code != http.StatusUnauthorized {
			t.Errorf("page without a token: %d", w.Code)
		}
		for _, tok := range []string{"r", "w"} {
			if w := do(h, "GET", "/", "", "Accept", browserAccept, "Authorization", "Bearer "+tok); w.Code != 200 {
				t.Errorf("page with token %q: %d %.200s", tok, w.Code, w.Body)
			}
		}
		if w := do(h, "GET", "/", ""); w.Code != 200 {
			t.Errorf("JSON root without a token: %d", w.Code)
		}
	}
}
