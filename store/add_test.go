package store

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/headroomhq/headroom/features"
)

func TestAddRoutesByLabel(t *testing.T) {
	row := features.Row{KVCachePercentage: 0.42, PrefixCacheScore: 0.3}
	tests := []struct {
		name          string
		sample        features.Sample
		ttft, tpot    int
		discarded     int
		wantBucketKey string
	}{
		{"ttft only", features.Sample{Row: row, ActualTTFTMs: 120}, 1, 0, 0, "kv_4_prefix_1"},
		{"tpot only", features.Sample{Row: row, ActualTPOTMs: 9}, 0, 1, 0, "kv_4_prefix_1"},
		{"both", features.Sample{Row: row, ActualTTFTMs: 120, ActualTPOTMs: 9}, 1, 1, 0, "kv_4_prefix_1"},
		{"neither", features.Sample{Row: row}, 0, 0, 1, ""},
		{"negative labels", features.Sample{Row: row, ActualTTFTMs: -3, ActualTPOTMs: -1}, 0, 0, 1, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			o.HoldoutFraction = -1
			db := openTest(t, tempPath(t), o)
			res := mustAdd(t, db, []features.Sample{tc.sample})
			want := AddResult{Train: [numStreams]int{tc.ttft, tc.tpot}, Discarded: tc.discarded}
			if !reflect.DeepEqual(res, want) {
				t.Errorf("Add = %+v, want %+v", res, want)
			}
			for _, tg := range features.PodTargets {
				n := map[features.Target]int{features.TTFT: tc.ttft, features.TPOT: tc.tpot}[tg]
				if got := db.Counts().Train(tg); got != n {
					t.Errorf("%s: %d training samples, want %d", tg, got, n)
				}
				if n > 0 {
					if bc := db.BucketCounts(tg); bc[tc.wantBucketKey] != 1 || len(bc) != 1 {
						t.Errorf("%s: bucket counts %v, want {%s: 1}", tg, bc, tc.wantBucketKey)
					}
				}
				// Only targets that got samples change generation.
				if wantGen := uint64(min(n, 1)); db.Generation(tg) != wantGen {
					t.Errorf("%s: generation %d, want %d", tg, db.Generation(tg), wantGen)
				}
			}
		})
	}
}

// sameBucket returns n TTFT-only samples of one bucket, identified by
// timestamps 0..n-1 µs after testEpoch+offset.
func sameBucket(n int, offset time.Duration) []features.Sample {
	out := make([]features.Sample, n)
	for i := range out {
		out[i] = features.Sample{
			Row:          features.Row{KVCachePercentage: 0.55, PrefixCacheScore: 0.1, InputTokenLength: int64(100 + i)},
			ActualTTFTMs: 50,
			Timestamp:    testEpoch.Add(offset + time.Duration(i)*time.Microsecond),
		}
	}
	return out
}

func TestEvictionKeepsNewest(t *testing.T) {
	const capacity = 5
	tests := []struct {
		name    string
		batches []int
	}{
		{"one big batch", []int{12}},
		{"small batches", []int{3, 3, 3, 3}},
		{"fill then overflow", []int{5, 7}},
		{"one at a time", []int{1, 1, 1, 1, 1, 1, 1}},
		{"exactly full", []int{2, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			o.BucketCapacity = capacity
			o.HoldoutFraction = -1
			db := openTest(t, tempPath(t), o)
			var all []features.Sample
			evicted := 0
			for i, n := range tc.batches {
				batch := sameBucket(n, time.Duration(i)*time.Second)
				all = append(all, batch...)
				evicted += mustAdd(t, db, batch).Evicted[features.TTFT]
			}
			want := all[max(0, len(all)-capacity):]
			if evicted != len(all)-len(want) {
				t.Errorf("evicted %d, want %d", evicted, len(all)-len(want))
			}
			train, _, err := db.Snapshot(features.TTFT)
			if err != nil {
				t.Fatal(err)
			}
			if !samplesEqual(train, want) {
				t.Errorf("kept %v, want the newest %d", timestamps(train), len(want))
			}
			if got := db.BucketCounts(features.TTFT)["kv_5_prefix_0"]; got != len(want) {
				t.Errorf("bucket count %d, want %d", got, len(want))
			}
		})
	}
}

