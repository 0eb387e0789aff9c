// Package store is Headroom's durable sample store: one bbolt file holding,
// per target, training samples stratified into buckets and a holdout set.
//
// A stream is a target's samples: TTFT, TPOT, since format 2 the KV
// transfers of disaggregated requests (features.KVTransfer), and since
// format 3 their whole TTFTs (features.SplitTTFT); the last two are
// stratified by link class and transfer size rather than by the row.
//
// On-disk layout (bbolt buckets nest as indented):
//
//	meta/
//	    format            uint64 big-endian: layout version, formatVersion
//	    scheme            bucket scheme name, e.g. "kv10,prefix4" (bucket.go)
//	    seq               uint64 big-endian: the last sequence number handed out
//	    generation.ttft   uint64 big-endian: DB.Generation of each stream
//	    generation.tpot
//	    generation.kv_transfer
//	    generation.split_ttft
//	    secret            32 random bytes: the holdout sides and identities (keys.go)
//	    slot              uint64 seq, int64 minute, big-endian: the newest
//	                      arrival slot (holdout.go)
//	ttft/
//	    train/
//	        kv_3_prefix_0/    key: uint64 big-endian sequence number
//	        ...               value: sample record (encoding.go)
//	    holdout/              same keys and values
//	tpot/                     same as ttft/
//	kv_transfer/              same, with buckets of the fixed transfer
//	                          scheme: link_1_kvtok_2/ ... (bucket.go)
//	split_ttft/               same as kv_transfer/
//
// Invariants:
//   - A sample with a target's label is in exactly one of that target's
//     training buckets or its holdout, chosen by a keyed hash of its
//     encoding under the store's secret (keys.go), and, on the holdout's
//     side, by room in the holdout for the minute it arrives in
//     (holdout.go); a sample with both labels is stored under each target
//     with the same sequence number.
//   - No two samples stored in one stream have one identity (dedup.go):
//     identical, a timestamp the service stamped aside; but for copies a
//     store held before it kept identities.
//   - Sequence numbers come from one store-wide counter (meta/seq), grow with
//     insertion and are never reused: every stored key is ≤ meta/seq. So each
//     bucket iterates oldest first and a target's buckets merge into global
//     insertion order.
//   - A training bucket holds at most Options.BucketCapacity samples and a
//     holdout at most Options.HoldoutCapacity; eviction removes the smallest
//     keys. Training bucket names are keys of the stored scheme.
//   - One Add is atomic: when it returns nil everything it stored is
//     fsynced; when it fails none of it is stored. Concurrent Adds may share
//     a transaction (group commit), never a partial one.
//   - The in-memory counts equal the committed file: they are computed at Open
//     and changed only after a successful commit, by the one writer at a time.
//
// Open refuses, with an error saying what to do, a file that is not a bbolt
// database, is damaged or truncated, or has another format version. It never
// truncates or rewrites such a file; MoveAside sets it aside.
package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/headroomhq/headroom/features"
)

// formatVersion is the on-disk layout this binary writes. Bump it when a
// file written by the new code cannot be read by the old, or vice versa;
// Open refuses any version but this one and those it upgrades.
//
// Version 2 added the kv_transfer stream and sample records of format 2
// (encoding.go). Open upgrades a version 1 file in place, in one
// transaction: it adds the empty stream and sets the version; the samples
// are untouched. A binary of version 1 then refuses the file. Version 3
// added the split_ttft stream, upgraded the same way (streamSince).
// Version 4 added records whose timestamp the service stamped (bit 7 of
// their presence byte, encoding.go), which a binary of version 3 would
// take for damage; the upgrade only sets the version, since the records
// a version 3 binary wrote are version 4 records as they are.
const formatVersion = 4

// minFormatVersion is the oldest layout Open upgrades.
const minFormatVersion = 1

// The store keeps one stream of samples per target, in the order of
// features.Targets, the one list of them.
const numStreams = features.NumTargets

var streams = features.Targets

