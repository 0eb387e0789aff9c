package store

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/headroomhq/headroom/features"
)

// testOptions skip fsync; tests that measure or rely on durability set
// NoSync false themselves. They use the brief's scheme, whose bucket keys
// the tests spell out.
// testOptions are a test's store options: HoldoutSpread 1 and a clock a
// minute further on at every commit, so that the holdout is the newest
// HoldoutCapacity held-out samples whatever the test adds, except where a
// test bounds a minute's share (holdout_test.go).
func testOptions() Options {
	return Options{NoSync: true, Timeout: 200 * time.Millisecond, Scheme: MustParseScheme(BriefSchemeName),
		HoldoutSpread: 1, Now: minuteClock()}
}

// minuteClock is a clock a minute further on at every reading.
func minuteClock() func() time.Time {
	var mu sync.Mutex
	now := testEpoch
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Minute)
		return now
	}
}

func tempPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "samples.db")
}

func openTest(t testing.TB, path string, opts Options) *DB {
	t.Helper()
	db, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

var testEpoch = time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)

// testSamples returns n varied samples. Timestamps grow with i from
// testEpoch+offset, so a sample's timestamp identifies it and orders it.
// Every fifth sample is TTFT-only, every fifth TPOT-only, the rest both.
func testSamples(n int, seed uint64, offset time.Duration) []features.Sample {
	rng := rand.New(rand.NewPCG(seed, 7))
	pods := []string{"", "prefill", "decode"}
	out := make([]features.Sample, n)
	for i := range out {
		s := features.Sample{
			Row: features.Row{
				KVCachePercentage:     rng.Float64(),
				InputTokenLength:      1 + rng.Int64N(8000),
				NumRequestWaiting:     rng.Int64N(15),
				NumRequestRunning:     rng.Int64N(40),
				PrefixCacheScore:      rng.Float64(),
				PodType:               pods[rng.IntN(len(pods))],
				PrefillTokensInFlight: rng.Int64N(20000),
				DecodeTokensInFlight:  rng.Int64N(5000),
			},
			ActualTTFTMs:    10 + rng.Float64()*900,
			ActualTPOTMs:    2 + rng.Float64()*40,
			PredictedTTFTMs: rng.Float64() * 900,
			Timestamp:       testEpoch.Add(offset + time.Duration(i)*time.Microsecond),
		}
		switch i % 5 {
		case 0:
			s.ActualTPOTMs = 0
		case 1:
			s.ActualTTFTMs = 0
		}
		out[i] = s
	}
	return out
}

func mustAdd(t testing.TB, db *DB, samples []features.Sample) AddResult {
	t.Helper()
	res, err := db.Add(samples)
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	return res
}

func TestOpenNew(t *testing.T) {
	opts := testOptions()
	opts.Scheme = Scheme{} // the default
	db := openTest(t, tempPath(t), opts)
	if !db.OpenReport().Created {
		t.Error("OpenReport().Created = false for a new file")
	}
	o := db.Options()
	if o.BucketCapacity != DefaultBucketCapacity || o.HoldoutCapacity != DefaultHoldoutCapacity ||
		o.HoldoutFraction != DefaultHoldoutFraction || o.Scheme.String() != DefaultSchemeName {
		t.Errorf("defaults not applied: %+v", o)
	}
	for _, tg := range features.PodTargets {
		if c := db.Counts(); c.Train(tg) != 0 || c.Holdout(tg) != 0 || db.Generation(tg) != 0 {
			t.Errorf("%s: new store not empty", tg)
		}
	}
}

// An empty file (created by hand or by a crash before bbolt wrote its
// first page) becomes a store.
func TestOpenEmptyFile(t *testing.T) {
	path := tempPath(t)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db := openTest(t, path, testOptions())
	mustAdd(t, db, testSamples(10, 1, 0))
	if db.Counts().Train(features.TTFT)+db.Counts().Holdout(features.TTFT) != 8 {
		t.Errorf("counts %+v after adding 8 TTFT samples", db.Counts())
	}
}