func TestHoldoutEvictionKeepsNewest(t *testing.T) {
	o := testOptions()
	o.HoldoutFraction = 0.999999 // (almost) everything
	o.HoldoutCapacity = 4
	db := openTest(t, tempPath(t), o)
	all := append(sameBucket(6, 0), sameBucket(3, time.Second)...)
	mustAdd(t, db, all[:6])
	res := mustAdd(t, db, all[6:])
	if res.Evicted[features.TTFT] != 3 {
		t.Errorf("second Add evicted %d, want 3", res.Evicted[features.TTFT])
	}
	train, holdout, err := db.Snapshot(features.TTFT)
	if err != nil {
		t.Fatal(err)
	}
	// The first Add's minute had room for 4 of its 6: the other 2, its
	// oldest, went to training (holdout.go).
	if !samplesEqual(train, all[:2]) || !samplesEqual(holdout, all[len(all)-4:]) {
		t.Errorf("train %v, holdout %v: want the first Add's 2 oldest and the newest 4", timestamps(train), timestamps(holdout))
	}
}

func timestamps(ss []features.Sample) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Timestamp.Sub(testEpoch).String()
	}
	return out
}

func TestHoldoutSplit(t *testing.T) {
	const n = 10000
	o := testOptions()
	o.BucketCapacity = n
	o.HoldoutCapacity = n
	samples := testSamples(n, 42, 0)
	path := tempPath(t)
	db := openTest(t, path, o)
	res := mustAdd(t, db, samples)

	held := func(db *DB, tg features.Target) map[time.Time]bool {
		_, holdout, err := db.Snapshot(tg)
		if err != nil {
			t.Fatal(err)
		}
		m := make(map[time.Time]bool)
		for _, s := range holdout {
			m[s.Timestamp] = true
		}
		return m
	}
	var sets [numStreams]map[time.Time]bool
	for _, tg := range features.PodTargets {
		labelled := res.Train[tg] + res.Holdout[tg]
		if labelled != n*4/5 {
			t.Fatalf("%s: %d labelled samples stored, want %d", tg, labelled, n*4/5)
		}
		// Binomial(8000, 0.1): sd ≈ 27, so ±120 is beyond 4 sd.
		if f := float64(res.Holdout[tg]) / float64(labelled); math.Abs(f-0.1) > 0.015 {
			t.Errorf("%s: held out %.3f of samples, want about 0.1", tg, f)
		}
		sets[tg] = held(db, tg)
		if len(sets[tg]) != res.Holdout[tg] {
			t.Errorf("%s: %d holdout samples stored, Add said %d", tg, len(sets[tg]), res.Holdout[tg])
		}
	}
	// Independent per target: of the 6000 samples with both labels about
	// 1% (sd ≈ 8) are held out for both; with one shared decision it
	// would be 10%.
	both := 0
	for ts := range sets[features.TTFT] {
		if sets[features.TPOT][ts] {
			both++
		}
	}
	if both < 30 || both > 100 {
		t.Errorf("%d samples held out for both targets, want about 60", both)
	}

	// Decided by the store's secret: another store with the same secret
	// puts the same samples on the same side; one with another secret, a
	// store of its own, holds out another tenth, about a tenth of it in
	// common, so nobody who does not know a store's secret can tell which.
	secret, err := readSecretOf(db)
	if err != nil {
		t.Fatal(err)
	}
	same, other := o, o
	same.Secret = secret
	sameStore, otherStore := openTest(t, tempPath(t), same), openTest(t, tempPath(t), other)
	mustAdd(t, sameStore, samples)
	mustAdd(t, otherStore, samples)
	for _, tg := range features.PodTargets {
		if !mapsEqualTime(held(sameStore, tg), sets[tg]) {
			t.Errorf("%s: a store with the same secret held out different samples", tg)
		}
		common := 0
		for ts := range held(otherStore, tg) {
			if sets[tg][ts] {
				common++
			}
		}
		// 8,000 labelled, 800 held out by each: about 80 in common (sd ≈ 8.5).
		if common < 40 || common > 130 {
			t.Errorf("%s: a store of its own held out %d of the same samples, want about 80", tg, common)
		}
	}

	// Across a restart the secret is the same: a held-out sample sent
	// again is a duplicate of itself, and nothing is stored.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, path, o)
	var again []features.Sample
	for _, s := range samples {
		if sets[features.TTFT][s.Timestamp] {
			again = append(again, s)
		}
	}
	res = mustAdd(t, db, again)
	if res.Duplicates != len(again) || res.Holdout[features.TTFT]+res.Train[features.TTFT] != 0 {
		t.Errorf("re-added %d TTFT holdout samples: %d duplicates, %d to holdout, %d to training; want all duplicates",
			len(again), res.Duplicates, res.Holdout[features.TTFT], res.Train[features.TTFT])
	}
}

