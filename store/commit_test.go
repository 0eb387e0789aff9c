package store

import (
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/headroomhq/headroom/features"
)

// commitTogether commits the batches as one group, as concurrent Adds
// would, and returns each batch's result and error.
func commitTogether(t *testing.T, db *DB, batches [][]features.Sample) ([]AddResult, []error) {
	t.Helper()
	g := &commitGroup{}
	for _, b := range batches {
		p, err := db.plan(b)
		if err != nil {
			t.Fatal(err)
		}
		g.plans = append(g.plans, p)
	}
	db.writeMu.Lock()
	db.commit(g)
	db.writeMu.Unlock()
	return g.res, g.errs
}

// A group commit stores exactly what the same Adds one after another would:
// same results, counts, generations and samples in every bucket, evictions
// between members of the group included.
func TestGroupCommitEqualsSequentialAdds(t *testing.T) {
	o := testOptions()
	o.BucketCapacity = 40 // so later batches evict earlier ones' samples
	o.HoldoutCapacity = 30
	// The same sides, and one arrival slot for every Add of both stores.
	o.Secret = make([]byte, secretLen)
	o.Now = func() time.Time { return testEpoch }
	batches := make([][]features.Sample, 5)
	for i := range batches {
		batches[i] = testSamples(300, uint64(i), time.Duration(i)*time.Second)
	}

	seq := openTest(t, tempPath(t), o)
	var want []AddResult
	for _, b := range batches {
		want = append(want, mustAdd(t, seq, b))
	}

	grouped := openTest(t, tempPath(t), o)
	before := grouped.commits.Load()
	got, errs := commitTogether(t, grouped, batches)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if c := grouped.commits.Load() - before; c != 1 {
		t.Errorf("group of %d made %d commits, want 1", len(batches), c)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("group results %+v\nsequential     %+v", got, want)
	}
	if grouped.Counts() != seq.Counts() {
		t.Errorf("counts %+v, sequential %+v", grouped.Counts(), seq.Counts())
	}
	for _, tg := range features.PodTargets {
		if grouped.Generation(tg) != seq.Generation(tg) {
			t.Errorf("%s: generation %d, sequential %d", tg, grouped.Generation(tg), seq.Generation(tg))
		}
		if !mapsEqual(grouped.BucketCounts(tg), seq.BucketCounts(tg)) {
			t.Errorf("%s: bucket counts differ", tg)
		}
		gt, gh, err1 := grouped.Snapshot(tg)
		st, sh, err2 := seq.Snapshot(tg)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if !samplesEqual(gt, st) || !samplesEqual(gh, sh) {
			t.Errorf("%s: stored samples differ from sequential Adds", tg)
		}
	}
	// The sequence continues after the group as after the Adds.
	if grouped.seq != seq.seq {
		t.Errorf("seq %d, sequential %d", grouped.seq, seq.seq)
	}
}

// When the shared transaction fails, each member is retried alone, so
// only the member that cannot fit fails, and the store holds exactly the
// others.
func TestGroupCommitIsolatesFailure(t *testing.T) {
	o := testOptions()
	o.tune = func(b *bolt.Options) { b.MaxSize = 256 << 10 }
	db := openTest(t, tempPath(t), o)
	small1 := testSamples(50, 1, 0)
	huge := testSamples(10000, 2, time.Hour)
	small2 := testSamples(50, 3, 2*time.Hour)
	res, errs := commitTogether(t, db, [][]features.Sample{small1, huge, small2})
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("small members failed: %v, %v", errs[0], errs[2])
	}
	if !errors.Is(errs[1], berrors.ErrMaxSizeReached) {
		t.Fatalf("huge member: err = %v, want ErrMaxSizeReached", errs[1])
	}
	c := db.Counts()
	want := res[0].Train[features.TTFT] + res[0].Holdout[features.TTFT] + res[2].Train[features.TTFT] + res[2].Holdout[features.TTFT]
	if got := c.Train(features.TTFT) + c.Holdout(features.TTFT); got != want || want != 80 {
		t.Errorf("store holds %d TTFT samples, members reported %d, want 80", got, want)
	}
	train, holdout, err := db.Snapshot(features.TTFT)
	if err != nil || len(train)+len(holdout) != 80 {
		t.Errorf("snapshot: %d samples, err %v", len(train)+len(holdout), err)
	}
	if db.Generation(features.TTFT) != 2 {
		t.Errorf("generation %d, want 2 (two members stored)", db.Generation(features.TTFT))
	}
}