// streamSince is the format version that added stream t: a file of an
// older one has neither its bucket nor its generation, and Open's upgrade
// adds them, empty.
func streamSince(t features.Target) uint64 {
	switch t {
	case features.KVTransfer:
		return 2
	case features.SplitTTFT:
		return 3
	}
	return 1
}

// Defaults for zero Options fields.
const (
	DefaultBucketCapacity  = 500
	DefaultHoldoutFraction = 0.1
	DefaultHoldoutCapacity = 1000
	DefaultLockTimeout     = time.Second
	DefaultHoldoutSpread   = 10
)

// fillPercent packs pages full: keys only ever arrive at a bucket's end.
const fillPercent = 1.0

var (
	bucketMeta    = []byte("meta")
	bucketTrain   = []byte("train")
	bucketHoldout = []byte("holdout")

	keyFormat = []byte("format")
	keyScheme = []byte("scheme")
	keySeq    = []byte("seq")
)

// targetBucket and generationKey name each target's data; Target.String
// is part of the file format through them.
func targetBucket(t features.Target) []byte { return []byte(t.String()) }
func generationKey(t features.Target) []byte {
	return []byte("generation." + t.String())
}

// Errors Open wraps, for errors.Is.
var (
	// ErrLocked: another process (or another DB in this one) has the file open.
	ErrLocked = errors.New("store is locked by another process")
	// ErrCorrupt: the file is not a bbolt database, or is damaged.
	ErrCorrupt = errors.New("corrupt store")
	// ErrIncompatible: the file is intact but of a format this binary cannot read.
	ErrIncompatible = errors.New("incompatible store")
)

// remedy ends every ErrCorrupt and ErrIncompatible message.
const remedy = "move it aside (the file is kept as it is) or start with --store-reset to begin with an empty store"

// Options configure a DB. Zero values mean the defaults.
type Options struct {
	// BucketCapacity is the number of samples each training bucket keeps;
	// a full bucket evicts its oldest. Default 500.
	BucketCapacity int
	// HoldoutFraction is the share of samples held out per target, in
	// [0, 1). Default 0.1; a negative value disables the holdout.
	HoldoutFraction float64
	// HoldoutCapacity is the number of holdout samples kept per target; a
	// full holdout evicts its oldest. Default 1000.
	HoldoutCapacity int
	// Scheme decides each sample's bucket. Default DefaultScheme. Opening a
	// store written with another scheme re-buckets its samples.
	Scheme Scheme
	// NoSync skips fsync on commit: for tests only, a crash loses data.
	NoSync bool
	// Timeout bounds the wait for the file lock. Default 1 s.
	Timeout time.Duration
	// HoldoutSpread bounds what one minute of arrivals may put into a
	// stream's holdout: a 1/HoldoutSpread share of HoldoutCapacity
	// (holdout.go). Default 10.
	HoldoutSpread int
	// Now is the clock arrivals are timed by (holdout.go). Default
	// time.Now; a replay in a time of its own gives its own.
	Now func() time.Time
	// Secret is a new store's secret (keys.go), secretLen bytes; nil: random.
	// Only for replays that must be repeatable: whoever knows it can
	// choose which samples are held out. A store that has one keeps it.
	Secret []byte
	// PublicSides chooses sides by a public hash of a sample's content, as
	// stores did before their secrets: for a replay alone, whose figures
	// are then those of every replay of the same recording measured
	// before. A store that serves must not: any client could choose which
	// of its samples are held out.
	PublicSides bool
	// ReplayTime times arrivals by the newest timestamp among the samples
	// of each commit rather than by Now: for a replay of a trace or a
	// simulation, whose clock is its samples', so that a run is the same
	// however fast it goes. Never for a service: its clients would choose
	// their minute.
	ReplayTime bool

	// tune adjusts bbolt's options; tests use it to provoke failures.
	tune func(*bolt.Options)
}