// readSecretOf reads a store's secret, as a test that wants a second
// store to agree with it needs.
func readSecretOf(db *DB) (secret []byte, err error) {
	err = db.bolt.View(func(tx *bolt.Tx) error {
		secret, err = readSecret(tx.Bucket(bucketMeta))
		return err
	})
	return secret, err
}

func mapsEqualTime(a, b map[time.Time]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func TestAddIsOneTransaction(t *testing.T) {
	db := openTest(t, tempPath(t), testOptions())
	samples := testSamples(10000, 1, 0)
	before := db.commits.Load()
	res := mustAdd(t, db, samples)
	if c := db.commits.Load() - before; c != 1 {
		t.Errorf("a 10,000-sample Add made %d commits, want 1", c)
	}
	if res.Train[features.TTFT]+res.Holdout[features.TTFT]+res.Evicted[features.TTFT] < 8000 {
		t.Errorf("result %+v does not account for 8000 TTFT samples", res)
	}

	// A bad sample fails the whole call before anything is written.
	counts, gen := db.Counts(), db.Generation(features.TTFT)
	bad := testSamples(10000, 2, time.Hour)
	bad[9999].ActualTTFTMs = math.NaN()
	before = db.commits.Load()
	_, err := db.Add(bad)
	if err == nil || !strings.Contains(err.Error(), "sample 9999") {
		t.Fatalf("Add with a NaN label: err = %v, want one naming sample 9999", err)
	}
	if db.commits.Load() != before || db.Counts() != counts || db.Generation(features.TTFT) != gen {
		t.Error("a failed Add changed the store")
	}
}

// A commit that fails (here: the file may not grow) leaves nothing of the
// call behind, in memory or on disk.
func TestAddRollsBackFailedCommit(t *testing.T) {
	path := tempPath(t)
	o := testOptions()
	o.tune = func(b *bolt.Options) { b.MaxSize = 256 << 10 }
	db, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	first := testSamples(100, 1, 0)
	mustAdd(t, db, first)
	counts, gen := db.Counts(), db.Generation(features.TTFT)
	if _, err := db.Add(testSamples(10000, 2, time.Hour)); !errors.Is(err, berrors.ErrMaxSizeReached) {
		t.Fatalf("Add beyond MaxSize: err = %v", err)
	}
	if db.Counts() != counts || db.Generation(features.TTFT) != gen {
		t.Errorf("counts %+v gen %d after a failed commit, want %+v %d", db.Counts(), db.Generation(features.TTFT), counts, gen)
	}
	train, holdout, err := db.Snapshot(features.TTFT)
	if err != nil || len(train)+len(holdout) != counts.Train(features.TTFT)+counts.Holdout(features.TTFT) {
		t.Errorf("snapshot after failed commit: %d+%d samples, err %v", len(train), len(holdout), err)
	}
	// The store still takes writes that fit, continuing its sequence.
	mustAdd(t, db, testSamples(10, 3, 2*time.Hour))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, path, testOptions())
	if got := db.Counts().Train(features.TTFT) + db.Counts().Holdout(features.TTFT); got != 80+8 {
		t.Errorf("after reopen %d TTFT samples, want 88", got)
	}
}

