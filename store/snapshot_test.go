package store

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

func TestSnapshotOrderAndBuckets(t *testing.T) {
	o := testOptions()
	o.BucketCapacity = 30 // small, so eviction interleaves with the order
	db := openTest(t, tempPath(t), o)
	var added []features.Sample
	for i := range 6 {
		batch := testSamples(500, uint64(i), time.Duration(i)*time.Second)
		mustAdd(t, db, batch)
		added = append(added, batch...)
	}
	byTime := make(map[time.Time]features.Sample, len(added))
	for _, s := range added {
		byTime[s.Timestamp] = s
	}
	for _, tg := range features.PodTargets {
		train, holdout, err := db.Snapshot(tg)
		if err != nil {
			t.Fatal(err)
		}
		c := db.Counts()
		if len(train) != c.Train(tg) || len(holdout) != c.Holdout(tg) {
			t.Fatalf("%s: snapshot %d/%d, counts %d/%d", tg, len(train), len(holdout), c.Train(tg), c.Holdout(tg))
		}
		// Timestamps grow with insertion in testSamples: insertion order
		// is timestamp order.
		for name, ss := range map[string][]features.Sample{"train": train, "holdout": holdout} {
			if !slices.IsSortedFunc(ss, func(a, b features.Sample) int { return a.Timestamp.Compare(b.Timestamp) }) {
				t.Errorf("%s %s: not oldest first", tg, name)
			}
			// Eviction drops samples but never alters one.
			for i := range ss {
				if want, ok := byTime[ss[i].Timestamp]; !ok || !sampleEqual(&ss[i], &want) {
					t.Errorf("%s %s: sample at %v is not one that was added", tg, name, ss[i].Timestamp)
					break
				}
			}
		}

		snap, err := db.SnapshotBuckets(tg)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Generation != db.Generation(tg) {
			t.Errorf("%s: snapshot generation %d, DB says %d", tg, snap.Generation, db.Generation(tg))
		}
		if !samplesEqual(snap.Holdout, holdout) {
			t.Errorf("%s: SnapshotBuckets and Snapshot disagree on the holdout", tg)
		}
		counts := db.BucketCounts(tg)
		var keys []string
		var flat []features.Sample
		for _, b := range snap.Buckets {
			keys = append(keys, b.Key)
			if len(b.Samples) != counts[b.Key] || len(b.Samples) > o.BucketCapacity {
				t.Errorf("%s %s: %d samples, BucketCounts says %d", tg, b.Key, len(b.Samples), counts[b.Key])
			}
			for _, s := range b.Samples {
				if db.Scheme().Key(&s.Row) != b.Key {
					t.Errorf("%s: sample of bucket %s in bucket %s", tg, db.Scheme().Key(&s.Row), b.Key)
				}
			}
			flat = append(flat, b.Samples...)
		}
		if !slices.IsSorted(keys) || len(keys) != len(counts) {
			t.Errorf("%s: bucket keys %v not sorted or not the non-empty buckets %v", tg, keys, counts)
		}
		// The merged training set is the buckets' samples, re-ordered.
		slices.SortFunc(flat, func(a, b features.Sample) int { return a.Timestamp.Compare(b.Timestamp) })
		if !samplesEqual(flat, train) {
			t.Errorf("%s: merged training set differs from the buckets", tg)
		}
		// A caller appending to one bucket must not clobber the next.
		if len(snap.Buckets) > 1 {
			first, second := snap.Buckets[0].Samples, snap.Buckets[1].Samples[0]
			_ = append(first, features.Sample{})
			if !sampleEqual(&snap.Buckets[1].Samples[0], &second) {
				t.Errorf("%s: appending to a bucket overwrote the next", tg)
			}
		}
	}
	if _, _, err := db.Snapshot(features.Target(7)); err == nil {
		t.Error("Snapshot of an unknown target succeeded")
	}
}

// The snapshot is a copy: later Adds and Flushes do not change it.
func TestSnapshotIsACopy(t *testing.T) {
	db := openTest(t, tempPath(t), testOptions())
	mustAdd(t, db, testSamples(300, 1, 0))
	train, holdout, err := db.Snapshot(features.TTFT)
	if err != nil {
		t.Fatal(err)
	}
	keep := slices.Clone(train)
	keepHoldout := slices.Clone(holdout)
	mustAdd(t, db, testSamples(300, 2, time.Second))
	if _, err := db.Flush(true, true); err != nil {
		t.Fatal(err)
	}
	if !samplesEqual(train, keep) || !samplesEqual(holdout, keepHoldout) {
		t.Error("snapshot changed after Add and Flush")
	}
}