func (o Options) withDefaults() (Options, error) {
	switch {
	case o.BucketCapacity < 0:
		return o, fmt.Errorf("bucket capacity %d is negative", o.BucketCapacity)
	case o.HoldoutCapacity < 0:
		return o, fmt.Errorf("holdout capacity %d is negative", o.HoldoutCapacity)
	case o.HoldoutFraction >= 1 || o.HoldoutFraction != o.HoldoutFraction:
		return o, fmt.Errorf("holdout fraction %v is not below 1", o.HoldoutFraction)
	case o.Timeout < 0:
		return o, fmt.Errorf("lock timeout %s is negative", o.Timeout)
	case o.HoldoutSpread < 0:
		return o, fmt.Errorf("holdout spread %d is negative", o.HoldoutSpread)
	case o.Secret != nil && len(o.Secret) != secretLen:
		return o, fmt.Errorf("store secret of %d bytes, want %d", len(o.Secret), secretLen)
	}
	if o.HoldoutSpread == 0 {
		o.HoldoutSpread = DefaultHoldoutSpread
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.BucketCapacity == 0 {
		o.BucketCapacity = DefaultBucketCapacity
	}
	if o.HoldoutCapacity == 0 {
		o.HoldoutCapacity = DefaultHoldoutCapacity
	}
	switch {
	case o.HoldoutFraction == 0:
		o.HoldoutFraction = DefaultHoldoutFraction
	case o.HoldoutFraction < 0:
		o.HoldoutFraction = 0
	}
	if o.Scheme.IsZero() {
		o.Scheme = DefaultScheme()
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultLockTimeout
	}
	return o, nil
}

// DB is an open store. Its methods are safe for concurrent use.
type DB struct {
	bolt     *bolt.DB
	path     string
	opts     Options              // with defaults applied
	keyBytes [numStreams][][]byte // bucket keys of each stream's scheme
	report   OpenReport

	// writeMu makes Add and Flush one writer at a time for the whole of
	// "read counts, write transaction, publish counts", so the counts a
	// writer decides evictions on are exactly the committed ones.
	writeMu sync.Mutex
	seq     uint64 // last sequence number committed; guarded by writeMu
	// Guarded by writeMu too, and only ever read by the writer: the
	// identities of each stream's records (dedup.go), the newest arrival
	// slot and the holdout records of each stream that arrived in it
	// (holdout.go).
	ids         [numStreams]identitySet
	slot        arrivalSlot
	slotHoldout [numStreams]int
	keys        storeKeys // set by Open, then never changed

	groupMu sync.Mutex   // guards pending
	pending *commitGroup // Adds waiting to commit together (add.go); nil when none

	mu         sync.RWMutex // guards the fields below
	train      [numStreams][]int
	trainTotal [numStreams]int
	holdout    [numStreams]int
	gen        [numStreams]uint64

	commits atomic.Uint64 // successful write transactions
}

// OpenReport says what Open did to the file, for the caller's log.
type OpenReport struct {
	Created    bool   // the file was new or empty
	FromScheme string // the stored scheme, when Open re-bucketed; else ""
	// Dropped counts samples removed per target to fit the scheme and the
	// capacities (after a scheme change or a capacity decrease).
	Dropped [numStreams]int
}

// Open opens or creates the store at path. A second Open of the same file,
// from any process, fails with ErrLocked after Options.Timeout. A file that
// is not a store this binary can read fails with ErrCorrupt or
// ErrIncompatible and is left untouched.
func Open(path string, opts Options) (db *DB, err error) {
	opts, err = opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	db = &DB{path: path, opts: opts}
	for _, t := range streams {
		for _, k := range db.schemeOf(t).keys {
			db.keyBytes[t] = append(db.keyBytes[t], []byte(k))
		}
	}

	// bbolt reads the file through a memory map. On a truncated or damaged
	// file a read can fault, or bbolt can panic on a broken invariant; both
	// become an error here rather than killing the process. Faults become
	// panics only on this goroutine, so all checking happens on it.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var file *os.File
	defer func() {
		if r := recover(); r != nil {
			err = db.corrupt("it is damaged or truncated: reading it failed with %q", fmt.Sprint(r))
			if db.bolt != nil {
				_ = db.bolt.Close()
			} else if file != nil {
				// bbolt's mapping of the file is never unmapped here, and it
				// keeps the file, and so bbolt's lock, alive after Close:
				// drop the lock itself, or the next Open says ErrLocked.
				releaseLock(file)
				_ = file.Close()
			}
			db = nil
		}
	}()

	bo := &bolt.Options{
		Timeout:      opts.Timeout,
		NoSync:       opts.NoSync,
		NoGrowSync:   opts.NoSync,
		FreelistType: bolt.FreelistMapType,
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			file = f
			return f, err
		},
	}
	if opts.tune != nil {
		opts.tune(bo)
	}
	if hasUnsyncedFreelist(path) {
		if err := db.checkUnsynced(*bo); err != nil {
			return nil, err
		}
	}
	db.bolt, err = bolt.Open(path, 0o600, bo)
	if err != nil {
		return nil, db.openError(err)
	}
	if err := db.load(); err != nil {
		_ = db.bolt.Close()
		return nil, err
	}
	// From here on commits leave the freelist out of the file (freelist.go).
	db.bolt.NoFreelistSync = true
	return db, nil
}