func TestAddRejectsOutOfRangeTimestamp(t *testing.T) {
	db := openTest(t, tempPath(t), testOptions())
	s := testSamples(3, 1, 0)
	s[1].Timestamp = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := db.Add(s); err == nil || !strings.Contains(err.Error(), "sample 1") {
		t.Errorf("err = %v, want one naming sample 1", err)
	}
	if c := db.Counts(); c.Train(features.TTFT)+c.Holdout(features.TTFT) != 0 {
		t.Error("a rejected call stored samples")
	}
}

// Many writers and readers at once; run with -race. Every reader sees a
// consistent state and the final counts add up.
func TestConcurrentAddSnapshotCounts(t *testing.T) {
	o := testOptions()
	o.BucketCapacity = 100000
	o.HoldoutCapacity = 100000
	db := openTest(t, tempPath(t), o)
	const writers, batches, size = 4, 10, 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total AddResult
	for w := range writers {
		wg.Go(func() {
			for b := range batches {
				res, err := db.Add(testSamples(size, uint64(w*batches+b), time.Duration(w*batches+b)*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, tg := range features.PodTargets {
					total.Train[tg] += res.Train[tg]
					total.Holdout[tg] += res.Holdout[tg]
				}
				mu.Unlock()
			}
		})
	}
	done := make(chan struct{})
	var readers sync.WaitGroup
	for range 3 {
		readers.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				snap, err := db.SnapshotBuckets(features.TTFT)
				if err != nil {
					t.Error(err)
					return
				}
				// A snapshot holds whole Adds: each writer's batch of 200
				// has 160 TTFT samples, so the total is a multiple of 160.
				n := len(snap.Holdout)
				for _, b := range snap.Buckets {
					n += len(b.Samples)
				}
				if n%160 != 0 {
					t.Errorf("snapshot of %d TTFT samples: not whole Adds", n)
				}
				_ = db.Counts().Train(features.TPOT)
				_ = db.BucketCounts(features.TPOT)
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()
	for _, tg := range features.PodTargets {
		c := db.Counts()
		if c.Train(tg) != total.Train[tg] || c.Holdout(tg) != total.Holdout[tg] {
			t.Errorf("%s: counts %d/%d, Adds reported %d/%d", tg, c.Train(tg), c.Holdout(tg), total.Train[tg], total.Holdout[tg])
		}
		if db.Generation(tg) != writers*batches {
			t.Errorf("%s: generation %d after %d Adds", tg, db.Generation(tg), writers*batches)
		}
	}
}

// BenchmarkAdd1000 stores batches of 1000 varied samples with real fsync,
// into a store that fills up and then evicts, as in service.
func BenchmarkAdd1000(b *testing.B) {
	benchmarkAdd(b, false)
}

// BenchmarkAdd1000NoSync is the same without fsync: the CPU cost alone.
func BenchmarkAdd1000NoSync(b *testing.B) {
	benchmarkAdd(b, true)
}

func benchmarkAdd(b *testing.B, noSync bool) {
	o := Options{NoSync: noSync}
	db, err := Open(tempPath(b), o)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const batch = 1000
	batches := make([][]features.Sample, 64)
	for i := range batches {
		batches[i] = testSamples(batch, uint64(i), time.Duration(i)*time.Second)
	}
	b.ReportAllocs()
	i := 0
	scratch := make([]features.Sample, batch)
	for b.Loop() {
		if _, err := db.Add(distinct(scratch, batches, i)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(i*batch)/b.Elapsed().Seconds(), "samples/s")
}

// distinct is op i's batch of a benchmark cycling through batches: the
// batch, its timestamps moved on by a cycle's span for each cycle, so that
// no op repeats an earlier one's samples, which the store would count as
// duplicates and not store (dedup.go). It fills scratch.
func distinct(scratch []features.Sample, batches [][]features.Sample, i int) []features.Sample {
	src := batches[i%len(batches)]
	shift := time.Duration(i/len(batches)) * time.Duration(len(batches)) * time.Second
	scratch = append(scratch[:0], src...)
	for k := range scratch {
		scratch[k].Timestamp = scratch[k].Timestamp.Add(shift)
	}
	return scratch
}
