package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/headroomhq/headroom/features"
)

// needsReshape reports whether the stored samples do not fit the options:
// they were bucketed by another scheme, or the capacities shrank below what
// some bucket holds.
func (db *DB) needsReshape(st *fileState) bool {
	if st.scheme.String() != db.opts.Scheme.String() {
		return true
	}
	for _, t := range streams {
		if st.holdout[t] > db.opts.HoldoutCapacity {
			return true
		}
		for _, n := range st.train[t] {
			if n > db.opts.BucketCapacity {
				return true
			}
		}
	}
	return false
}

// reshape makes the file fit the options in one transaction: it re-buckets
// every training sample under the new scheme, or trims over-full buckets,
// keeping the newest samples of each bucket. Samples are never moved
// between training and holdout, so the holdout stays disjoint from training.
func (db *DB) reshape(st *fileState) error {
	rebucket := st.scheme.String() != db.opts.Scheme.String()
	var dropped [numStreams]int
	err := db.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		for _, t := range streams {
			root := tx.Bucket(targetBucket(t))
			var n int
			var err error
			// The pair streams' scheme is fixed: only capacities change it.
			if rebucket && t.PerPod() {
				n, err = db.rebucket(root, t)
			} else {
				n, err = db.trimTrain(root.Bucket(bucketTrain), t, st.train[t])
			}
			if err != nil {
				return fmt.Errorf("%s: %w", t, err)
			}
			h, err := trimOldest(root.Bucket(bucketHoldout), st.holdout[t]-db.opts.HoldoutCapacity, nil)
			if err != nil {
				return fmt.Errorf("%s/%s: %w", t, bucketHoldout, err)
			}
			dropped[t] = n + h
			// The training set changed, or at least its stratification did.
			if dropped[t] > 0 || (rebucket && t.PerPod() && st.trainTotal(t) > 0) {
				if err := putUint64(meta, generationKey(t), st.gen[t]+1); err != nil {
					return err
				}
			}
		}
		if rebucket {
			return meta.Put(keyScheme, []byte(db.opts.Scheme.String()))
		}
		return nil
	})
	if err != nil {
		return err
	}
	db.report.Dropped = dropped
	if rebucket {
		db.report.FromScheme = st.scheme.String()
	}
	return nil
}

// rebucket replaces a target's training buckets by ones of the new scheme,
// each keeping its newest BucketCapacity samples under their original
// sequence numbers. It returns how many samples it dropped.
func (db *DB) rebucket(root *bolt.Bucket, t features.Target) (int, error) {
	type record struct {
		seq uint64
		idx int // bucket index in the new scheme
		val []byte
	}
	var recs []record
	old := root.Bucket(bucketTrain)
	var s features.Sample
	err := old.ForEachBucket(func(name []byte) error {
		c := old.Bucket(name).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			seq := binary.BigEndian.Uint64(k)
			if err := decodeSample(v, &s); err != nil {
				return fmt.Errorf("%s/%s key %d: %w", bucketTrain, name, seq, err)
			}
			// Copied: the old buckets are deleted below.
			recs = append(recs, record{seq, db.opts.Scheme.Index(&s.Row), bytes.Clone(v)})
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	slices.SortFunc(recs, func(a, b record) int { return cmp.Compare(a.seq, b.seq) })

	// Newest first, keep up to capacity per new bucket.
	kept := make([]int, db.opts.Scheme.NumBuckets())
	keep := make([]bool, len(recs))
	dropped := 0
	for i := len(recs) - 1; i >= 0; i-- {
		if kept[recs[i].idx] < db.opts.BucketCapacity {
			kept[recs[i].idx]++
			keep[i] = true
		} else {
			dropped++
		}
	}

	if err := root.DeleteBucket(bucketTrain); err != nil {
		return 0, err
	}
	train, err := root.CreateBucket(bucketTrain)
	if err != nil {
		return 0, err
	}
	buckets := make([]*bolt.Bucket, db.opts.Scheme.NumBuckets())
	keys := make([]byte, 8*len(recs)) // live until commit, as bbolt requires
	for i, r := range recs {
		if !keep[i] {
			continue
		}
		b := buckets[r.idx]
		if b == nil {
			if b, err = train.CreateBucket(db.keyBytes[t][r.idx]); err != nil {
				return 0, err
			}
			b.FillPercent = fillPercent
			buckets[r.idx] = b
		}
		key := binary.BigEndian.AppendUint64(keys[8*i:8*i], r.seq)
		if err := b.Put(key, r.val); err != nil {
			return 0, err
		}
	}
	return dropped, nil
}

// trimTrain trims each training bucket of stream t to capacity; counts are
// per bucket index of the stream's (unchanged) scheme.
func (db *DB) trimTrain(train *bolt.Bucket, t features.Target, counts []int) (int, error) {
	dropped := 0
	for idx, n := range counts {
		if n <= db.opts.BucketCapacity {
			continue
		}
		d, err := trimOldest(train.Bucket(db.keyBytes[t][idx]), n-db.opts.BucketCapacity, nil)
		dropped += d
		if err != nil {
			return dropped, fmt.Errorf("%s/%s: %w", bucketTrain, db.keyBytes[t][idx], err)
		}
	}
	return dropped, nil
}

// trimOldest deletes the n smallest keys of b (none if n ≤ 0), calling
// each, when not nil, with every record before it goes, and returns how
// many it deleted.
func trimOldest(b *bolt.Bucket, n int, each func(k, v []byte)) (int, error) {
	c := b.Cursor()
	done := 0
	for ; done < n; done++ {
		k, v := c.First()
		if k == nil {
			break
		}
		if each != nil {
			each(k, v)
		}
		if err := c.Delete(); err != nil {
			return done, err
		}
	}
	return done, nil
}