func (db *DB) openError(err error) error {
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("open store %s: %w (gave up after %s): stop the other process or use another store path",
			db.path, ErrLocked, db.opts.Timeout)
	case errors.Is(err, berrors.ErrInvalid):
		return db.corrupt("it is not a bbolt database, or both its meta pages are damaged")
	case errors.Is(err, berrors.ErrChecksum):
		return db.corrupt("its meta pages fail their checksums")
	case errors.Is(err, berrors.ErrVersionMismatch):
		return db.incompatible("it was written by an incompatible bbolt version")
	case strings.Contains(err.Error(), "file size too small"):
		return db.corrupt("it is too small to be a bbolt database (%v)", err)
	}
	return fmt.Errorf("open store %s: %w", db.path, err)
}

func (db *DB) corrupt(format string, args ...any) error {
	return fmt.Errorf("open store %s: %w: %s: %s", db.path, ErrCorrupt, fmt.Sprintf(format, args...), remedy)
}

func (db *DB) incompatible(format string, args ...any) error {
	return fmt.Errorf("open store %s: %w: %s: %s", db.path, ErrIncompatible, fmt.Sprintf(format, args...), remedy)
}

// fileState is what load reads from the file.
type fileState struct {
	empty   bool
	format  uint64
	scheme  Scheme
	seq     uint64
	gen     [numStreams]uint64
	train   [numStreams][]int // per bucket index of scheme
	holdout [numStreams]int
	// secret is the store's (keys.go); newSecret says it is not in the
	// file yet, but made up for this read, to be written by load.
	secret      []byte
	newSecret   bool
	slot        arrivalSlot
	slotHoldout [numStreams]int // held-out records at or above slot.seq
	ids         [numStreams]identitySet
}

func (s *fileState) trainTotal(t features.Target) int {
	n := 0
	for _, c := range s.train[t] {
		n += c
	}
	return n
}

// load checks the whole file, initialises a new one, adapts an existing one
// to the options (reshape.go) and publishes the counts.
func (db *DB) load() error {
	st, err := db.readState()
	if err != nil {
		return err
	}
	if !st.empty && st.format < formatVersion {
		if err := db.upgrade(); err != nil {
			return fmt.Errorf("open store %s: upgrade from format version %d: %w", db.path, st.format, err)
		}
	}
	switch {
	case st.empty:
		if err := db.initialize(); err != nil {
			return fmt.Errorf("open store %s: initialize: %w", db.path, err)
		}
		db.report.Created = true
		st = &fileState{scheme: db.opts.Scheme, slot: arrivalSlot{minute: -1 << 62}}
		for _, t := range streams {
			st.train[t] = make([]int, db.schemeOf(t).NumBuckets())
			st.ids[t] = identitySet{}
		}
	case db.needsReshape(st):
		if err := db.reshape(st); err != nil {
			return fmt.Errorf("open store %s: adapt to options: %w", db.path, err)
		}
		if st, err = db.readState(); err != nil {
			return err
		}
	}
	if st.newSecret {
		if err := db.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySecret, st.secret) }); err != nil {
			return fmt.Errorf("open store %s: write its secret: %w", db.path, err)
		}
	}
	db.seq = st.seq
	db.train = st.train
	db.holdout = st.holdout
	db.gen = st.gen
	db.ids, db.slot, db.slotHoldout = st.ids, st.slot, st.slotHoldout
	for _, t := range streams {
		db.trainTotal[t] = st.trainTotal(t)
	}
	return nil
}

