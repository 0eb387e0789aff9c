package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/service"
)

// Every subcommand's flags are checked before anything is opened, and
// each problem names the flag to change. The trainer's defaults: niceness
// 10, idle-class xgboost with a 10 s grace, 16 uploads and 128 MiB of
// bodies at once; a standalone predictor syncs at niceness 10.
func TestFlagsChecked(t *testing.T) {
	for _, tt := range []struct {
		command string
		args    []string
		wantErr []string // all of these; none means valid
	}{
		{"trainer", nil, nil},
		{"predictor", nil, nil},
		{"serve", nil, nil},
		{"trainer", []string{"--train-nice", "0"}, nil},
		{"trainer", []string{"--train-nice", "19"}, nil},
		{"trainer", []string{"--train-nice", "20"}, []string{"--train-nice 20: want 0 to 19"}},
		{"trainer", []string{"--train-nice", "-1"}, []string{"--train-nice -1"}},
		{"trainer", []string{"--train-idle-grace", "0s"}, []string{"--train-idle-grace 0s"}},
		{"trainer", []string{"--train-idle=false", "--train-idle-grace", "0s"}, nil},
		{"trainer", []string{"--max-concurrent-ingest", "1", "--max-ingest-bytes", "1"}, nil},
		{"trainer", []string{"--max-concurrent-ingest", "0"}, []string{"--max-concurrent-ingest 0"}},
		{"trainer", []string{"--max-ingest-bytes", "-5"}, []string{"--max-ingest-bytes -5"}},
		{"trainer", []string{"--retrain-interval", "0s"}, []string{"--retrain-interval 0s: must be positive"}},
		{"trainer", []string{"--xgboost-timeout", "-1s"}, []string{"--xgboost-timeout -1s"}},
		{"trainer", []string{"--no-xgboost", "--xgboost-timeout", "-1s"}, nil},
		{"trainer", []string{"--holdout-fraction", "1"}, []string{"--holdout-fraction 1"}},
		{"trainer", []string{"--bucket-capacity", "0"}, []string{"--bucket-capacity 0"}},
		{"trainer", []string{"--model-kind", "forest"}, []string{`--model-kind "forest"`}},
		{"trainer", []string{"--xgb-eta", "0"}, []string{"xgboost params: eta 0"}},
		{"trainer", []string{"--trainer-listen", "127.0.0.1:80000"}, []string{`--trainer-listen "127.0.0.1:80000": port "80000"`}},
		{"trainer", []string{"--trainer-listen", "8000"}, []string{`--trainer-listen "8000"`}},
		{"trainer", []string{"--data-dir", ""}, []string{"--data-dir empty"}},
		{"trainer", []string{"--objective", "median"}, []string{`--objective "median"`}},
		{"trainer", []string{"--quantile", "1"}, []string{"--quantile 1"}},
		{"trainer", []string{"--max-rows", "0"}, []string{"--max-rows 0"}},
		{"trainer", []string{"--shutdown-grace", "0s"}, []string{"--shutdown-grace 0s"}},
		{"predictor", []string{"--sync-nice", "0"}, nil},
		{"predictor", []string{"--sync-nice", "20"}, []string{"--sync-nice 20"}},
		{"predictor", []string{"--sync-nice", "-1"}, []string{"--sync-nice -1"}},
		{"predictor", []string{"--sync-interval", "0s"}, []string{"--sync-interval 0s"}},
		{"predictor", []string{"--trainer-url", "127.0.0.1:8000"}, []string{`--trainer-url "127.0.0.1:8000": want an http:// or https:// URL`}},
		// Issue 11, row 9: one address for both roles used to start only
		// the predictor, the trainer's routes answering 404.
		{"serve", []string{"--trainer-listen", "127.0.0.1:9000", "--predictor-listen", "127.0.0.1:9000"},
			[]string{`--predictor-listen "127.0.0.1:9000" and --trainer-listen "127.0.0.1:9000" are the same address`}},
		{"serve", []string{"--trainer-listen", ":9000", "--predictor-listen", "0.0.0.0:9000"},
			[]string{`--predictor-listen "0.0.0.0:9000" and --trainer-listen ":9000" are the same socket`}},
		{"serve", []string{"--trainer-listen", "localhost:9000", "--predictor-listen", "127.0.0.1:9000"},
			[]string{"are the same socket"}},
		{"serve", []string{"--trainer-listen", "127.0.0.1:9000", "--predictor-listen", "127.0.0.1:9001"}, nil},
		{"serve", []string{"--trainer-listen", "127.0.0.1:9000", "--predictor-listen", "127.0.0.2:9000"}, nil},
		// Every problem at once, not one per attempt.
		{"serve", []string{"--train-nice", "30", "--retrain-interval", "-1s", "--predictor-listen", "127.0.0.1:8000"},
			[]string{"3 problems", "--train-nice 30", "--retrain-interval -1s", "--predictor-listen"}},
	} {
		name := tt.command + " " + strings.Join(tt.args, " ")
		build := map[string]func([]string, io.Writer) (service.Config, error){
			"serve": serveConfig, "trainer": trainerConfig, "predictor": predictorConfig}[tt.command]
		cfg, err := build(tt.args, io.Discard)
		if err == nil {
			if err = cfg.Validate(); err != nil {
				err = inFlagTerms(err)
			}
		}
		if len(tt.wantErr) == 0 {
			if err != nil {
				t.Errorf("%s: refused: %v", name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted, want %q", name, tt.wantErr)
			continue
		}
		for _, want := range tt.wantErr {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q, want it to contain %q", name, err, want)
			}
		}
	}

	cfg, err := trainerConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if tr := cfg.Trainer; tr.Nice != 10 || tr.XGBoost == nil || !tr.XGBoost.Idle || tr.XGBoost.Nice != 10 ||
		tr.XGBoost.IdleGrace != 10*time.Second || tr.MaxConcurrentIngest != 16 || tr.MaxIngestBytes != 128<<20 {
		t.Errorf("trainer defaults %+v, xgboost %+v; want niceness 10, idle xgboost with a 10s grace, 16 uploads and 128 MiB", tr, tr.XGBoost)
	}
	if cfg, err = predictorConfig(nil, io.Discard); err != nil || cfg.Predictor.SyncNice != 10 {
		t.Errorf("predictor default --sync-nice: %+v, %v; want 10", cfg.Predictor, err)
	}
}

// TestServeRefusesOneAddressForBothRoles is issue 11's row 9 end to end:
// `headroom serve` with one address for both roles exits at once with
// status 1, naming both flags, and opens no store. (Before, it served the
// predictor alone on the address until stopped, and exited 0.)
func TestServeRefusesOneAddressForBothRoles(t *testing.T) {
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	for _, other := range []string{addr, ":" + port, "0.0.0.0:" + port} {
		dataDir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var stderr bytes.Buffer
		start := time.Now()
		code := run(ctx, []string{"serve", "--data-dir", dataDir, "--no-xgboost",
			"--trainer-listen", addr, "--predictor-listen", other}, io.Discard, &stderr)
		cancel()
		if code != 1 || time.Since(start) > 5*time.Second {
			t.Errorf("--predictor-listen %s beside --trainer-listen %s: exit %d after %v, want 1 at once; stderr:\n%s",
				other, addr, code, time.Since(start).Round(time.Millisecond), stderr.String())
		}
		if msg := stderr.String(); !strings.Contains(msg, "--predictor-listen") || !strings.Contains(msg, "--trainer-listen") {
			t.Errorf("stderr does not name both flags:\n%s", msg)
		}
		if entries, _ := os.ReadDir(dataDir); len(entries) != 0 {
			t.Errorf("the refused serve left %d entries in --data-dir (want nothing opened)", len(entries))
		}
	}
}

// A predictor collects garbage rarely and within a memory limit, unless
// GOGC or GOMEMLIMIT say otherwise.
func TestTuneGC(t *testing.T) {
	gc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(gc); debug.SetMemoryLimit(limit) })
	for _, tt := range []struct {
		env       map[string]string
		wantGC    int
		wantLimit int64
	}{
		{nil, predictorGCPercent, predictorMemoryLimit},
		{map[string]string{"GOGC": "100"}, 100, predictorMemoryLimit},
		{map[string]string{"GOMEMLIMIT": "1GiB"}, predictorGCPercent, math.MaxInt64},
	} {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
		tuneGC(func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
		if got := debug.SetGCPercent(100); got != tt.wantGC {
			t.Errorf("env %v: GC percent %d, want %d", tt.env, got, tt.wantGC)
		}
		if got := debug.SetMemoryLimit(-1); got != tt.wantLimit {
			t.Errorf("env %v: memory limit %d, want %d", tt.env, got, tt.wantLimit)
		}
	}
}
