package store

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/headroomhq/headroom/features"
)

// AddResult counts what one Add did. Arrays are indexed by features.Target.
type AddResult struct {
	Train   [numStreams]int // samples put into the target's training buckets
	Holdout [numStreams]int // samples put into the target's holdout
	// Evicted counts the target's samples removed to make room, the call's
	// own included when it brings more than a bucket holds.
	Evicted   [numStreams]int
	Discarded int // samples with neither label
}

// addPlan is the part of an Add that needs no lock: encoding and
// placement.
type addPlan struct {
	enc  []byte  // every record, back to back
	ends []int32 // record i is enc[ends[i-1]:ends[i]]
	// train[t][idx] lists, ascending, the samples going to bucket idx.
	train   [numStreams][][]int32
	holdout [numStreams][]int32
	res     AddResult
}

func (p *addPlan) record(i int32) []byte {
	start := int32(0)
	if i > 0 {
		start = p.ends[i-1]
	}
	return p.enc[start:p.ends[i]]
}

func (db *DB) plan(samples []features.Sample) (*addPlan, error) {
	p := &addPlan{
		enc:  make([]byte, 0, 64*len(samples)),
		ends: make([]int32, len(samples)),
	}
	for i := range samples {
		s := &samples[i]
		var err error
		if p.enc, err = appendSample(p.enc, s); err != nil {
			return nil, fmt.Errorf("add to store: sample %d: %w", i, err)
		}
		p.ends[i] = int32(len(p.enc))
		rec := p.record(int32(i))
		labelled := false
		for _, t := range streams {
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
				p.train[t] = make([][]int32, db.schemeOf(t).NumBuckets())
			}
			idx := db.bucketIndex(t, s)
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
// holdout, evicting the oldest samples of full ones. All of one call is
// committed at once, fsynced before Add returns nil; on error nothing of the
// call is stored. A sample with a non-finite number or a timestamp outside
// 1678-2262 fails the whole call (validate before). Samples without labels
// are counted as discarded, not errors.
//
// Concurrent calls share transactions (group commit, as bbolt's DB.Batch):
// calls that arrive while another commit is in progress are committed
// together by the first of them to get the write lock, so n concurrent
// uploads cost one page rewrite and one fsync, not n. The result is the
// same as committing them one by one in the order they joined the group.
func (db *DB) Add(samples []features.Sample) (AddResult, error) {
	p, err := db.plan(samples)
	if err != nil {
		return AddResult{}, err
	}
	if p.res.Discarded == len(samples) {
		return p.res, nil
	}

	g, slot := db.join(p)
	db.writeMu.Lock()
	if !g.done {
		db.take(g)
		db.commit(g)
		g.done = true
	}
	db.writeMu.Unlock()
	if err := g.errs[slot]; err != nil {
		return AddResult{}, fmt.Errorf("add %d samples to store %s: %w", len(samples), db.path, err)
	}
	return g.res[slot], nil
}

// commitGroup is the Adds that will share one transaction. Plans join it
// under DB.groupMu while it is DB.pending; the first member to hold
// DB.writeMu takes it (no more joins) and commits it; res, errs and done are
// written and read under DB.writeMu.
type commitGroup struct {
	plans []*addPlan
	res   []AddResult
	errs  []error
	done  bool
}

// join adds p to the pending group, starting one if none is open, and
// returns the group and p's slot in it.
func (db *DB) join(p *addPlan) (*commitGroup, int) {
	db.groupMu.Lock()
	defer db.groupMu.Unlock()
	g := db.pending
	if g == nil {
		g = &commitGroup{}
		db.pending = g
	}
	g.plans = append(g.plans, p)
	return g, len(g.plans) - 1
}

// take closes g to new members. Called with writeMu held.
func (db *DB) take(g *commitGroup) {
	db.groupMu.Lock()
	if db.pending == g {
		db.pending = nil
	}
	db.groupMu.Unlock()
}

// commit stores every plan of g in one transaction. If that fails and g has
// more than one plan, each is retried in a transaction of its own, so a
// failure one plan causes (a disk that has room for a smaller commit, say)
// fails only that plan. Called with writeMu held.
func (db *DB) commit(g *commitGroup) {
	g.res = make([]AddResult, len(g.plans))
	g.errs = make([]error, len(g.plans))
	if err := db.commitPlans(g.plans, g.res); err == nil || len(g.plans) == 1 {
		for i := range g.errs {
			g.errs[i] = err
		}
		return
	}
	for i, p := range g.plans {
		g.errs[i] = db.commitPlans([]*addPlan{p}, g.res[i:i+1])
	}
}

// commitPlans applies plans in order in one write transaction and, once it
// has committed, publishes the new counts. res[i] receives plan i's result.
func (db *DB) commitPlans(plans []*addPlan, res []AddResult) error {
	var st *txState
	err := db.update(func(tx *bolt.Tx) error {
		st = db.newTxState() // afresh on every attempt: nothing of a failed one leaks
		for i, p := range plans {
			r, err := db.apply(tx, p, st)
			if err != nil {
				return err
			}
			res[i] = r
		}
		return putUint64(tx.Bucket(bucketMeta), keySeq, st.seq)
	})
	if err != nil {
		return err
	}
	db.publish(st)
	return nil
}

// txState is what the in-memory counts become if the transaction being
// built commits: copied from the DB when it starts, published after commit.
type txState struct {
	seq     uint64
	gen     [numStreams]uint64
	holdout [numStreams]int
	train   map[bucketRef]int // counts of the training buckets written
}

type bucketRef struct {
	t   features.Target
	idx int
}

// newTxState snapshots the committed counts. Called with writeMu held, so
// they cannot change until publish.
func (db *DB) newTxState() *txState {
	db.mu.RLock()
	defer db.mu.RUnlock()
	return &txState{seq: db.seq, gen: db.gen, holdout: db.holdout, train: make(map[bucketRef]int)}
}

func (st *txState) trainCount(db *DB, r bucketRef) int {
	if n, ok := st.train[r]; ok {
		return n
	}
	return db.train[r.t][r.idx] // unchanged since newTxState: writeMu is held
}

// publish makes st the in-memory counts. Called with writeMu held, after
// the transaction that st describes committed.
func (db *DB) publish(st *txState) {
	db.seq = st.seq
	db.mu.Lock()
	for r, n := range st.train {
		db.trainTotal[r.t] += n - db.train[r.t][r.idx]
		db.train[r.t][r.idx] = n
	}
	db.holdout = st.holdout
	db.gen = st.gen
	db.mu.Unlock()
}

// apply writes one plan into tx, numbering its samples after st.seq, and
// advances st.
func (db *DB) apply(tx *bolt.Tx, p *addPlan, st *txState) (AddResult, error) {
	res := p.res
	n := len(p.ends)
	// One key per sample, shared by both targets; live until commit, as
	// bbolt requires of keys and values.
	keys := make([]byte, 8*n)
	for i := 0; i < n; i++ {
		binary.BigEndian.PutUint64(keys[8*i:], st.seq+uint64(i)+1)
	}
	key := func(i int32) []byte { return keys[8*i : 8*i+8] }

	meta := tx.Bucket(bucketMeta)
	for _, t := range streams {
		if res.Train[t]+res.Holdout[t] == 0 {
			continue
		}
		root := tx.Bucket(targetBucket(t))
		train := root.Bucket(bucketTrain)
		for idx, list := range p.train[t] {
			if len(list) == 0 {
				continue
			}
			b, err := train.CreateBucketIfNotExists(db.keyBytes[t][idx])
			if err != nil {
				return AddResult{}, fmt.Errorf("%s/%s/%s: %w", t, bucketTrain, db.keyBytes[t][idx], err)
			}
			ref := bucketRef{t, idx}
			kept, evicted, err := appendBounded(b, st.trainCount(db, ref), db.opts.BucketCapacity, list, key, p.record)
			if err != nil {
				return AddResult{}, fmt.Errorf("%s/%s/%s: %w", t, bucketTrain, db.keyBytes[t][idx], err)
			}
			res.Evicted[t] += evicted
			st.train[ref] = kept
		}
		if list := p.holdout[t]; len(list) > 0 {
			kept, evicted, err := appendBounded(root.Bucket(bucketHoldout), st.holdout[t], db.opts.HoldoutCapacity, list, key, p.record)
			if err != nil {
				return AddResult{}, fmt.Errorf("%s/%s: %w", t, bucketHoldout, err)
			}
			res.Evicted[t] += evicted
			st.holdout[t] = kept
		}
		st.gen[t]++
		if err := putUint64(meta, generationKey(t), st.gen[t]); err != nil {
			return AddResult{}, err
		}
	}
	st.seq += uint64(n)
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

// holdoutSeed is FNV-64a's state after each target's salt,
// "headroom/holdout/" and its name. The salts are part of the file format:
// changing them moves future samples of a known content to the other side.
var holdoutSeed = func() (seeds [numStreams]uint64) {
	for _, t := range streams {
		seeds[t] = fnvString("headroom/holdout/" + t.String())
	}
	return seeds
}()

func fnvString(s string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}
