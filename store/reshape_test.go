package store

import (
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

type storeContent struct {
	train, holdout [numStreams][]features.Sample
	gen            [numStreams]uint64
}

func contentOf(t *testing.T, db *DB) storeContent {
	t.Helper()
	var c storeContent
	for _, tg := range features.PodTargets {
		var err error
		if c.train[tg], c.holdout[tg], err = db.Snapshot(tg); err != nil {
			t.Fatal(err)
		}
		c.gen[tg] = db.Generation(tg)
	}
	return c
}

// newestPerBucket is what re-bucketing must keep: per bucket of scheme,
// the newest capacity samples, in insertion order overall.
func newestPerBucket(samples []features.Sample, scheme Scheme, capacity int) []features.Sample {
	kept := make(map[string]int)
	keep := make([]bool, len(samples))
	for i := len(samples) - 1; i >= 0; i-- {
		if k := scheme.Key(&samples[i].Row); kept[k] < capacity {
			kept[k]++
			keep[i] = true
		}
	}
	var out []features.Sample
	for i, s := range samples {
		if keep[i] {
			out = append(out, s)
		}
	}
	return out
}

func TestReopenWithOtherScheme(t *testing.T) {
	tests := []struct {
		name     string
		from, to string
		capacity int // both before and after
	}{
		{"coarser, nothing dropped", "kv10,prefix4", "queue5", 5000},
		{"finer, nothing dropped", "kv10", "queue5,kv10,prefix4,prompt", 5000},
		{"coarser, buckets overflow", "kv10,prefix4", "queue5", 40},
		{"reordered dimensions", "kv10,prefix4", "prefix4,kv10", 40},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tempPath(t)
			o := testOptions()
			o.Scheme = MustParseScheme(tc.from)
			o.BucketCapacity = tc.capacity
			db, err := Open(path, o)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				mustAdd(t, db, testSamples(1000, uint64(i), time.Duration(i)*time.Second))
			}
			before := contentOf(t, db)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}

			o.Scheme = MustParseScheme(tc.to)
			db = openTest(t, path, o)
			after := contentOf(t, db)
			rep := db.OpenReport()
			if rep.FromScheme != tc.from || rep.Created {
				t.Errorf("report %+v, want FromScheme %q", rep, tc.from)
			}
			for _, tg := range features.PodTargets {
				want := newestPerBucket(before.train[tg], o.Scheme, tc.capacity)
				if !samplesEqual(after.train[tg], want) {
					t.Errorf("%s: re-bucketed training set has %d samples, want the newest per bucket: %d",
						tg, len(after.train[tg]), len(want))
				}
				if rep.Dropped[tg] != len(before.train[tg])-len(want) {
					t.Errorf("%s: report says %d dropped, want %d", tg, rep.Dropped[tg], len(before.train[tg])-len(want))
				}
				if !samplesEqual(after.holdout[tg], before.holdout[tg]) {
					t.Errorf("%s: holdout changed", tg)
				}
				if after.gen[tg] != before.gen[tg]+1 {
					t.Errorf("%s: generation %d → %d, want +1", tg, before.gen[tg], after.gen[tg])
				}
				for key, n := range db.BucketCounts(tg) {
					if o.Scheme.index(key) < 0 || n > tc.capacity {
						t.Errorf("%s: bucket %s (%d samples) after re-bucketing to %s", tg, key, n, tc.to)
					}
				}
			}

			// The new scheme is stored: the next reopen changes nothing,
			// and the store takes new samples.
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db = openTest(t, path, o)
			if db.OpenReport() != (OpenReport{}) {
				t.Errorf("second reopen changed the file again: %+v", db.OpenReport())
			}
			again := contentOf(t, db)
			for _, tg := range features.PodTargets {
				if !samplesEqual(again.train[tg], after.train[tg]) || again.gen[tg] != after.gen[tg] {
					t.Errorf("%s: content changed on a plain reopen", tg)
				}
			}
			mustAdd(t, db, testSamples(100, 9, time.Hour))
		})
	}
}

func TestReopenWithSmallerCapacities(t *testing.T) {
	path := tempPath(t)
	o := testOptions()
	db, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		mustAdd(t, db, testSamples(2000, uint64(i), time.Duration(i)*time.Second))
	}
	before := contentOf(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	o.BucketCapacity = 25
	o.HoldoutCapacity = 100
	db = openTest(t, path, o)
	after := contentOf(t, db)
	rep := db.OpenReport()
	for _, tg := range features.PodTargets {
		want := newestPerBucket(before.train[tg], db.Scheme(), o.BucketCapacity)
		if !samplesEqual(after.train[tg], want) {
			t.Errorf("%s: trimmed training set has %d samples, want %d, the newest per bucket", tg, len(after.train[tg]), len(want))
		}
		wantHoldout := before.holdout[tg][len(before.holdout[tg])-o.HoldoutCapacity:]
		if !samplesEqual(after.holdout[tg], wantHoldout) {
			t.Errorf("%s: holdout has %d samples, want the newest %d", tg, len(after.holdout[tg]), o.HoldoutCapacity)
		}
		dropped := len(before.train[tg]) + len(before.holdout[tg]) - len(after.train[tg]) - len(after.holdout[tg])
		if rep.Dropped[tg] != dropped || dropped == 0 {
			t.Errorf("%s: report says %d dropped, want %d > 0", tg, rep.Dropped[tg], dropped)
		}
		if after.gen[tg] <= before.gen[tg] {
			t.Errorf("%s: generation did not grow after trimming", tg)
		}
	}
	if rep.FromScheme != "" {
		t.Errorf("report FromScheme %q without a scheme change", rep.FromScheme)
	}
	// Adds now evict against the new capacity.
	mustAdd(t, db, testSamples(2000, 50, time.Hour))
	for _, n := range db.BucketCounts(features.TTFT) {
		if n > o.BucketCapacity {
			t.Errorf("bucket of %d samples, capacity %d", n, o.BucketCapacity)
		}
	}
}
