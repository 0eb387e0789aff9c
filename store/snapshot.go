package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/headroomhq/headroom/features"
)

// Bucket is one training bucket's samples, oldest first.
type Bucket struct {
	Key     string // e.g. "kv_3_prefix_0"
	Samples []features.Sample
}

// TargetSnapshot is a consistent copy of one target's samples.
type TargetSnapshot struct {
	// Generation is the target's generation these samples belong to
	// (read in the same transaction, unlike a separate Generation call).
	Generation uint64
	Buckets    []Bucket          // non-empty training buckets, in key order
	Holdout    []features.Sample // oldest first
}

// Snapshot returns copies of a target's training and holdout samples, read
// in one transaction. Both are in insertion order, oldest first: train
// merges the buckets by sequence number.
func (db *DB) Snapshot(t features.Target) (train, holdout []features.Sample, err error) {
	r, err := db.read(t)
	if err != nil {
		return nil, nil, err
	}
	return r.merged(), r.holdout, nil
}

// SnapshotBuckets is Snapshot keeping the training buckets apart, with the
// generation the data belongs to.
func (db *DB) SnapshotBuckets(t features.Target) (TargetSnapshot, error) {
	r, err := db.read(t)
	if err != nil {
		return TargetSnapshot{}, err
	}
	snap := TargetSnapshot{Generation: r.gen, Holdout: r.holdout, Buckets: make([]Bucket, len(r.keys))}
	for i, key := range r.keys {
		lo, hi := r.bounds[i], r.bounds[i+1]
		// Capacity capped so a caller's append cannot overwrite the next
		// bucket's samples.
		snap.Buckets[i] = Bucket{Key: key, Samples: r.train[lo:hi:hi]}
	}
	return snap, nil
}

// targetRead is one target's data as read: training samples concatenated
// bucket by bucket, bucket i being train[bounds[i]:bounds[i+1]].
type targetRead struct {
	gen     uint64
	keys    []string
	bounds  []int
	train   []features.Sample
	seqs    []uint64 // seqs[j] is the sequence number of train[j]
	holdout []features.Sample
}

