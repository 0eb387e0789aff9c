package service

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/api"
)

// TestWarnOpenListener: listening beyond loopback without both tokens is
// said at start, loudly; loopback, or both tokens set, is quiet.
func TestWarnOpenListener(t *testing.T) {
	both := api.Tokens{Read: "r", Write: "w"}
	tests := []struct {
		addr   string
		tokens api.Tokens
		warn   bool
	}{
		{"127.0.0.1:8000", api.Tokens{}, false},
		{"localhost:8000", api.Tokens{}, false},
		{"[::1]:8000", api.Tokens{}, false},
		{"127.0.0.2:8000", api.Tokens{}, false},
		{"0.0.0.0:8000", api.Tokens{}, true},
		{":8000", api.Tokens{}, true},
		{"[::]:8000", api.Tokens{}, true},
		{"10.1.2.3:8000", api.Tokens{}, true},
		{"predictor.example:8001", api.Tokens{}, true},
		{"0.0.0.0:8000", api.Tokens{Write: "w"}, true},
		{"0.0.0.0:8000", api.Tokens{Read: "r"}, true},
		{"0.0.0.0:8000", both, false},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		warnOpenListener(slog.New(slog.NewTextHandler(&buf, nil)), tt.addr, tt.tokens, "trainer")
		if got := strings.Contains(buf.String(), "without bearer tokens"); got != tt.warn {
			t.Errorf("%s with %+v: warned %v, want %v (log %q)", tt.addr, tt.tokens, got, tt.warn, buf.String())
		}
	}

	// And New does call it, for each server, before serving.
	for _, withTokens := range []bool{false, true} {
		var logs bytes.Buffer
		cfg := testConfig(t, true, true)
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		cfg.Trainer.Listen, cfg.Predictor.Listen = "0.0.0.0:0", "0.0.0.0:0"
		if withTokens {
			cfg.Tokens = api.Tokens{Read: "r", Write: "w"}
		}
		svc, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		svc.Close()
		n := strings.Count(logs.String(), "without bearer tokens")
		if want := map[bool]int{false: 2, true: 0}[withTokens]; n != want {
			t.Errorf("tokens %v: %d warnings at start, want %d; log:\n%s", withTokens, n, want, logs.String())
		}
	}
}