// readState reads and checks every record of the file.
func (db *DB) readState() (*fileState, error) {
	info, err := os.Stat(db.path)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", db.path, err)
	}
	var st *fileState
	err = db.bolt.View(func(tx *bolt.Tx) error {
		// bbolt never shrinks a file below its high-water mark; a shorter
		// file lost its tail.
		if tx.Size() > info.Size() {
			return db.corrupt("it is truncated: %d bytes, but its meta page says %d", info.Size(), tx.Size())
		}
		var err error
		if st, err = db.readMeta(tx); err != nil || st.empty {
			return err
		}
		for _, t := range streams {
			if err := db.readTarget(tx, st, t); err != nil {
				return err
			}
		}
		_ = tx.ForEach(func(_ []byte, b *bolt.Bucket) error { touch(b); return nil })
		return checkPages(db, tx)
	})
	return st, err
}

// touch reads every page under b on this goroutine, buckets the store does
// not know included, so a fault on a damaged page happens here, where Open
// recovers it, and not in bbolt's checker goroutine.
func touch(b *bolt.Bucket) {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v == nil {
			if child := b.Bucket(k); child != nil {
				touch(child)
			}
		}
	}
}

func (db *DB) readMeta(tx *bolt.Tx) (*fileState, error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		var found bool
		_ = tx.ForEach(func([]byte, *bolt.Bucket) error { found = true; return nil })
		if found {
			return nil, db.corrupt("it is a bbolt database but not a Headroom store (no %q bucket)", bucketMeta)
		}
		// bbolt created the file but our first transaction never
		// committed: nothing was stored.
		return &fileState{empty: true}, nil
	}
	format, err := getUint64(meta, keyFormat)
	if err != nil {
		return nil, db.corrupt("%v", err)
	}
	if format < minFormatVersion || format > formatVersion {
		return nil, db.incompatible("it has format version %d, this binary reads %d to %d", format, minFormatVersion, formatVersion)
	}
	st := &fileState{format: format}
	name := meta.Get(keyScheme)
	if name == nil {
		return nil, db.corrupt("meta/%s is missing", keyScheme)
	}
	if st.scheme, err = ParseScheme(string(name)); err != nil {
		return nil, db.incompatible("its bucket scheme cannot be read by this binary: %v", err)
	}
	if st.seq, err = getUint64(meta, keySeq); err != nil {
		return nil, db.corrupt("%v", err)
	}
	for _, t := range streams {
		if format < streamSince(t) {
			continue // added by a later version
		}
		if st.gen[t], err = getUint64(meta, generationKey(t)); err != nil {
			return nil, db.corrupt("%v", err)
		}
	}
	if st.secret, err = readSecret(meta); err != nil {
		return nil, db.corrupt("%v", err)
	}
	if st.secret == nil {
		// Written before secrets: one is made now, and load writes it.
		if st.secret, err = newSecret(db.opts); err != nil {
			return nil, err
		}
		st.newSecret = true
	}
	db.keys = keysOf(st.secret, db.opts.PublicSides)
	if st.slot, err = readSlot(meta); err != nil {
		return nil, db.corrupt("%v", err)
	}
	return st, nil
}