func (db *DB) read(t features.Target) (*targetRead, error) {
	if err := checkTarget(t); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	// Sizes from memory are only capacity hints: the transaction decides.
	counts := db.Counts()
	r := &targetRead{
		train:   make([]features.Sample, 0, counts.Train(t)),
		seqs:    make([]uint64, 0, counts.Train(t)),
		holdout: make([]features.Sample, 0, counts.Holdout(t)),
		bounds:  []int{0},
	}
	err := db.bolt.View(func(tx *bolt.Tx) error {
		gen, err := getUint64(tx.Bucket(bucketMeta), generationKey(t))
		if err != nil {
			return err
		}
		r.gen = gen
		root := tx.Bucket(targetBucket(t))
		train := root.Bucket(bucketTrain)
		err = train.ForEachBucket(func(name []byte) error {
			var rerr error
			path := fmt.Sprintf("%s/%s/%s", t, bucketTrain, name)
			if r.train, r.seqs, rerr = readRecords(train.Bucket(name), path, r.train, r.seqs); rerr != nil {
				return rerr
			}
			if n := len(r.train); n > r.bounds[len(r.bounds)-1] {
				r.keys = append(r.keys, string(name))
				r.bounds = append(r.bounds, n)
			}
			return nil
		})
		if err != nil {
			return err
		}
		r.holdout, _, err = readRecords(root.Bucket(bucketHoldout), fmt.Sprintf("%s/%s", t, bucketHoldout), r.holdout, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot %s of store %s: %w", t, db.path, err)
	}
	return r, nil
}

// readRecords appends b's samples, oldest first, to dst, and their sequence
// numbers to seqs unless seqs is nil.
func readRecords(b *bolt.Bucket, path string, dst []features.Sample, seqs []uint64) ([]features.Sample, []uint64, error) {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var seq uint64
		var err error
		if dst, seq, err = appendRecord(dst, k, v, path); err != nil {
			return dst, seqs, err
		}
		if seqs != nil {
			seqs = append(seqs, seq)
		}
	}
	return dst, seqs, nil
}

// appendRecord decodes the record stored under key k onto dst and returns
// its sequence number.
func appendRecord(dst []features.Sample, k, v []byte, path string) ([]features.Sample, uint64, error) {
	if len(k) != 8 {
		return dst, 0, fmt.Errorf("%s: key %x is not a sequence number", path, k)
	}
	seq := binary.BigEndian.Uint64(k)
	dst = append(dst, features.Sample{})
	if err := decodeSample(v, &dst[len(dst)-1]); err != nil {
		return dst, seq, fmt.Errorf("%s key %d: %w", path, seq, err)
	}
	return dst, seq, nil
}

// merged returns the training samples in sequence order: a k-way merge of
// the buckets, each already in order.
func (r *targetRead) merged() []features.Sample {
	k := len(r.keys)
	if k <= 1 {
		return r.train
	}
	// next[b] is bucket b's next unmerged position; heap holds the buckets
	// not yet exhausted, ordered by the sequence number at next[b].
	next := append([]int(nil), r.bounds[:k]...)
	heap := make([]int, k)
	for b := range heap {
		heap[b] = b
	}
	less := func(i, j int) bool { return r.seqs[next[heap[i]]] < r.seqs[next[heap[j]]] }
	down := func(i int) {
		for {
			m := i
			if l := 2*i + 1; l < len(heap) && less(l, m) {
				m = l
			}
			if rt := 2*i + 2; rt < len(heap) && less(rt, m) {
				m = rt
			}
			if m == i {
				return
			}
			heap[i], heap[m] = heap[m], heap[i]
			i = m
		}
	}
	for i := len(heap)/2 - 1; i >= 0; i-- {
		down(i)
	}
	out := make([]features.Sample, 0, len(r.train))
	for len(heap) > 0 {
		b := heap[0]
		out = append(out, r.train[next[b]])
		next[b]++
		if next[b] == r.bounds[b+1] {
			heap[0] = heap[len(heap)-1]
			heap = heap[:len(heap)-1]
		}
		down(0)
	}
	return out
}

// Counts are a store's sample counts per target.
type Counts struct {
	train, holdout [numStreams]int
}

// Train is the number of training samples of a target.
func (c Counts) Train(t features.Target) int {
	if !validTarget(t) {
		return 0
	}
	return c.train[t]
}

// Holdout is the number of holdout samples of a target.
func (c Counts) Holdout(t features.Target) int {
	if !validTarget(t) {
		return 0
	}
	return c.holdout[t]
}

// Counts returns the sample counts from memory: cheap, and exact as of the
// last committed write.
func (db *DB) Counts() Counts {
	db.mu.RLock()
	defer db.mu.RUnlock()
	return Counts{train: db.trainTotal, holdout: db.holdout}
}

// BucketCounts returns the sample count of each non-empty training bucket
// of a target, by bucket key, from memory.
func (db *DB) BucketCounts(t features.Target) map[string]int {
	m := make(map[string]int)
	if !validTarget(t) {
		return m
	}
	db.mu.RLock()
	defer db.mu.RUnlock()
	for idx, n := range db.train[t] {
		if n > 0 {
			m[db.schemeOf(t).keys[idx]] = n
		}
	}
	return m
}

// Generation is a number that grows whenever a target's samples change
// (Add, Flush, or Open adapting the file to new options) and never
// otherwise. It is stored in the file, so it keeps growing across restarts:
// a trainer retrains only when it differs from the one it trained on.
func (db *DB) Generation(t features.Target) uint64 {
	if !validTarget(t) {
		return 0
	}
	db.mu.RLock()
	defer db.mu.RUnlock()
	return db.gen[t]
}

// SnapshotNewest is Snapshot reading at most maxTrain training samples
// (all of them when maxTrain <= 0): the newest of every bucket, with the
// buckets sharing maxTrain evenly, a bucket holding fewer than its share
// giving the rest to the others. Stratification is why the store has
// buckets, so a cap keeps every bucket represented rather than keeping the
// newest samples overall. The holdout is read whole. It gives up with
// ctx's error between buckets once ctx ends.
func (db *DB) SnapshotNewest(ctx context.Context, t features.Target, maxTrain int) (train, holdout []features.Sample, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("snapshot: %w", err)
	}
	if maxTrain <= 0 {
		return db.Snapshot(t)
	}
	if err := checkTarget(t); err != nil {
		return nil, nil, fmt.Errorf("snapshot: %w", err)
	}
	db.mu.RLock()
	counts := append([]int(nil), db.train[t]...)
	db.mu.RUnlock()
	quotas := shareEvenly(counts, maxTrain)
	r := &targetRead{bounds: []int{0}}
	err = db.bolt.View(func(tx *bolt.Tx) error {
		train := tx.Bucket(targetBucket(t)).Bucket(bucketTrain)
		for idx, q := range quotas {
			b := train.Bucket(db.keyBytes[t][idx])
			if q == 0 || b == nil {
				continue
			}
			// A shutdown waits for this read (Close waits for open
			// transactions), which on a starved background thread can be
			// slow: give up between buckets.
			if err := ctx.Err(); err != nil {
				return err
			}
			var rerr error
			path := fmt.Sprintf("%s/%s/%s", t, bucketTrain, db.keyBytes[t][idx])
			if r.train, r.seqs, rerr = readNewest(b, path, q, r.train, r.seqs); rerr != nil {
				return rerr
			}
			if n := len(r.train); n > r.bounds[len(r.bounds)-1] {
				r.keys = append(r.keys, string(db.keyBytes[t][idx]))
				r.bounds = append(r.bounds, n)
			}
		}
		var rerr error
		r.holdout, _, rerr = readRecords(tx.Bucket(targetBucket(t)).Bucket(bucketHoldout), fmt.Sprintf("%s/%s", t, bucketHoldout), nil, nil)
		return rerr
	})
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot %s of store %s: %w", t, db.path, err)
	}
	return r.merged(), r.holdout, nil
}

