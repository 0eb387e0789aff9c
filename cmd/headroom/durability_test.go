package main

import (
	"context"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/store"
)

// durableStoreOptions are the store options of durableTrainerArgs: large
// enough that nothing is evicted, so every acknowledged sample must still be
// there at the end.
var durableStoreOptions = store.Options{BucketCapacity: 1 << 20, HoldoutCapacity: 1 << 20}

func durableTrainerArgs(dataDir, addr string, extra ...string) []string {
	return append([]string{"trainer", "--data-dir", dataDir, "--trainer-listen", addr,
		"--bucket-capacity", strconv.Itoa(durableStoreOptions.BucketCapacity),
		"--holdout-capacity", strconv.Itoa(durableStoreOptions.HoldoutCapacity),
		"--log-level", "warn"}, extra...)
}

// loadGenerator posts ledger batches from several goroutines to whatever
// trainer url currently holds, until stopped.
type loadGenerator struct {
	l        *ledger
	url      atomic.Pointer[string]
	stopping chan struct{}
	wg       sync.WaitGroup
	requests atomic.Int64
	errs     chan error
}

func startLoad(l *ledger, url string, workers, maxBatch, invalidEvery int) *loadGenerator {
	g := &loadGenerator{l: l, stopping: make(chan struct{}), errs: make(chan error, workers)}
	g.url.Store(&url)
	for w := range workers {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			client := &http.Client{Timeout: 10 * time.Second}
			for {
				select {
				case <-g.stopping:
					return
				default:
				}
				b := l.newBatch(1+rng.IntN(maxBatch), invalidEvery)
				status, err := l.post(context.Background(), client, *g.url.Load(), b)
				g.requests.Add(1)
				if err != nil {
					g.errs <- err
					return
				}
				if status == 0 { // trainer down: back off briefly
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	return g
}

func (g *loadGenerator) setURL(url string) { g.url.Store(&url) }

// stop ends the load and returns the first protocol error seen, if any.
func (g *loadGenerator) stop() error {
	close(g.stopping)
	g.wg.Wait()
	select {
	case err := <-g.errs:
		return err
	default:
		return nil
	}
}

// bundleWatcher records the newest bundle version the trainer has served.
type bundleWatcher struct {
	maxSeen atomic.Uint64
}

func (w *bundleWatcher) poll(ctx context.Context, url func() string) {
	client := &http.Client{Timeout: time.Second}
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, "GET", url()+"/model/bundle", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if v, err := strconv.ParseUint(resp.Header.Get("X-Headroom-Bundle-Version"), 10, 64); err == nil && resp.StatusCode == 200 {
				for old := w.maxSeen.Load(); v > old && !w.maxSeen.CompareAndSwap(old, v); old = w.maxSeen.Load() {
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkBundleDir asserts that every bundle file in dir verifies, and that
// the newest is at least the newest version the trainer ever served (a
// bundle is on disk before it is served). It returns the newest version
// and the number of temporary files a kill left behind.
func checkBundleDir(t *testing.T, dir string, served uint64) (newest uint64, leftovers int) {
	t.Helper()
	versions, err := bundle.Versions(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		data, err := os.ReadFile(bundle.Path(dir, v))
		if err == nil {
			_, err = bundle.Decode(data, nil)
		}
		if err != nil {
			t.Errorf("bundle %d left by a kill does not load: %v", v, err)
		}
	}
	if len(versions) > 0 {
		newest = versions[0]
	}
	if newest < served {
		t.Errorf("newest bundle on disk is %d, but the trainer served %d before the kill", newest, served)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			leftovers++
		}
	}
	return newest, leftovers
}

// TestKill9KeepsAcknowledgedSamples ingests unique samples from several
// goroutines into a trainer process, SIGKILLs it at random moments (during
// start-up, ingest, retrain and publish), restarts it each time on the same
// data directory, and then checks the store against every answer the
// clients got: each acknowledged sample present exactly as sent, nothing
// refused or invalid present, nothing duplicated or half-stored. After
// every kill the bundles on disk must all load, and the newest must not be
// older than the last one served. HEADROOM_LONG_TESTS=1 kills 30 times.
func TestKill9KeepsAcknowledgedSamples(t *testing.T) {
	kills := 4
	if longTests() {
		kills = 30
	}
	dataDir := t.TempDir()
	bundleDir := filepath.Join(dataDir, "bundles")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	l := newLedger()
	// Linear models only: a killed trainer would orphan its xgboost child,
	// and the xgboost failure modes have tests of their own (trainer package).
	extra := []string{"--no-xgboost", "--retrain-interval", "50ms", "--min-samples", "10"}

	addr := freeAddr(t)
	p := startProc(t, nil, durableTrainerArgs(dataDir, addr, extra...)...)
	p.waitHealthy("http://"+addr, 20*time.Second)
	url := "http://" + addr
	load := startLoad(l, url, 4, 200, 20)
	var watch bundleWatcher
	ctx, cancel := context.WithCancel(context.Background())
	var currentURL atomic.Value
	currentURL.Store(url)
	go watch.poll(ctx, func() string { return currentURL.Load().(string) })
	defer cancel()

	var killedDuringStart, leftovers int
	duringStart := false
	for k := 0; k < kills; k++ {
		// Mostly kill under load; now and then during start-up, before the
		// store has finished opening.
		if duringStart {
			time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
			killedDuringStart++
		} else {
			time.Sleep(time.Duration(200+rng.IntN(1000)) * time.Millisecond)
		}
		p.kill()
		served := watch.maxSeen.Load()
		_, n := checkBundleDir(t, bundleDir, served)
		leftovers += n

		addr = freeAddr(t)
		url = "http://" + addr
		p = startProc(t, nil, durableTrainerArgs(dataDir, addr, extra...)...)
		currentURL.Store(url)
		load.setURL(url)
		duringStart = k < kills-1 && rng.IntN(4) == 0
		if !duringStart {
			p.waitHealthy(url, 20*time.Second)
		}
	}
	p.waitHealthy(url, 20*time.Second)
	time.Sleep(300 * time.Millisecond) // some load on the last restart too
	if err := load.stop(); err != nil {
		t.Fatalf("ingest answer inconsistent with the request: %v", err)
	}
	cancel()
	served := watch.maxSeen.Load()

	// The restarted trainer serves the newest bundle it had published (or
	// a newer one, if it retrained since).
	if v := bundleVersion(url); v < served {
		t.Errorf("after the restarts the trainer serves bundle %d; it had served %d before", v, served)
	}
	if code := p.stop(20 * time.Second); code != 0 {
		t.Fatalf("final SIGTERM: exit %d; log:\n%s", code, p.logs)
	}
	newest, n := checkBundleDir(t, bundleDir, served)
	leftovers += n

	c := l.check(t, filepath.Join(dataDir, "samples.db"), durableStoreOptions)
	t.Logf("%d SIGKILLs (%d during start-up), %d requests: %d entries sent; %d acknowledged, %d of them found; "+
		"%d invalid and %d refused by status, %d never delivered: none found; %d unanswered, %d of them stored whole; "+
		"%d per-target records; bundles up to v%d, newest served v%d, %d temporary files left by kills",
		kills, killedDuringStart, load.requests.Load(), c.Sent, c.Acked, c.AckedFound, c.Rejected, c.Refused,
		c.NotDelivered, c.Unknown, c.UnknownFound, c.StoredSamples, newest, served, leftovers)
	if c.Acked == 0 || c.Rejected == 0 {
		t.Errorf("the run acknowledged %d and rejected %d entries; the test needs both to mean anything", c.Acked, c.Rejected)
	}
}