// readTarget decodes every record of one target, checking the invariants
// the rest of the package relies on, and counts them.
func (db *DB) readTarget(tx *bolt.Tx, st *fileState, t features.Target) error {
	root := tx.Bucket(targetBucket(t))
	st.ids[t] = identitySet{}
	if root == nil && st.format < streamSince(t) {
		st.train[t] = make([]int, db.schemeOf(t).NumBuckets())
		return nil // added by the upgrade
	}
	if root == nil {
		return db.corrupt("bucket %s is missing", t)
	}
	train, holdout := root.Bucket(bucketTrain), root.Bucket(bucketHoldout)
	if train == nil || holdout == nil {
		return db.corrupt("bucket %s/%s or %s/%s is missing", t, bucketTrain, t, bucketHoldout)
	}
	scheme, schemeName := st.scheme, st.scheme.String()
	if !t.PerPod() {
		scheme, schemeName = transferScheme, "link×kvtok (fixed)"
	}
	st.train[t] = make([]int, scheme.NumBuckets())
	err := train.ForEach(func(name, v []byte) error {
		idx := scheme.index(string(name))
		switch {
		case v != nil:
			return db.corrupt("%s/%s holds a record %x where only buckets belong", t, bucketTrain, name)
		case idx < 0:
			return db.corrupt("%s/%s/%s is not a bucket of scheme %s", t, bucketTrain, name, schemeName)
		}
		n, err := db.checkRecords(train.Bucket(name), fmt.Sprintf("%s/%s/%s", t, bucketTrain, name), st.seq, func(_ uint64, v []byte) {
			st.ids[t].add(db.keys.identityOf(v))
		})
		st.train[t][idx] = n
		return err
	})
	if err != nil {
		return err
	}
	st.holdout[t], err = db.checkRecords(holdout, fmt.Sprintf("%s/%s", t, bucketHoldout), st.seq, func(seq uint64, v []byte) {
		st.ids[t].add(db.keys.identityOf(v))
		if seq >= st.slot.seq {
			st.slotHoldout[t]++
		}
	})
	return err
}

// checkRecords checks and counts b's records, calling each with every one
// that decodes (its value valid only during the call).
func (db *DB) checkRecords(b *bolt.Bucket, path string, maxSeq uint64, each func(seq uint64, v []byte)) (int, error) {
	var s features.Sample
	var prev uint64
	n := 0
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 8 || v == nil {
			return n, db.corrupt("%s holds an entry with key %x that is not a sample", path, k)
		}
		seq := binary.BigEndian.Uint64(k)
		if seq <= prev || seq > maxSeq {
			return n, db.corrupt("%s key %d is out of order or beyond meta/seq %d", path, seq, maxSeq)
		}
		if err := decodeSample(v, &s); err != nil {
			return n, db.corrupt("%s key %d: %v", path, seq, err)
		}
		each(seq, v)
		prev = seq
		n++
	}
	return n, nil
}

// checkPages runs bbolt's consistency check (free list against reachable
// pages). It must run after touch: the check reads pages on a goroutine of
// its own, where a fault would not be recoverable.
func checkPages(db *DB, tx *bolt.Tx) error {
	var problems []string
	for err := range tx.Check() {
		if len(problems) < 3 {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return db.corrupt("bbolt consistency check: %s", strings.Join(problems, "; "))
	}
	return nil
}

func getUint64(b *bolt.Bucket, key []byte) (uint64, error) {
	v := b.Get(key)
	if len(v) != 8 {
		return 0, fmt.Errorf("meta/%s is missing or not 8 bytes", key)
	}
	return binary.BigEndian.Uint64(v), nil
}

func putUint64(b *bolt.Bucket, key []byte, v uint64) error {
	return b.Put(key, binary.BigEndian.AppendUint64(nil, v))
}

// initialize creates the layout in an empty file.
func (db *DB) initialize() error {
	return db.update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if err := putUint64(meta, keyFormat, formatVersion); err != nil {
			return err
		}
		if err := meta.Put(keyScheme, []byte(db.opts.Scheme.String())); err != nil {
			return err
		}
		if err := putUint64(meta, keySeq, 0); err != nil {
			return err
		}
		secret, err := newSecret(db.opts)
		if err != nil {
			return err
		}
		if err := meta.Put(keySecret, secret); err != nil {
			return err
		}
		db.keys = keysOf(secret, db.opts.PublicSides)
		for _, t := range streams {
			if err := createStream(tx, meta, t); err != nil {
				return err
			}
		}
		return nil
	})
}

