package trainer

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/trainer/fit"
	"github.com/headroomhq/headroom/xgboost"
)

// A bundle that cannot be written (a full disk, a broken directory) is not
// published: the bundle in service stays, the failure shows in the status
// and the metric, and the next cycle tries again without waiting for new
// samples, which may not come while the disk is full.
func TestPublishFailureKeepsBundleAndRetries(t *testing.T) {
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	tr, err := New(Config{BundleDir: filepath.Join(f.dir, "bundles"), Metrics: NewMetrics(reg)}, f.db) // linear only
	if err != nil {
		t.Fatal(err)
	}
	f.add(t, 50)
	first := retrain(t, tr)
	if first == nil || first.Bundle.Version != 1 {
		t.Fatalf("first bundle %+v", first)
	}
	before := tr.Status().Targets["ttft"]

	// A regular file where the directory was: no write can succeed, root
	// or not.
	dir := filepath.Join(f.dir, "bundles")
	if err := os.Rename(dir, dir+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.add(t, 150)
	pub, err := tr.Retrain(context.Background())
	if err == nil || pub != nil || !strings.Contains(err.Error(), "publish") {
		t.Fatalf("retrain with an unwritable bundle directory: %v, %v; want a publish error", pub, err)
	}
	if tr.Current() != first {
		t.Fatal("a bundle that was not written went into service")
	}
	if got := testutil.ToFloat64(tr.cfg.Metrics.publishFailures); got != 1 {
		t.Errorf("publish failures metric %v, want 1", got)
	}
	st := tr.Status().Targets["ttft"]
	if st.Failures != before.Failures+1 || !strings.Contains(st.LastError, "publish") ||
		st.TrainedOnGen != before.TrainedOnGen || !st.LastSuccess.Equal(before.LastSuccess) {
		t.Errorf("status after a failed publish %+v; want the failure counted and the last success and generation unchanged (were %+v)", st, before)
	}

	// The directory comes back; no new samples arrive.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir+".away", dir); err != nil {
		t.Fatal(err)
	}
	pub = retrain(t, tr)
	if pub == nil || pub.Bundle.Version != 2 {
		t.Fatalf("after the directory recovered: %+v, want version 2 published without new samples", pub)
	}
	if loaded, err := bundle.LoadNewest(dir, nil, nil); err != nil || loaded == nil || loaded.Bundle.Version != 2 {
		t.Errorf("bundle on disk: %+v, %v", loaded, err)
	}
}

// Each way the xgboost CLI can fail, at the level of the retrain loop: the
// tree bundle in service stays, the failure shows in the status, the
// metric and the log, and the next cycle, with xgboost back, retrains the
// same samples and publishes. (Train's own handling of each failure, down
// to the error text and leftover processes, is in xgboost_test.go.)
func TestXGBoostFaultsKeepBundleAndReport(t *testing.T) {
	realXGBoost(t)
	f := newFixture(t)
	dir := t.TempDir()
	mode := filepath.Join(dir, "mode")
	script := filepath.Join(dir, "xgboost")
	// The stand-in runs the real CLI unless the mode file names a fault.
	body := `#!/bin/sh
case "$(cat ` + mode + ` 2>/dev/null)" in
crash) echo 'simulated crash: std::bad_alloc' >&2; exit 134 ;;
hang) exec sleep 30 ;;
garbage) echo 'this is not a model' > model.json; exit 0 ;;
*) exec xgboost "$@" ;;
esac
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	reg := prometheus.NewRegistry()
	opts := fit.DefaultOptions()
	opts.Params.Rounds = 20
	xgb := &xgboost.CLI{Binary: script, TempDir: t.TempDir(), Timeout: time.Minute}
	opts.XGBoost = xgb
	tr, err := New(Config{Fit: opts, BundleDir: filepath.Join(f.dir, "bundles"), Metrics: NewMetrics(reg),
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs}, nil))}, f.db)
	if err != nil {
		t.Fatal(err)
	}
	f.add(t, 200)
	good := retrain(t, tr)
	if good == nil || good.Bundle.TTFT.Trees == nil {
		t.Fatal("no tree model from the real xgboost")
	}
	failedRuns := func() float64 { return testutil.ToFloat64(tr.cfg.Metrics.runs.WithLabelValues("ttft", "failed")) }

	for _, tc := range []struct{ mode, want string }{
		{"crash", "simulated crash"},
		{"hang", "timed out"},
		{"garbage", "parse xgboost model"},
		{"missing", "not found"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			if tc.mode == "missing" {
				if err := os.Rename(script, script+".away"); err != nil {
					t.Fatal(err)
				}
				defer os.Rename(script+".away", script)
			} else if err := os.WriteFile(mode, []byte(tc.mode), 0o644); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(mode)
			if tc.mode == "hang" {
				// Between retrains nothing reads the timeout.
				xgb.Timeout = 300 * time.Millisecond
				defer func() { xgb.Timeout = time.Minute }()
			}
			before := tr.Status().Targets["ttft"].Failures
			runs := failedRuns()
			f.add(t, 150)
			pub, err := tr.Retrain(context.Background())
			if err == nil || pub != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("retrain with xgboost %s: %v, %v; want no bundle and an error naming %q", tc.mode, pub, err, tc.want)
			}
			if tr.Current() != good {
				t.Fatal("the tree bundle in service was replaced")
			}
			st := tr.Status().Targets["ttft"]
			if st.Failures != before+1 || !strings.Contains(st.LastError, tc.want) {
				t.Errorf("status %+v does not report the failure", st)
			}
			if got := failedRuns(); got != runs+1 {
				t.Errorf("failed runs metric %v, want %v", got, runs+1)
			}
			if !strings.Contains(logs.String(), tc.want) {
				t.Errorf("log does not mention %q:\n%s", tc.want, logs.String())
			}
		})
	}
	// xgboost is back: the next cycle retrains without new samples.
	pub := retrain(t, tr)
	if pub == nil || pub.Bundle.Version != good.Bundle.Version+1 || pub.Bundle.TTFT.Trees == nil {
		t.Fatalf("after xgboost recovered: %+v; want a new tree bundle", pub)
	}
}

// lockedWriter serialises log writes from the targets' goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