// BenchmarkSnapshot reads a full default store: 40 buckets × 500 samples
// of one target, plus its holdout.
func BenchmarkSnapshot(b *testing.B) {
	db, err := Open(tempPath(b), Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	for i := 0; db.Counts().Train(features.TTFT) < 20000; i++ {
		if i > 1000 {
			b.Fatalf("store does not fill: %+v", db.Counts())
		}
		if _, err := db.Add(testSamples(5000, uint64(i), time.Duration(i)*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
	n := db.Counts().Train(features.TTFT) + db.Counts().Holdout(features.TTFT)
	b.ReportAllocs()
	for b.Loop() {
		train, holdout, err := db.Snapshot(features.TTFT)
		if err != nil || len(train)+len(holdout) != n {
			b.Fatalf("snapshot: %d samples, err %v", len(train)+len(holdout), err)
		}
	}
	b.ReportMetric(float64(n), "samples")
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "samples/s")
}

func TestShareEvenly(t *testing.T) {
	for _, tt := range []struct {
		counts []int
		total  int
		want   []int
	}{
		{[]int{10, 10, 10}, 30, []int{10, 10, 10}},
		{[]int{10, 10, 10}, 100, []int{10, 10, 10}},
		{[]int{10, 10, 10}, 12, []int{4, 4, 4}},
		{[]int{10, 10, 10}, 13, []int{5, 4, 4}},
		{[]int{2, 0, 50, 50}, 40, []int{2, 0, 19, 19}},
		{[]int{2, 0, 50, 7}, 40, []int{2, 0, 31, 7}},
		{[]int{1, 1, 1}, 2, []int{1, 1, 0}},
		{[]int{0, 0}, 5, []int{0, 0}},
		{nil, 5, []int{}},
	} {
		got := shareEvenly(tt.counts, tt.total)
		if !slices.Equal(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
			t.Errorf("shareEvenly(%v, %d) = %v, want %v", tt.counts, tt.total, got, tt.want)
		}
	}
}

// SnapshotNewest keeps each bucket's newest samples within an even share of
// the cap, in insertion order like Snapshot, and is Snapshot when the cap
// is not reached.
func TestSnapshotHoldout(t *testing.T) {
	db := openTest(t, tempPath(t), testOptions())
	for i := range 3 {
		mustAdd(t, db, testSamples(200, uint64(i), time.Duration(i)*time.Second))
	}
	for _, tg := range features.PodTargets {
		_, want, err := db.Snapshot(tg)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 {
			t.Fatalf("%s: no held-out samples to compare", tg)
		}
		got, err := db.SnapshotHoldout(context.Background(), tg)
		if err != nil {
			t.Fatal(err)
		}
		if !samplesEqual(got, want) {
			t.Errorf("%s: %d held-out samples, Snapshot has %d", tg, len(got), len(want))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := db.SnapshotHoldout(ctx, features.TTFT); !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: %v", err)
	}
	if _, err := db.SnapshotHoldout(context.Background(), features.Target(9)); err == nil {
		t.Error("unknown target accepted")
	}
}

func TestSnapshotNewest(t *testing.T) {
	o := testOptions()
	o.BucketCapacity = 40
	db := openTest(t, tempPath(t), o)
	for i := range 4 {
		mustAdd(t, db, testSamples(300, uint64(i), time.Duration(i)*time.Second))
	}
	tg := features.TTFT
	all, holdout, err := db.Snapshot(tg)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := db.SnapshotBuckets(tg)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, len(snap.Buckets))
	for i, b := range snap.Buckets {
		counts[i] = len(b.Samples)
	}
	for _, limit := range []int{0, 1, 25, len(all) / 2, len(all) - 1, len(all), len(all) + 10} {
		got, gotHoldout, err := db.SnapshotNewest(context.Background(), tg, limit)
		if err != nil {
			t.Fatal(err)
		}
		if !samplesEqual(gotHoldout, holdout) {
			t.Errorf("limit %d: holdout differs from Snapshot's", limit)
		}
		if limit <= 0 || limit >= len(all) {
			if !samplesEqual(got, all) {
				t.Errorf("limit %d: %d samples, not Snapshot's %d", limit, len(got), len(all))
			}
			continue
		}
		// Expected: each bucket's newest quota, merged in insertion order.
		var want []features.Sample
		for i, q := range shareEvenly(counts, limit) {
			want = append(want, snap.Buckets[i].Samples[counts[i]-q:]...)
		}
		slices.SortFunc(want, func(a, b features.Sample) int { return a.Timestamp.Compare(b.Timestamp) })
		if !samplesEqual(got, want) {
			t.Errorf("limit %d: got %d samples, want the newest %d of each bucket's share", limit, len(got), len(want))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := db.SnapshotNewest(ctx, tg, 25); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled snapshot: err = %v, want context.Canceled", err)
	}
}
