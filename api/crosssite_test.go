package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/features"
)

// Issue 11 row 6: a web page could flush a developer's trainer (no token,
// on localhost) with a simple cross-site POST, or through DNS rebinding.
// Every state-changing route refuses what a page can send, and nothing is
// deleted or stored; what routers, proxies and operators send passes.
func TestCrossSiteWritesRefused(t *testing.T) {
	type req struct {
		host, origin, contentType, auth string
	}
	for _, tc := range []struct {
		name   string
		tokens Tokens
		r      req
		want   int // 0: the route's own answer
	}{
		{"issue 11 row 6: text/plain from attacker.example", Tokens{}, req{"attacker.example", "http://attacker.example", "text/plain", ""}, 415},
		{"text/plain on loopback", Tokens{}, req{"localhost:8000", "", "text/plain", ""}, 415},
		{"form on loopback", Tokens{}, req{"127.0.0.1:8000", "", "application/x-www-form-urlencoded", ""}, 415},
		{"multipart on loopback", Tokens{}, req{"127.0.0.1:8000", "", "multipart/form-data; boundary=x", ""}, 415},
		{"a typeless body from a browser", Tokens{}, req{"localhost:8000", "http://localhost:8000", "", ""}, 415},
		{"foreign origin, JSON", Tokens{}, req{"localhost:8000", "http://attacker.example", "application/json", ""}, 403},
		{"foreign port", Tokens{}, req{"localhost:8000", "http://localhost:9999", "application/json", ""}, 403},
		{"null origin", Tokens{}, req{"localhost:8000", "null", "application/json", ""}, 403},
		{"DNS rebinding, same origin", Tokens{}, req{"attacker.example:8000", "http://attacker.example:8000", "application/json", ""}, 403},
		{"DNS rebinding, no origin", Tokens{}, req{"rebind.attacker.example:8000", "", "application/json", ""}, 403},
		{"no Host at all", Tokens{}, req{"", "", "application/json", ""}, 403},
		{"a foreign origin even with the token", Tokens{Write: "w"}, req{"localhost:8000", "http://attacker.example", "application/json", "Bearer w"}, 403},
		// What legitimate clients send.
		{"router on localhost", Tokens{}, req{"localhost:8000", "", "application/json", ""}, 0},
		{"localhost with a trailing dot", Tokens{}, req{"localhost.:8000", "", "application/json", ""}, 0},
		{"an IP address", Tokens{}, req{"10.0.3.7:8000", "", "application/json", ""}, 0},
		{"IPv6 loopback", Tokens{}, req{"[::1]:8000", "", "application/json", ""}, 0},
		{"JSON with a charset", Tokens{}, req{"127.0.0.1:8000", "", "application/json; charset=utf-8", ""}, 0},
		{"an operator's curl without a type", Tokens{}, req{"127.0.0.1:8000", "", "", ""}, 0},
		{"the server's own page", Tokens{}, req{"localhost:8000", "http://localhost:8000", "application/json", ""}, 0},
		{"an allowed name", Tokens{}, req{"Trainer.Internal:8000", "", "application/json", ""}, 0},
		{"any name with the write token", Tokens{Write: "w"}, req{"headroom.example:8000", "", "application/json", "Bearer w"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newService(t, Tokens{})
			s.trainerH = NewTrainerHandler(s.trainer, s.db, TrainerOptions{Tokens: tc.tokens, AllowedHosts: []string{"trainer.internal"}})
			predH := NewPredictorHandler(s.pred, PredictorOptions{Tokens: tc.tokens, AllowedHosts: []string{"trainer.internal"}})
			if w := do(s.trainerH, "POST", "/add_training_data_bulk", `{"entries":[`+entry(30, 3, 1)+`]}`, "Authorization", "Bearer w"); w.Code != 202 {
				t.Fatalf("seeding: %d %s", w.Code, w.Body)
			}
			stored := func() int { c := s.db.Counts(); return c.Train(features.TTFT) + c.Holdout(features.TTFT) }
			send := func(h http.Handler, path, body string) *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", path, strings.NewReader(body))
				r.Host = tc.r.host
				for k, v := range map[string]string{"Origin": tc.r.origin, "Content-Type": tc.r.contentType, "Authorization": tc.r.auth} {
					if v != "" {
						r.Header.Set(k, v)
					}
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			for _, rt := range []struct {
				h          http.Handler
				path, body string
				ok         int
			}{
				{s.trainerH, "/flush", `{"confirm": true}`, 200},
				{s.trainerH, "/add_training_data_bulk", `{"entries":[` + entry(31, 3, 2) + `]}`, 202},
				{s.trainerH, "/samples", entry(32, 3, 3), 202},
				{predH, "/reload", ``, 0},
			} {
				before := stored()
				w := send(rt.h, rt.path, rt.body)
				if tc.want != 0 {
					if w.Code != tc.want || !strings.Contains(w.Body.String(), "detail") {
						t.Errorf("%s: %d %s, want %d with a detail", rt.path, w.Code, w.Body, tc.want)
					}
					if stored() != before {
						t.Errorf("%s: the store changed from %d to %d samples", rt.path, before, stored())
					}
					continue
				}
				if w.Code == 403 || w.Code == 415 || (rt.ok != 0 && w.Code != rt.ok) {
					t.Errorf("%s: %d %s, want %d", rt.path, w.Code, w.Body, rt.ok)
				}
			}
		})
	}
}

// Without a write token, /flush deletes only what a body with
// "confirm": true asks it to: nothing a stray or forged request sends by
// accident (an empty body meant "flush everything") deletes every sample.
// With a token, the reference's optional body stands.
func TestFlushNeedsConfirmationWithoutToken(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tokens Tokens
		body   string
		code   int
	}{
		{"empty body, no token", Tokens{}, ``, 422},
		{"defaults, no token", Tokens{}, `{}`, 422},
		{"every flag, no token", Tokens{}, `{"flush_training_data": true, "flush_test_data": true}`, 422},
		{"confirm false", Tokens{}, `{"confirm": false}`, 422},
		{"confirm not a bool", Tokens{}, `{"confirm": "perhaps"}`, 422},
		{"confirm twice", Tokens{}, `{"confirm": true, "confirm": true}`, 422},
		{"confirmed", Tokens{}, `{"confirm": true}`, 200},
		{"confirmed, lax bool", Tokens{}, `{"confirm": "yes", "reason": "tests"}`, 200},
		{"token, empty body", Tokens{Write: "w"}, ``, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newService(t, Tokens{})
			h := NewTrainerHandler(s.trainer, s.db, TrainerOptions{Tokens: tc.tokens})
			if w := do(h, "POST", "/add_training_data_bulk", `{"entries":[`+entry(30, 3, 1)+`]}`, "Authorization", "Bearer w"); w.Code != 202 {
				t.Fatalf("seeding: %d %s", w.Code, w.Body)
			}
			w := do(h, "POST", "/flush", tc.body, "Authorization", "Bearer w")
			if w.Code != tc.code {
				t.Fatalf("%d %s, want %d", w.Code, w.Body, tc.code)
			}
			c := s.db.Counts()
			left := c.Train(features.TTFT) + c.Holdout(features.TTFT)
			if (tc.code == 200) != (left == 0) {
				t.Errorf("%d samples left after %d", left, w.Code)
			}
			if tc.code == 422 && !strings.Contains(w.Body.String(), "confirm") {
				t.Errorf("refusal %s does not name confirm", w.Body)
			}
		})
	}
}
