package store

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/headroomhq/headroom/features"
)

// FlushResult holds the pre-flush sizes of what a Flush deleted, per
// target; 0 for what it left alone.
type FlushResult struct {
	Train   [numStreams]int
	Holdout [numStreams]int
}

// Flush deletes a target's training samples, holdout samples, or both, for
// the given targets (every target when none is given), in one transaction.
// A target's generation grows when anything of it was deleted. Sequence
// numbers are not reset.
func (db *DB) Flush(train, holdout bool, targets ...features.Target) (FlushResult, error) {
	if len(targets) == 0 {
		targets = streams[:]
	}
	var chosen [numStreams]bool
	for _, t := range targets {
		if err := checkTarget(t); err != nil {
			return FlushResult{}, fmt.Errorf("flush store: %w", err)
		}
		chosen[t] = true
	}

	db.writeMu.Lock()
	defer db.writeMu.Unlock()

	var res FlushResult
	gen := db.gen
	for _, t := range streams {
		if !chosen[t] {
			continue
		}
		if train {
			res.Train[t] = db.trainTotal[t]
		}
		if holdout {
			res.Holdout[t] = db.holdout[t]
		}
		if res.Train[t]+res.Holdout[t] > 0 {
			gen[t]++
		}
	}
	if gen == db.gen {
		return res, nil // nothing to delete
	}

	// The identities of each flushed stream: none left, or those of the
	// side kept, read in the same transaction.
	var ids [numStreams]identitySet
	err := db.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		for _, t := range streams {
			if gen[t] == db.gen[t] {
				continue
			}
			defer func() { ids[t] = db.remainingIdentities(tx.Bucket(targetBucket(t))) }()
			root := tx.Bucket(targetBucket(t))
			// Deleting a whole bucket frees its pages without visiting
			// every key.
			for _, name := range [][]byte{bucketTrain, bucketHoldout} {
				n := res.Train[t]
				if string(name) == string(bucketHoldout) {
					n = res.Holdout[t]
				}
				if n == 0 {
					continue
				}
				if err := root.DeleteBucket(name); err != nil {
					return fmt.Errorf("%s/%s: %w", t, name, err)
				}
				if _, err := root.CreateBucket(name); err != nil {
					return fmt.Errorf("%s/%s: %w", t, name, err)
				}
			}
			if err := putUint64(meta, generationKey(t), gen[t]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return FlushResult{}, fmt.Errorf("flush store %s: %w", db.path, err)
	}

	db.mu.Lock()
	for _, t := range streams {
		if res.Train[t] > 0 {
			clear(db.train[t])
			db.trainTotal[t] = 0
		}
		if res.Holdout[t] > 0 {
			db.holdout[t] = 0
			db.slotHoldout[t] = 0
		}
		if ids[t] != nil {
			db.ids[t] = ids[t]
		}
	}
	db.gen = gen
	db.mu.Unlock()
	return res, nil
}

// remainingIdentities reads the identities of the records a stream's root
// holds.
func (db *DB) remainingIdentities(root *bolt.Bucket) identitySet {
	ids := identitySet{}
	add := func(b *bolt.Bucket) {
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v != nil {
				ids.add(db.keys.identityOf(v))
			}
		}
	}
	train := root.Bucket(bucketTrain)
	_ = train.ForEachBucket(func(name []byte) error { add(train.Bucket(name)); return nil })
	add(root.Bucket(bucketHoldout))
	return ids
}