func TestClosedStore(t *testing.T) {
	db := openTest(t, tempPath(t), testOptions())
	mustAdd(t, db, testSamples(50, 1, 0))
	counts := db.Counts()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Add(testSamples(5, 2, time.Second)); err == nil {
		t.Error("Add on a closed store succeeded")
	}
	if _, _, err := db.Snapshot(features.TTFT); err == nil {
		t.Error("Snapshot on a closed store succeeded")
	}
	if _, err := db.Flush(true, true); err == nil {
		t.Error("Flush on a closed store succeeded")
	}
	if db.Counts() != counts {
		t.Error("counts changed by failed calls")
	}
	if err := db.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestOptionsValidation(t *testing.T) {
	bad := map[string]Options{
		"negative capacity":         {BucketCapacity: -1},
		"negative holdout capacity": {HoldoutCapacity: -5},
		"holdout fraction 1":        {HoldoutFraction: 1},
		"negative timeout":          {Timeout: -time.Second},
	}
	for name, o := range bad {
		if db, err := Open(tempPath(t), o); err == nil {
			_ = db.Close()
			t.Errorf("%s: Open succeeded", name)
		}
	}
	// A negative fraction disables the holdout.
	o := testOptions()
	o.HoldoutFraction = -1
	db := openTest(t, tempPath(t), o)
	res := mustAdd(t, db, testSamples(2000, 3, 0))
	if res.Holdout != [numStreams]int{} {
		t.Errorf("holdout disabled, but Add held out %v", res.Holdout)
	}
}

func TestOpenLocked(t *testing.T) {
	path := tempPath(t)
	openTest(t, path, testOptions())
	o := testOptions()
	o.Timeout = 50 * time.Millisecond
	start := time.Now()
	db, err := Open(path, o)
	if err == nil {
		_ = db.Close()
		t.Fatal("second Open of a locked store succeeded")
	}
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "locked by another process") {
		t.Errorf("err = %v, want ErrLocked", err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Errorf("gave up after %s, want about %s", waited, o.Timeout)
	}
}

func TestRestartKeepsEverything(t *testing.T) {
	path := tempPath(t)
	o := testOptions()
	o.NoSync = false // the point is what reaches the file
	db, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		mustAdd(t, db, testSamples(1000, uint64(i), time.Duration(i)*time.Second))
	}
	counts := db.Counts()
	var gens [numStreams]uint64
	var buckets [numStreams]map[string]int
	var trains, holdouts [numStreams][]features.Sample
	for _, tg := range features.PodTargets {
		gens[tg] = db.Generation(tg)
		buckets[tg] = db.BucketCounts(tg)
		if trains[tg], holdouts[tg], err = db.Snapshot(tg); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openTest(t, path, o)
	if db.OpenReport() != (OpenReport{}) {
		t.Errorf("reopen with the same options changed the file: %+v", db.OpenReport())
	}
	if db.Counts() != counts {
		t.Errorf("counts after reopen %+v, before %+v", db.Counts(), counts)
	}
	for _, tg := range features.PodTargets {
		if db.Generation(tg) != gens[tg] {
			t.Errorf("%s: generation %d after reopen, %d before", tg, db.Generation(tg), gens[tg])
		}
		if got := db.BucketCounts(tg); !mapsEqual(got, buckets[tg]) {
			t.Errorf("%s: bucket counts changed across reopen", tg)
		}
		train, holdout, err := db.Snapshot(tg)
		if err != nil {
			t.Fatal(err)
		}
		if !samplesEqual(train, trains[tg]) || !samplesEqual(holdout, holdouts[tg]) {
			t.Errorf("%s: snapshot changed across reopen", tg)
		}
	}

	// Sequence numbers continue: a sample added now is the newest.
	late := testSamples(5, 99, time.Hour)[2:3] // both labels
	mustAdd(t, db, late)
	for _, tg := range features.PodTargets {
		if db.Generation(tg) != gens[tg]+1 {
			t.Errorf("%s: generation %d after one more Add, want %d", tg, db.Generation(tg), gens[tg]+1)
		}
		train, holdout, _ := db.Snapshot(tg)
		all := append(train, holdout...)
		if !slices.ContainsFunc(all, func(s features.Sample) bool { return s.Timestamp.Equal(late[0].Timestamp) }) {
			t.Fatalf("%s: late sample missing", tg)
		}
		if len(train) > 0 && train[len(train)-1].Timestamp.Before(late[0].Timestamp) &&
			!slices.ContainsFunc(holdout, func(s features.Sample) bool { return s.Timestamp.Equal(late[0].Timestamp) }) {
			t.Errorf("%s: late sample is not the newest training sample", tg)
		}
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func samplesEqual(a, b []features.Sample) bool {
	return slices.EqualFunc(a, b, func(x, y features.Sample) bool { return sampleEqual(&x, &y) })
}

// makeStore writes a closed store of n samples at path.
func makeStore(t *testing.T, path string, n int) {
	t.Helper()
	db, err := Open(path, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 1000 {
		mustAdd(t, db, testSamples(min(1000, n-i), uint64(i), time.Duration(i)*time.Millisecond))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// rawUpdate edits a closed store with bbolt directly.
func rawUpdate(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// rewriteAsFormat makes a closed store look as one of format version
// would: the version written, and the streams added since (streamSince)
// gone, bucket and generation.
func rewriteAsFormat(t *testing.T, path string, version uint64) {
	t.Helper()
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if err := putUint64(meta, keyFormat, version); err != nil {
			return err
		}
		for _, tg := range streams {
			if streamSince(tg) <= version {
				continue
			}
			if err := meta.Delete(generationKey(tg)); err != nil {
				return err
			}
			if err := tx.DeleteBucket(targetBucket(tg)); err != nil {
				return err
			}
		}
		return nil
	})
}

func TestOpenRefusesBadFiles(t *testing.T) {
	const n = 3000
	writeFile := func(data []byte) func(*testing.T, string) {
		return func(t *testing.T, path string) {
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	garbage := make([]byte, 64<<10)
	fillRandom(garbage, 5)
	truncate := func(fraction float64) func(*testing.T, string) {
		return func(t *testing.T, path string) {
			makeStore(t, path, n)
			info, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, int64(float64(info.Size())*fraction)); err != nil {
				t.Fatal(err)
			}
		}
	}
	edit := func(fn func(tx *bolt.Tx) error) func(*testing.T, string) {
		return func(t *testing.T, path string) {
			makeStore(t, path, n)
			rawUpdate(t, path, fn)
		}
	}
	putRecord := func(bucket string, key uint64, val []byte) func(*testing.T, string) {
		return edit(func(tx *bolt.Tx) error {
			b, err := tx.Bucket([]byte("ttft")).Bucket(bucketTrain).CreateBucketIfNotExists([]byte(bucket))
			if err != nil {
				return err
			}
			return b.Put(binaryKey(key), val)
		})
	}
	good := mustEncode(t, &testSamples(1, 1, 0)[0])

	tests := []struct {
		name string
		make func(*testing.T, string)
		is   error
		want string
	}{
		{"random bytes", writeFile(garbage), ErrCorrupt, "not a bbolt database"},
		{"short text file", writeFile([]byte("hello, world\n")), ErrCorrupt, "not a bbolt database"},
		{"truncated to 95%", truncate(0.95), ErrCorrupt, ""},
		{"truncated to 60%", truncate(0.6), ErrCorrupt, ""},
		{"truncated to 30%", truncate(0.3), ErrCorrupt, ""},
		{"truncated to 3 pages", func(t *testing.T, path string) {
			makeStore(t, path, n)
			if err := os.Truncate(path, 3*4096); err != nil {
				t.Fatal(err)
			}
		}, ErrCorrupt, ""},
		{"scribbled data pages", func(t *testing.T, path string) {
			makeStore(t, path, n)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			fillRandom(data[2*4096:], 9)
			writeFile(data)(t, path)
		}, ErrCorrupt, ""},
		{"format version 9", edit(func(tx *bolt.Tx) error {
			return putUint64(tx.Bucket(bucketMeta), keyFormat, 9)
		}), ErrIncompatible, "format version 9, this binary reads 1 to 4"},
		{"unknown scheme", edit(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketMeta).Put(keyScheme, []byte("kv10,gpu3"))
		}), ErrIncompatible, `unknown dimension "gpu3"`},
		{"foreign bbolt file", func(t *testing.T, path string) {
			rawUpdate(t, path, func(tx *bolt.Tx) error {
				_, err := tx.CreateBucket([]byte("users"))
				return err
			})
		}, ErrCorrupt, "not a Headroom store"},
		{"missing target", edit(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("tpot")) }), ErrCorrupt, "bucket tpot is missing"},
		{"garbage record", putRecord("kv_0_prefix_0", 1, []byte{1, 0xff, 3}), ErrCorrupt, "ttft/train/kv_0_prefix_0 key 1"},
		{"record from a newer binary", putRecord("kv_0_prefix_0", 2, append([]byte{7}, good[1:]...)), ErrCorrupt, "format version 7"},
		{"key beyond meta seq", putRecord("kv_0_prefix_0", 1<<40, good), ErrCorrupt, "beyond meta/seq"},
		{"bucket outside the scheme", putRecord("kv_12", 3, good), ErrCorrupt, "not a bucket of scheme kv10,prefix4"},
		{"scribbled unknown bucket", func(t *testing.T, path string) {
			makeStore(t, path, n)
			// A bucket the store never reads, big enough to have pages of
			// its own, then damaged.
			rawUpdate(t, path, func(tx *bolt.Tx) error {
				b, err := tx.CreateBucket([]byte("zzz"))
				if err != nil {
					return err
				}
				for i := range 200 {
					if err := b.Put(binaryKey(uint64(i)), make([]byte, 100)); err != nil {
						return err
					}
				}
				return nil
			})
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			fillRandom(data[len(data)-4*4096:], 11)
			writeFile(data)(t, path)
		}, ErrCorrupt, ""},
		{"missing meta key", edit(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keySeq) }), ErrCorrupt, "meta/seq"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tempPath(t)
			tc.make(t, path)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			db, err := Open(path, testOptions())
			if err == nil {
				_ = db.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v\nwant %v containing %q", err, tc.is, tc.want)
			}
			for _, part := range []string{path, "move it aside", "--store-reset"} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error does not mention %q: %v", part, err)
				}
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(before, after) {
				t.Error("Open modified the refused file")
			}

			// Open released the file: it can be set aside and replaced.
			moved, err := MoveAside(path)
			if err != nil {
				t.Fatal(err)
			}
			if kept, _ := os.ReadFile(moved); !bytes.Equal(kept, before) {
				t.Error("the moved-aside file differs from the original")
			}
			db = openTest(t, path, testOptions())
			if !db.OpenReport().Created {
				t.Error("store at the old path is not new")
			}
		})
	}
}