// Adds that arrive while a commit is in progress wait for it and then
// share one transaction.
func TestConcurrentAddsShareCommit(t *testing.T) {
	db := openTest(t, tempPath(t), testOptions())
	const n = 4
	db.writeMu.Lock() // a commit in progress
	before := db.commits.Load()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = db.Add(testSamples(100, uint64(i), time.Duration(i)*time.Second))
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		db.groupMu.Lock()
		joined := 0
		if db.pending != nil {
			joined = len(db.pending.plans)
		}
		db.groupMu.Unlock()
		if joined == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d Adds joined the pending group", joined, n)
		}
		time.Sleep(time.Millisecond)
	}
	db.writeMu.Unlock()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if c := db.commits.Load() - before; c != 1 {
		t.Errorf("%d waiting Adds made %d commits, want 1", n, c)
	}
	if c := db.Counts(); c.Train(features.TTFT)+c.Holdout(features.TTFT) != n*80 {
		t.Errorf("store holds %d TTFT samples, want %d", c.Train(features.TTFT)+c.Holdout(features.TTFT), n*80)
	}
}

// BenchmarkAdd1000Concurrent stores batches of 1000 from four writers at
// once, as the trainer's four admitted uploads do, with real fsync: group
// commit shares each transaction's page rewrites and fsync among them.
func BenchmarkAdd1000Concurrent(b *testing.B) {
	db, err := Open(tempPath(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const batch, writers = 1000, 4
	batches := make([][]features.Sample, 64)
	for i := range batches {
		batches[i] = testSamples(batch, uint64(i), time.Duration(i)*time.Second)
	}
	before := db.commits.Load()
	b.SetParallelism(writers) // writers × GOMAXPROCS goroutines
	var next sync.Mutex
	i := 0
	b.RunParallel(func(pb *testing.PB) {
		scratch := make([]features.Sample, batch)
		for pb.Next() {
			next.Lock()
			op := i
			i++
			next.Unlock()
			if _, err := db.Add(distinct(scratch, batches, op)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "samples/s")
	b.ReportMetric(float64(b.N)/float64(db.commits.Load()-before), "adds/commit")
}

// BenchmarkAdd1000ConcurrentFullStore is BenchmarkAdd1000Concurrent into
// the default scheme's store filled first (500,000 samples over its 360
// buckets), where each batch lands in nearly every bucket of both targets.
// It reports bbolt's page writes per commit: that cost is the same however
// many uploads share the commit, which is why the trainer admits many
// uploads at once (api.DefaultMaxConcurrentIngest).
func BenchmarkAdd1000ConcurrentFullStore(b *testing.B) {
	db, err := Open(tempPath(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const batch, writers = 1000, 4
	for i := range 500 {
		if _, err := db.Add(testSamples(batch, uint64(1000+i), time.Duration(i)*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
	batches := make([][]features.Sample, 64)
	for i := range batches {
		batches[i] = testSamples(batch, uint64(i), time.Duration(1000+i)*time.Second)
	}
	pageWrites := func() int64 { st := db.bolt.Stats().TxStats; return st.GetWrite() }
	commits0, writes0 := db.commits.Load(), pageWrites()
	b.ResetTimer()
	b.SetParallelism(writers)
	var next sync.Mutex
	i := 0
	b.RunParallel(func(pb *testing.PB) {
		scratch := make([]features.Sample, batch)
		for pb.Next() {
			next.Lock()
			op := i
			i++
			next.Unlock()
			if _, err := db.Add(distinct(scratch, batches, op)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	commits := float64(db.commits.Load() - commits0)
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "samples/s")
	b.ReportMetric(float64(b.N)/commits, "adds/commit")
	b.ReportMetric(float64(pageWrites()-writes0)/commits, "pages/commit")
}
