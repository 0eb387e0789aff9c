package main

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSoak runs a trainer (with xgboost, when installed) and a predictor as
// processes under mixed load: predictions from two clients back to back,
// ingestion of 500 samples a second, retrains every second, and a trainer
// restart (SIGTERM, then start again on the same data) halfway. It asserts
// zero failed predictions, zero lost acknowledged samples, bundles that
// keep coming after the restart, and a flat predictor RSS. 10 s by
// default; 60 s with HEADROOM_LONG_TESTS=1.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10 s soak; skipped with -short")
	}
	duration := 10 * time.Second
	if longTests() {
		duration = 60 * time.Second
	}
	dataDir := t.TempDir()
	trainerAddr, predictorAddr := freeAddr(t), freeAddr(t)
	trainerURL, predictorURL := "http://"+trainerAddr, "http://"+predictorAddr
	// Retrains a second, niced rather than in the idle class: on a machine
	// busy with other tests, idle-class runs wait out their grace, and a
	// 10 s soak would see no retrain on one side of the restart. (The idle
	// class has tests of its own, in package trainer.)
	// Self-tuning off: its first choice of configurations fits a dozen
	// candidate models, which under the race detector on a loaded machine
	// took seconds of the 10 s soak (bundles v3 and v4 where there were v6
	// and v9), and this test is about bundles that keep coming through a
	// restart; the choice has its own tests (trainer/select_test.go).
	trainerArgs := durableTrainerArgs(dataDir, trainerAddr, "--retrain-interval", "1s", "--min-samples", "50",
		"--xgb-rounds", "50", "--train-idle=false", "--self-tune=false")
	tr := startProc(t, nil, trainerArgs...)
	tr.waitHealthy(trainerURL, 20*time.Second)
	l := newLedger()
	mustIngest(t, l, trainerURL, 500)

	// GOGC=100: a predictor otherwise lets its heap grow towards its memory
	// limit before collecting (tuneGC), a climb this run's first half does
	// not finish, which the leak check below would read as growth. A leak
	// grows past any collector's steady state all the same.
	pr := startProc(t, []string{"GOGC=100"}, "predictor", "--data-dir", t.TempDir(), "--predictor-listen", predictorAddr,
		"--trainer-url", trainerURL, "--sync-interval", "250ms", "--log-level", "warn")
	pr.waitHealthy(predictorURL, 20*time.Second)
	waitFor(t, "the predictor's first bundle", 30*time.Second, func() bool {
		code, _ := getJSON(predictorURL+"/readyz", nil)
		return code == 200
	})

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var predictions predictionStats
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 5 * time.Second}
			for ctx.Err() == nil {
				predictions.predictOnce(client, predictorURL)
				time.Sleep(time.Millisecond)
			}
		}()
	}
	var ingestErr atomic.Value
	var batches, unanswered atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		client := &http.Client{Timeout: 10 * time.Second}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			<-tick.C
			status, err := l.post(context.Background(), client, trainerURL, l.newBatch(25, 10))
			batches.Add(1)
			if err != nil {
				ingestErr.Store(err)
			}
			if status == 0 {
				unanswered.Add(1)
			}
		}
	}()
	var rss []int64
	var versions []uint64
	var sampleMu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			time.Sleep(250 * time.Millisecond)
			n, err := pr.rssBytes()
			var st predictorStatus
			getJSON(predictorURL+"/status", &st)
			sampleMu.Lock()
			if err == nil {
				rss = append(rss, n)
			}
			versions = append(versions, st.Generation)
			sampleMu.Unlock()
		}
	}()

	time.Sleep(duration / 2)
	sampleMu.Lock()
	beforeRestart := versions[len(versions)-1]
	sampleMu.Unlock()
	restartAt := time.Now()
	if code := tr.stop(20 * time.Second); code != 0 {
		t.Errorf("trainer exit %d on SIGTERM; log:\n%s", code, tr.logs)
	}
	tr = startProc(t, nil, trainerArgs...)
	tr.waitHealthy(trainerURL, 20*time.Second)
	downFor := time.Since(restartAt)
	time.Sleep(duration / 2)
	// And on until the restarted trainer's first bundle is served, within
	// a bound: it does not know when its predecessor last measured the
	// extrapolation's spreads, so its first retrain measures them, which
	// under the race detector on a loaded machine took longer than the
	// half (v3 before the restart, v3 at the end, with nothing logged
	// above info). The assertion below is unchanged: bundles must come on
	// both sides of the restart.
	lastVersion := func() uint64 {
		sampleMu.Lock()
		defer sampleMu.Unlock()
		return versions[len(versions)-1]
	}
	extra := time.Now()
	for lastVersion() <= beforeRestart && time.Since(extra) < 30*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	extraFor := time.Since(extra)
	stop()
	wg.Wait()

	if err, _ := ingestErr.Load().(error); err != nil {
		t.Errorf("ingest answer inconsistent with the request: %v", err)
	}
	n, p50, p99, max := predictions.summary()
	predictions.mu.Lock()
	failed := len(predictions.failures)
	if failed > 0 {
		t.Errorf("%d of %d predictions failed, first: %s", failed, n, predictions.failures[0])
	}
	predictions.mu.Unlock()
	last := lastVersion()
	if beforeRestart < 1 || last <= beforeRestart {
		t.Errorf("bundle versions served: %d before the restart, %d at the end; want retrains on both sides", beforeRestart, last)
	}
	if code := tr.stop(20 * time.Second); code != 0 {
		t.Errorf("trainer exit %d on SIGTERM; log:\n%s", code, tr.logs)
	}
	if code := pr.stop(20 * time.Second); code != 0 {
		t.Errorf("predictor exit %d on SIGTERM; log:\n%s", code, pr.logs)
	}
	c := l.check(t, filepath.Join(dataDir, "samples.db"), durableStoreOptions)

	// Memory: the second half's peak against the first half's settled
	// level. A leak per request or per bundle shows as steady growth.
	warm := rss[len(rss)/4 : len(rss)/2]
	settled := slices.Max(warm)
	peak := slices.Max(rss[len(rss)/2:])
	growth := float64(peak-settled) / float64(settled)
	t.Logf("soak %v: %d predictions, %d failed, p50 %v p99 %v max %v; %d ingest batches (%d unanswered during the %v restart), "+
		"%d samples acknowledged, %d found; bundles v%d before the restart, v%d at the end (%v past the half); predictor RSS %.1f MiB settled, %.1f MiB peak later (%+.1f%%)",
		duration, n, failed, p50.Round(time.Microsecond), p99.Round(time.Microsecond), max.Round(time.Microsecond),
		batches.Load(), unanswered.Load(), downFor.Round(time.Millisecond), c.Acked, c.AckedFound, beforeRestart, last,
		extraFor.Round(time.Millisecond), float64(settled)/(1<<20), float64(peak)/(1<<20), 100*growth)
	if growth > 0.25 && peak-settled > 16<<20 {
		t.Errorf("predictor RSS grew from %d to %d bytes under steady load", settled, peak)
	}
}
