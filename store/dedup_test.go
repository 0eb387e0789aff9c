package store

import (
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/headroomhq/headroom/features"
)

// copies is n copies of one sample.
func copies(s features.Sample, n int) []features.Sample {
	out := make([]features.Sample, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// Identical entries are counted once: within one Add, across Adds, across
// a restart and across concurrent Adds sharing a commit. A sample is new
// again once its copy has left the store. Before, one request of 1,000
// copies of one row stored 1,000 samples (issue 26).
func TestIdenticalEntriesCountOnce(t *testing.T) {
	o := testOptions()
	o.BucketCapacity = 5
	path := tempPath(t)
	db := openTest(t, path, o)
	one := sameBucket(1, 0)[0]
	one.ActualTPOTMs = 7 // both targets

	res := mustAdd(t, db, copies(one, 1000))
	if stored := res.Train[features.TTFT] + res.Holdout[features.TTFT]; stored != 1 || res.Duplicates != 999 {
		t.Fatalf("1,000 copies: %d stored, %d duplicates; want 1 and 999", stored, res.Duplicates)
	}
	if c := db.Counts(); c.Train(features.TTFT)+c.Holdout(features.TTFT) != 1 || c.Train(features.TPOT)+c.Holdout(features.TPOT) != 1 {
		t.Fatalf("counts %+v, want one sample of each target", c)
	}
	if res := mustAdd(t, db, copies(one, 3)); res.Duplicates != 3 {
		t.Errorf("copies in a later Add: %d duplicates, want 3", res.Duplicates)
	}
	// A sample differing in one field is another sample.
	other := one
	other.ActualTTFTMs++
	if res := mustAdd(t, db, []features.Sample{other}); res.Duplicates != 0 {
		t.Errorf("a sample one millisecond slower counted as a duplicate")
	}

	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, path, o)
	if res := mustAdd(t, db, copies(one, 2)); res.Duplicates != 2 {
		t.Errorf("copies after a restart: %d duplicates, want 2", res.Duplicates)
	}

	// Concurrent Adds of the same new sample: one of them stores it.
	fresh := sameBucket(1, time.Hour)[0]
	var wg sync.WaitGroup
	results := make([]AddResult, 8)
	for i := range results {
		wg.Go(func() { results[i] = mustAdd(t, db, []features.Sample{fresh}) })
	}
	wg.Wait()
	dups := 0
	for _, r := range results {
		dups += r.Duplicates
	}
	if dups != len(results)-1 {
		t.Errorf("%d concurrent Adds of one sample: %d duplicates, want %d", len(results), dups, len(results)-1)
	}

	// Once its copy has left, evicted by newer samples of its bucket, the
	// sample is new again.
	o.HoldoutFraction = -1 // no holdout: the copy is in its bucket
	path = tempPath(t)
	db = openTest(t, path, o)
	ttftOnly := sameBucket(1, 0)[0]
	mustAdd(t, db, []features.Sample{ttftOnly})
	mustAdd(t, db, sameBucket(o.BucketCapacity, time.Hour)) // the bucket's newest, ttftOnly evicted
	if res := mustAdd(t, db, []features.Sample{ttftOnly}); res.Duplicates != 0 {
		t.Errorf("a sample whose copy was evicted counted as a duplicate")
	}
	// And once flushed.
	if _, err := db.Flush(true, true); err != nil {
		t.Fatal(err)
	}
	if res := mustAdd(t, db, []features.Sample{ttftOnly}); res.Duplicates != 0 {
		t.Errorf("a sample whose copy was flushed counted as a duplicate")
	}
}

// A store written before secrets gets one at its first open by this
// release, once: its samples stay where they were, and the secret it gets
// is the one it keeps.
func TestAStoreBeforeSecretsGetsOneOnce(t *testing.T) {
	o := testOptions()
	path := tempPath(t)
	db := openTest(t, path, o)
	samples := testSamples(500, 3, 0)
	mustAdd(t, db, samples)
	before := snapshotAll(t, db)
	// What a release before secrets wrote: no meta/secret.
	if err := db.bolt.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keySecret) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, path, o)
	first, err := readSecretOf(db)
	if err != nil || len(first) != secretLen {
		t.Fatalf("secret after the first open: %d bytes, %v", len(first), err)
	}
	if after := snapshotAll(t, db); after != before {
		t.Error("opening the store moved its samples")
	}
	if res := mustAdd(t, db, samples); res.Duplicates != len(samples) {
		t.Errorf("the store's own samples again: %d duplicates, want %d", res.Duplicates, len(samples))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, path, o)
	if again, _ := readSecretOf(db); string(again) != string(first) {
		t.Error("the secret changed at the next open")
	}
}

// snapshotAll summarises every stream's samples, training and holdout, as
// a comparable string.
func snapshotAll(t *testing.T, db *DB) string {
	t.Helper()
	var out []byte
	for _, tg := range streams {
		train, holdout, err := db.Snapshot(tg)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, timestampsOf(train)...)
		out = append(out, '|')
		out = append(out, timestampsOf(holdout)...)
		out = append(out, '#')
	}
	return string(out)
}

func timestampsOf(ss []features.Sample) []byte {
	var b []byte
	for _, s := range ss {
		b = s.Timestamp.AppendFormat(b, time.RFC3339Nano)
		b = append(b, ',')
	}
	return b
}