// SnapshotHoldout returns a copy of a target's held-out samples alone,
// oldest first, for views of a model that need no training samples (a
// full store's holdout is a thousand samples, its training side up to
// 180,000).
func (db *DB) SnapshotHoldout(ctx context.Context, t features.Target) ([]features.Sample, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("snapshot holdout: %w", err)
	}
	if err := checkTarget(t); err != nil {
		return nil, fmt.Errorf("snapshot holdout: %w", err)
	}
	var holdout []features.Sample
	err := db.bolt.View(func(tx *bolt.Tx) error {
		var rerr error
		holdout, _, rerr = readRecords(tx.Bucket(targetBucket(t)).Bucket(bucketHoldout), fmt.Sprintf("%s/%s", t, bucketHoldout), nil, nil)
		return rerr
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot holdout %s of store %s: %w", t, db.path, err)
	}
	return holdout, nil
}

// shareEvenly splits total among buckets holding counts[i] samples: every
// bucket gets the same share, except that one holding fewer gets all it has
// and the rest is shared among the others (water-filling). The quotas sum
// to min(total, sum(counts)).
func shareEvenly(counts []int, total int) []int {
	quotas := make([]int, len(counts))
	open := 0 // buckets that can still take more
	for _, c := range counts {
		if c > 0 {
			open++
		}
	}
	for total > 0 && open > 0 {
		share := max(total/open, 1)
		open = 0
		for i, c := range counts {
			room := c - quotas[i]
			if room <= 0 || total == 0 {
				continue
			}
			give := min(share, room, total)
			quotas[i] += give
			total -= give
			if give < room {
				open++
			}
		}
	}
	return quotas
}

// readNewest appends b's newest n samples, oldest first, to dst, and their
// sequence numbers to seqs.
func readNewest(b *bolt.Bucket, path string, n int, dst []features.Sample, seqs []uint64) ([]features.Sample, []uint64, error) {
	start, seqStart := len(dst), len(seqs)
	c := b.Cursor()
	for k, v := c.Last(); k != nil && len(dst)-start < n; k, v = c.Prev() {
		var seq uint64
		var err error
		if dst, seq, err = appendRecord(dst, k, v, path); err != nil {
			return dst, seqs, err
		}
		seqs = append(seqs, seq)
	}
	slices.Reverse(dst[start:])
	slices.Reverse(seqs[seqStart:])
	return dst, seqs, nil
}