func fillRandom(b []byte, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

func binaryKey(seq uint64) []byte {
	var k [8]byte
	for i := range k {
		k[7-i] = byte(seq >> (8 * i))
	}
	return k[:]
}

func TestMoveAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "samples.db")
	if _, err := MoveAside(path); err == nil {
		t.Error("MoveAside of a missing file succeeded")
	}
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	moved, err := MoveAside(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(moved, path+".corrupt-") {
		t.Errorf("moved to %s", moved)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("original still there: %v", err)
	}
	if b, _ := os.ReadFile(moved); string(b) != "x" {
		t.Errorf("moved file holds %q", b)
	}
}

// Damage each page of a real store in turn: Open must refuse the file with
// ErrCorrupt or, when the page was free, open it intact; it must never
// crash or hang.
func TestOpenSurvivesEveryDamagedPage(t *testing.T) {
	src := tempPath(t)
	makeStore(t, src, 2000)
	orig, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	openEachDamagedPage(t, orig, 1600)
}

// openEachDamagedPage opens copies of a store file, each with one page
// past the meta pages overwritten with noise: each must be refused with
// ErrCorrupt or open with its ttft samples, and none may take the process
// down.
func openEachDamagedPage(t *testing.T, orig []byte, ttft int) {
	t.Helper()
	const page = 4096
	refused := 0
	for p := 2; p*page < len(orig); p++ {
		data := bytes.Clone(orig)
		fillRandom(data[p*page:(p+1)*page], uint64(p))
		path := tempPath(t)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := Open(path, testOptions())
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("page %d damaged: err = %v, want ErrCorrupt", p, err)
			}
			refused++
			continue
		}
		if c := db.Counts(); c.Train(features.TTFT)+c.Holdout(features.TTFT) != ttft {
			t.Errorf("page %d damaged: opened with counts %+v", p, c)
		}
		_ = db.Close()
	}
	t.Logf("%d of %d damaged pages refused", refused, len(orig)/page-2)
}
