package main

import (
	"context"
	"flag"
	"io"
	"math"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// The trainer's flags are checked before anything starts: a training
// niceness outside what setpriority takes, an idle grace that would never
// let xgboost run idle, or ingest limits that would admit nothing are
// refused with the flag's name. The defaults: niceness 10, idle-class
// xgboost with a 10 s grace, 16 uploads and 128 MiB of bodies at once.
func TestTrainerFlagsChecked(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{nil, ""},
		{[]string{"--train-nice", "0"}, ""},
		{[]string{"--train-nice", "19"}, ""},
		{[]string{"--train-nice", "20"}, "--train-nice 20"},
		{[]string{"--train-nice", "-1"}, "--train-nice -1"},
		{[]string{"--train-idle-grace", "0s"}, "--train-idle-grace 0s"},
		{[]string{"--max-concurrent-ingest", "1", "--max-ingest-bytes", "1"}, ""},
		{[]string{"--max-concurrent-ingest", "0"}, "--max-concurrent-ingest 0"},
		{[]string{"--max-ingest-bytes", "-5"}, "--max-ingest-bytes -5"},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		var tf trainerFlags
		tf.register(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if tt.args == nil && (tf.trainNice != 10 || !tf.trainIdle || tf.trainIdleGrace != 10*time.Second ||
			tf.maxIngest != 16 || tf.maxIngestBytes != 128<<20) {
			t.Errorf("defaults --train-nice %d --train-idle %v --train-idle-grace %v --max-concurrent-ingest %d --max-ingest-bytes %d; "+
				"want 10, true, 10s, 16 and 128 MiB", tf.trainNice, tf.trainIdle, tf.trainIdleGrace, tf.maxIngest, tf.maxIngestBytes)
		}
		c := commonFlags{dataDir: t.TempDir(), logLevel: "error", logFormat: "text", objective: "mean", quantile: 0.9}
		tf.listen = "127.0.0.1:0"
		r, err := startRoles(context.Background(), &c, &tf, nil, io.Discard)
		if err == nil {
			r.close()
		}
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%v: startRoles error %v, want %q", tt.args, err, tt.wantErr)
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

// A standalone predictor checks --sync-nice before it starts, like the
// trainer its --train-nice, and defaults to 10.
func TestPredictorFlagsSyncNice(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{nil, ""},
		{[]string{"--sync-nice", "0"}, ""},
		{[]string{"--sync-nice", "20"}, "--sync-nice 20"},
		{[]string{"--sync-nice", "-1"}, "--sync-nice -1"},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		var pf predictorFlags
		pf.register(fs, true)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if tt.args == nil && pf.syncNice != 10 {
			t.Errorf("default --sync-nice %d, want 10", pf.syncNice)
		}
		c := commonFlags{dataDir: t.TempDir(), logLevel: "error", logFormat: "text", objective: "mean", quantile: 0.9}
		pf.listen = "127.0.0.1:0"
		r, err := startRoles(context.Background(), &c, nil, &pf, io.Discard)
		if err == nil {
			r.close()
		}
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%v: startRoles error %v, want %q", tt.args, err, tt.wantErr)
		}
	}
}
