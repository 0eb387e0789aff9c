package main

import (
	"context"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/api"
)

// TestTokenSources checks where bearer tokens come from: flags, the
// environment (HEADROOM_READ_TOKEN, HEADROOM_WRITE_TOKEN), and a token file
// that overrides both, with its errors.
func TestTokenSources(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := file("tokens", "# tokens for the test\n\nread = file-r\nwrite=file-w\n")
	writeOnly := file("write-only", "write=file-w\n")
	bad := file("bad", "read=x\ntoken=y\n")
	emptyWrite := file("empty-write", "read=file-r\nwrite=\n")
	emptyRead := file("empty-read", "read =  \n")
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    api.Tokens
		wantErr string
	}{
		{"none", nil, nil, api.Tokens{}, ""},
		{"flags", []string{"--read-token", "r", "--write-token", "w"}, nil, api.Tokens{Read: "r", Write: "w"}, ""},
		{"environment", nil, map[string]string{"HEADROOM_READ_TOKEN": "env-r", "HEADROOM_WRITE_TOKEN": "env-w"},
			api.Tokens{Read: "env-r", Write: "env-w"}, ""},
		{"flag beats environment", []string{"--read-token", "r"}, map[string]string{"HEADROOM_READ_TOKEN": "env-r"},
			api.Tokens{Read: "r"}, ""},
		{"file", []string{"--token-file", good}, nil, api.Tokens{Read: "file-r", Write: "file-w"}, ""},
		{"file beats flags", []string{"--token-file", good, "--read-token", "r", "--write-token", "w"}, nil,
			api.Tokens{Read: "file-r", Write: "file-w"}, ""},
		{"file from the environment", nil, map[string]string{"HEADROOM_TOKEN_FILE": good},
			api.Tokens{Read: "file-r", Write: "file-w"}, ""},
		{"file sets only what it names", []string{"--token-file", writeOnly, "--read-token", "r"}, nil,
			api.Tokens{Read: "r", Write: "file-w"}, ""},
		{"bad line", []string{"--token-file", bad}, nil, api.Tokens{}, "line 2"},
		// An empty value would silently open what the line meant to guard.
		{"empty write token", []string{"--token-file", emptyWrite, "--write-token", "w"}, nil, api.Tokens{}, "line 2: empty write token"},
		{"empty read token", []string{"--token-file", emptyRead}, nil, api.Tokens{}, "line 1: empty read token"},
		{"missing file", []string{"--token-file", filepath.Join(dir, "nope")}, nil, api.Tokens{}, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			var c commonFlags
			c.register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			if err := applyEnv(fs, lookup); err != nil {
				t.Fatal(err)
			}
			got, err := c.tokens()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("tokens %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestAccessControlEndToEnd runs a trainer with a token file and a signing
// key, and predictors configured through the environment: the right tokens
// open the right routes and nothing else; health and readiness stay open;
// a predictor with the trainer's key serves its signed bundles, one with
// another key refuses them and counts the refusals, one with a wrong read
// token cannot fetch at all.
func TestAccessControlEndToEnd(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tokenFile := write("tokens", "read=reader-token\nwrite=writer-token\n")
	key := write("key", "shared-hmac-key-0123456789\n")
	otherKey := write("other-key", "another-hmac-key-9876543210\n")
	shortKey := write("short-key", "too-short\n")

	trainerAddr := freeAddr(t)
	trainerURL := "http://" + trainerAddr
	tr := startProc(t, nil, "trainer", "--data-dir", filepath.Join(dir, "trainer"), "--trainer-listen", trainerAddr,
		"--token-file", tokenFile, "--signing-key-file", key, "--no-xgboost", "--retrain-interval", "100ms", "--log-level", "warn")
	tr.waitHealthy(trainerURL, 20*time.Second)
	ctx := context.Background()
	client := &http.Client{Timeout: 5 * time.Second}
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	expect := func(what string, want int, method, url string, body []byte, header ...string) {
		t.Helper()
		code, out, err := httpDo(ctx, client, method, url, body, header...)
		if err != nil || code != want {
			t.Errorf("%s: %d %v %.200s; want %d", what, code, err, out, want)
		}
	}
	l := newLedger()
	expect("ingest without a token", 401, "POST", trainerURL+"/add_training_data_bulk", l.newBatch(5, 0).body)
	expect("ingest with the read token", 401, "POST", trainerURL+"/add_training_data_bulk", l.newBatch(5, 0).body, bearer("reader-token")...)
	expect("ingest with a wrong token", 401, "POST", trainerURL+"/samples", l.newBatch(5, 0).body, bearer("writer-tokeN")...)
	expect("ingest with the write token", 202, "POST", trainerURL+"/add_training_data_bulk", l.newBatch(300, 0).body, bearer("writer-token")...)
	expect("flush with the read token", 401, "POST", trainerURL+"/flush", []byte(`{}`), bearer("reader-token")...)
	expect("health without a token", 200, "GET", trainerURL+"/healthz", nil)
	expect("readiness without a token", 200, "GET", trainerURL+"/readyz", nil)
	expect("status without a token", 401, "GET", trainerURL+"/status", nil)
	expect("metrics without a token", 200, "GET", trainerURL+"/metrics", nil)
	waitFor(t, "a signed bundle", 10*time.Second, func() bool {
		code, _, _ := httpDo(ctx, client, "GET", trainerURL+"/model/bundle", nil, bearer("reader-token")...)
		return code == 200
	})
	expect("bundle without a token", 401, "GET", trainerURL+"/model/bundle", nil)
	expect("download info with the write token", 200, "GET", trainerURL+"/model/download/info", nil, bearer("writer-token")...)

	predictor := func(env []string, args ...string) (string, *proc) {
		addr := freeAddr(t)
		p := startProc(t, env, append([]string{"predictor", "--data-dir", t.TempDir(), "--predictor-listen", addr,
			"--trainer-url", trainerURL, "--sync-interval", "100ms", "--log-level", "error"}, args...)...)
		p.waitHealthy("http://"+addr, 20*time.Second)
		return "http://" + addr, p
	}
	// Tokens from the environment: the read token for its own routes and
	// for fetching from the trainer.
	good, _ := predictor([]string{"HEADROOM_READ_TOKEN=reader-token", "HEADROOM_WRITE_TOKEN=predictor-admin",
		"HEADROOM_SIGNING_KEY_FILE=" + key})
	otherKeyURL, _ := predictor([]string{"HEADROOM_READ_TOKEN=reader-token"}, "--signing-key-file", otherKey)
	wrongTokenURL, _ := predictor([]string{"HEADROOM_READ_TOKEN=guess"})
	waitFor(t, "the keyed predictor to serve", 10*time.Second, func() bool {
		code, _ := getJSON(good+"/readyz", nil)
		return code == 200
	})
	expect("predict without a token", 401, "POST", good+"/predict/bulk/strict", predictBody)
	expect("predict with the read token", 200, "POST", good+"/predict/bulk/strict", predictBody, bearer("reader-token")...)
	expect("reload with the read token", 401, "POST", good+"/reload", nil, bearer("reader-token")...)
	expect("reload with the write token", 200, "POST", good+"/reload", nil, bearer("predictor-admin")...)
	expect("predictor health without a token", 200, "GET", good+"/healthz", nil)

	waitFor(t, "the other-key predictor to refuse bundles", 10*time.Second, func() bool {
		return metricValue(otherKeyURL, `headroom_predictor_bundle_syncs_total{result="refused"}`) >= 2
	})
	waitFor(t, "the wrong-token predictor to be turned away", 10*time.Second, func() bool {
		return metricValue(wrongTokenURL, `headroom_predictor_bundle_syncs_total{result="http_error"}`) >= 2
	})
	for name, url := range map[string]string{"other key": otherKeyURL, "wrong token": wrongTokenURL} {
		if code, _ := getJSON(url+"/readyz", nil); code != 503 {
			t.Errorf("predictor with %s: /readyz %d, want 503 (no bundle accepted)", name, code)
		}
	}

	// A key too short to be a key stops the start, with the reason.
	p := startProc(t, nil, "predictor", "--data-dir", t.TempDir(), "--predictor-listen", freeAddr(t),
		"--signing-key-file", shortKey)
	if code := p.wait(20 * time.Second); code != 1 || !strings.Contains(p.logs.String(), "shorter than 16 bytes") {
		t.Errorf("short signing key: exit %d, log %q", code, p.logs)
	}
}