// createStream adds an empty stream: its buckets and its generation.
func createStream(tx *bolt.Tx, meta *bolt.Bucket, t features.Target) error {
	if err := putUint64(meta, generationKey(t), 0); err != nil {
		return err
	}
	root, err := tx.CreateBucketIfNotExists(targetBucket(t))
	if err != nil {
		return err
	}
	for _, name := range [][]byte{bucketTrain, bucketHoldout} {
		if _, err := root.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	return nil
}

// upgrade brings an older file to formatVersion in one transaction: the
// streams added since, empty, and the new version number.
func (db *DB) upgrade() error {
	return db.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		for _, t := range streams {
			if tx.Bucket(targetBucket(t)) != nil {
				continue
			}
			if err := createStream(tx, meta, t); err != nil {
				return err
			}
		}
		return putUint64(meta, keyFormat, formatVersion)
	})
}

// update runs a write transaction and counts it when it commits.
func (db *DB) update(fn func(*bolt.Tx) error) error {
	if err := db.bolt.Update(fn); err != nil {
		return err
	}
	db.commits.Add(1)
	return nil
}

// Close closes the file. Counts keep answering from memory; reads and
// writes fail.
func (db *DB) Close() error {
	// Leave the freelist in the file (freelist.go). The flag is read when
	// a commit runs, and this transaction holds the writer's lock.
	syncErr := db.bolt.Update(func(*bolt.Tx) error {
		db.bolt.NoFreelistSync = false
		return nil
	})
	if err := db.bolt.Close(); err != nil {
		return fmt.Errorf("close store %s: %w", db.path, err)
	}
	if syncErr != nil && !errors.Is(syncErr, berrors.ErrDatabaseNotOpen) { // closed twice: nothing to write
		return fmt.Errorf("close store %s: write its freelist: %w", db.path, syncErr)
	}
	return nil
}

// Path is the file's path as given to Open.
func (db *DB) Path() string { return db.path }

// Scheme is the bucket scheme in use.
func (db *DB) Scheme() Scheme { return db.opts.Scheme }

// Options returns the options in use, defaults applied.
func (db *DB) Options() Options { return db.opts }

// OpenReport says what Open changed in the file.
func (db *DB) OpenReport() OpenReport { return db.report }

// MoveAside renames the file at path to path.corrupt-<UTC timestamp>, so the
// caller can start an empty store at path while the old file is kept for
// inspection. It never overwrites an existing file. The store must not be
// open.
func MoveAside(path string) (string, error) {
	if _, err := os.Lstat(path); err != nil {
		return "", fmt.Errorf("move store aside: %w", err)
	}
	newPath := path + ".corrupt-" + time.Now().UTC().Format("20060102T150405.000000000Z")
	if _, err := os.Lstat(newPath); err == nil {
		return "", fmt.Errorf("move store %s aside: %s already exists", path, newPath)
	}
	if err := os.Rename(path, newPath); err != nil {
		return "", fmt.Errorf("move store %s aside: %w", path, err)
	}
	// Make the rename itself durable before the caller creates a new file
	// in its place.
	if dir, err := os.Open(filepath.Dir(path)); err == nil {
		_ = dir.Sync()
		_ = dir.Close()
	}
	return newPath, nil
}

func validTarget(t features.Target) bool { return t >= 0 && int(t) < numStreams }

func checkTarget(t features.Target) error {
	if !validTarget(t) {
		return fmt.Errorf("unknown target %d", t)
	}
	return nil
}
