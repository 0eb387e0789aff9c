package store

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/headroomhq/headroom/features"
)

// AddResult counts what one Add did. Arrays are indexed by features.Target.
type AddResult struct {
	Train   [numTargets]int // samples put into the target's training buckets
	Holdout [numTargets]int // samples put into the target's holdout
	// Evicted counts the target's samples removed to make room, the call's
	// own included when it brings more than a bucket holds.
	Evicted   [numTargets]int
	Discarded int // samples with neither label
}

// addPlan is the part of an Add that needs no lock: encoding and
// placement.
type addPlan struct {
	enc  []byte  // every record, back to back
	ends []int32 // record i is enc[ends[i-1]:ends[i]]
	// train[t][idx] lists, ascending, the samples going to bucket idx.
	train   [numTargets][][]int32
	holdout [numTargets][]int32
	res     AddResult
}

func (p *addPlan) record(i int32) []byte {
	start := int32(0)
	if i > 0 {
		start = p.ends[i-1]
	}
	return p.enc[start:p.ends[i]]
}

func (db *DB) plan(samples []Sample) (*addPlan, error) {
	p := &addPlan{
		enc:  make([]byte, 0, 64*len(samples)),
		ends: make([]int32, len(samples)),
	}
	nb := db.opts.Scheme.NumBuckets()
	for i := range samples {
		s := &samples[i]
		var err error
		if p.enc, err = appendSample(p.enc, s); err != nil {
			return nil, fmt.Errorf("add to store: sample %d: %w", i, err)
		}
		p.ends[i] = int32(len(p.enc))
		rec := p.record(int32(i))
		labelled := false
		for _, t := range features.Targets {
			if _, ok := s.Label(t); !ok {
				continue
			}
			labelled = true
			if holdoutPoint(t, rec) < db.opts.HoldoutFraction {
				p.holdout[t] = append(p.holdout[t], int32(i))
				p.res.Holdout[t]++
				continue
			}
			if p.train[t] == nil {
				p.train[t] = make([][]int32, nb)
			}
			idx := db.opts.Scheme.Index(&s.Row)
			p.train[t][idx] = append(p.train[t][idx], int32(i))
			p.res.Train[t]++
		}
		if !labelled {
			p.res.Discarded++
		}
	}
	return p, nil
}

// Add stores samples: each labelled target's side, training bucket or
// holdout, evicting the oldest samples of full ones. All of one call is one
// transaction, fsynced before Add returns nil; on error nothing of the call
// is stored. A sample with a non-finite number or a timestamp outside
// 1678-2262 fails the whole call (validate before). Samples without labels
// are counted as discarded, not errors.
func (db *DB) Add(samples []Sample) (AddResult, error) {
	p, err := db.plan(samples)
	if err != nil {
		return AddResult{}, err
	}
	res := p.res
	if res.Discarded == len(samples) {
		return res, nil
	}

	db.writeMu.Lock()
	defer db.writeMu.Unlock()

	// One key per sample, shared by both targets; live until commit, as
	// bbolt requires of keys and values.
	keys := make([]byte, 8*len(samples))
	for i := range samples {
		binary.BigEndian.PutUint64(keys[8*i:], db.seq+uint64(i)+1)
	}
	key := func(i int32) []byte { return keys[8*i : 8*i+8] }

	type bucketCount struct {
		t   features.Target
		idx int
		n   int
	}
	var trainCounts []bucketCount
	var holdoutCounts [numTargets]int
	var gen [numTargets]uint64

	err = db.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		for _, t := range features.Targets {
			holdoutCounts[t] = db.holdout[t]
			gen[t] = db.gen[t]
			if res.Train[t]+res.Holdout[t] == 0 {
				continue
			}
			root := tx.Bucket(targetBucket(t))
			train := root.Bucket(bucketTrain)
			for idx, list := range p.train[t] {
				if len(list) == 0 {
					continue
				}
				b, err := train.CreateBucketIfNotExists(db.keyBytes[idx])
				if err != nil {
					return fmt.Errorf("%s/%s/%s: %w", t, bucketTrain, db.keyBytes[idx], err)
				}
				n, evicted, err := appendBounded(b, db.train[t][idx], db.opts.BucketCapacity, list, key, p.record)
				if err != nil {
					return fmt.Errorf("%s/%s/%s: %w", t, bucketTrain, db.keyBytes[idx], err)
				}
				res.Evicted[t] += evicted
				trainCounts = append(trainCounts, bucketCount{t, idx, n})
			}
			if list := p.holdout[t]; len(list) > 0 {
				n, evicted, err := appendBounded(root.Bucket(bucketHoldout), db.holdout[t], db.opts.HoldoutCapacity, list, key, p.record)
				if err != nil {
					return fmt.Errorf("%s/%s: %w", t, bucketHoldout, err)
				}
				res.Evicted[t] += evicted
				holdoutCounts[t] = n
			}
			gen[t]++
			if err := putUint64(meta, generationKey(t), gen[t]); err != nil {
				return err
			}
		}
		return putUint64(meta, keySeq, db.seq+uint64(len(samples)))
	})
	if err != nil {
		return AddResult{}, fmt.Errorf("add %d samples to store %s: %w", len(samples), db.path, err)
	}

	db.seq += uint64(len(samples))
	db.mu.Lock()
	for _, c := range trainCounts {
		db.trainTotal[c.t] += c.n - db.train[c.t][c.idx]
		db.train[c.t][c.idx] = c.n
	}
	db.holdout = holdoutCounts
	db.gen = gen
	db.mu.Unlock()
	return res, nil
}

// appendBounded appends the listed records to b, which holds have samples,
// and evicts the oldest beyond capacity. Records the call itself would
// evict at once are not written. It returns the new count and the number
// evicted.
func appendBounded(b *bolt.Bucket, have, capacity int, list []int32, key, val func(int32) []byte) (n, evicted int, err error) {
	if over := len(list) - capacity; over > 0 {
		list = list[over:]
		evicted = over
	}
	if over := have + len(list) - capacity; over > 0 {
		d, err := trimOldest(b, over)
		if err != nil {
			return 0, 0, err
		}
		if d != over {
			return 0, 0, fmt.Errorf("bucket holds %d samples, %d fewer than counted", have-d, over-d)
		}
		evicted += over
		have -= over
	}
	b.FillPercent = fillPercent
	for _, i := range list {
		if err := b.Put(key(i), val(i)); err != nil {
			return 0, 0, err
		}
	}
	return have + len(list), evicted, nil
}

// holdoutPoint maps a record to [0, 1), deterministically: a salted FNV-64a
// of the record's bytes, finished by the SplitMix64 mixer because FNV's top
// bits are poorly mixed. The per-target salt makes the two targets'
// decisions for one sample independent.
func holdoutPoint(t features.Target, rec []byte) float64 {
	h := holdoutSeed[t]
	for _, c := range rec {
		h ^= uint64(c)
		h *= fnvPrime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return float64(h>>11) * 0x1p-53
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// holdoutSeed is FNV-64a's state after each target's salt. The salts are
// part of the file format: changing them moves future samples of a known
// content to the other side.
var holdoutSeed = [numTargets]uint64{
	features.TTFT: fnvString("headroom/holdout/ttft"),
	features.TPOT: fnvString("headroom/holdout/tpot"),
}

func fnvString(s string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}
