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

// A timestamp the service stamped on an entry sent without one is not part
// of the sample's identity: the same entry arriving again, with another
// stamp, is a duplicate, also after a restart (Open computes identities
// from the records, which say which timestamps were stamped). A timestamp
// the client sent is: the same row at another time of its own is another
// sample. A record written before stamps were marked (store format 3) keeps
// its timestamp in its identity: a stamped resend of it is stored once
// more, and is then the copy later resends match.
func TestStampedTimestampIsNotPartOfTheIdentity(t *testing.T) {
	o := testOptions()
	path := tempPath(t)
	db := openTest(t, path, o)
	row := sameBucket(1, 0)[0]
	row.ActualTPOTMs = 7 // both targets
	stamped := func(at time.Duration) features.Sample {
		s := row
		s.Timestamp, s.Stamped = testEpoch.Add(at), true
		return s
	}
	if res := mustAdd(t, db, []features.Sample{stamped(time.Second), stamped(2 * time.Second)}); res.Duplicates != 1 {
		t.Fatalf("one entry stamped twice in one Add: %d duplicates, want 1", res.Duplicates)
	}
	if res := mustAdd(t, db, []features.Sample{stamped(time.Hour)}); res.Duplicates != 1 {
		t.Errorf("the entry stamped again an hour later: %d duplicates, want 1", res.Duplicates)
	}
	slower := stamped(3 * time.Second)
	slower.ActualTTFTMs++
	clientTimed := row
	clientTimed.Timestamp = testEpoch.Add(time.Second) // the first stamp's time, but the client's
	if res := mustAdd(t, db, []features.Sample{slower, clientTimed}); res.Duplicates != 0 {
		t.Errorf("a stamped sample a millisecond slower, or the row at a time of the client's: %d duplicates, want 0", res.Duplicates)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openTest(t, path, o)
	if res := mustAdd(t, db, []features.Sample{stamped(2 * time.Hour)}); res.Duplicates != 1 {
		t.Errorf("stamped again after a restart: %d duplicates, want 1", res.Duplicates)
	}
	train, holdout, err := db.Snapshot(features.TTFT)
	if err != nil {
		t.Fatal(err)
	}
	var first *features.Sample
	for _, s := range append(train, holdout...) {
		if s.Stamped && s.ActualTTFTMs == row.ActualTTFTMs {
			if first != nil {
				t.Fatalf("two stamped samples of the row stored: %v and %v", first.Timestamp, s.Timestamp)
			}
			first = &s
		}
	}
	if first == nil || !first.Timestamp.Equal(testEpoch.Add(time.Second)) {
		t.Errorf("stored %+v, want the entry at its first arrival", first)
	}

	// A format 3 store: the api stamped its timestamps, but its records do
	// not say so. It opens, upgraded, with its samples as they were.
	old := row
	old.Row.InputTokenLength++
	old.Timestamp = testEpoch.Add(time.Minute)
	mustAdd(t, db, []features.Sample{old})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	rewriteAsFormat(t, path, 3)
	db = openTest(t, path, o)
	if format := db.formatOf(t); format != formatVersion {
		t.Errorf("format %d after opening a format 3 store, want %d", format, formatVersion)
	}
	resend := old
	resend.Timestamp, resend.Stamped = testEpoch.Add(time.Hour), true
	if res := mustAdd(t, db, []features.Sample{resend}); res.Duplicates != 0 {
		t.Errorf("a stamped resend of a format 3 record: %d duplicates, want 0 (its identity kept its timestamp)", res.Duplicates)
	}
	resend.Timestamp = testEpoch.Add(2 * time.Hour)
	if res := mustAdd(t, db, []features.Sample{resend}); res.Duplicates != 1 {
		t.Errorf("the next stamped resend: %d duplicates, want 1", res.Duplicates)
	}
}

// formatOf is the format version the open store's file records.
func (db *DB) formatOf(t *testing.T) uint64 {
	t.Helper()
	var format uint64
	err := db.bolt.View(func(tx *bolt.Tx) error {
		var err error
		format, err = getUint64(tx.Bucket(bucketMeta), keyFormat)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return format
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
