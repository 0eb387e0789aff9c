package store

import (
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/headroomhq/headroom/features"
)

// AddResult counts what one Add did. Arrays are indexed by features.Target.
type AddResult struct {
	Train   [numStreams]int // samples put into the target's training buckets
	Holdout [numStreams]int // samples put into the target's holdout
	// HoldoutOverflow counts samples of the holdout's side that the
	// minute they arrived in had no room for in the holdout (holdout.go):
	// put into training instead, and counted in Train.
	HoldoutOverflow [numStreams]int
	// Evicted counts the target's samples removed to make room, the call's
	// own included when it brings more than a bucket holds.
	Evicted   [numStreams]int
	Discarded int // samples with neither label
	// Duplicates counts samples identical to one the store holds, or to
	// one before them in the call, and not stored again (dedup.go).
	Duplicates int
	dups       []int32 // their indices in the call, ascending
}

// Fresh returns the samples of the call r is the result of that are not
// duplicates: what the call added to what the store has seen. It is
// samples itself when there are none.
func (r AddResult) Fresh(samples []features.Sample) []features.Sample {
	if len(r.dups) == 0 {
		return samples
	}
	out := make([]features.Sample, 0, len(samples)-len(r.dups))
	next := 0
	for _, d := range r.dups {
		out = append(out, samples[next:d]...)
		next = int(d) + 1
	}
	return append(out, samples[next:]...)
}

// addPlan is the part of an Add that needs no lock: encoding, identities
// and placement by content.
type addPlan struct {
	enc  []byte  // every record, back to back
	ends []int32 // record i is enc[ends[i-1]:ends[i]]
	ids  []uint64
	// bucket[t][i] is sample i's training bucket in stream t, -1 when it
	// has no label for t; held[t][i] says its side is the holdout's.
	bucket [numStreams][]int32
	held   [numStreams][]bool
	// labelled counts the samples with some label; latest is the newest
	// timestamp among them (Options.ReplayTime).
	labelled int
	latest   time.Time
}

func (p *addPlan) record(i int32) []byte {
	start := int32(0)
	if i > 0 {
		start = p.ends[i-1]
	}
	return p.enc[start:p.ends[i]]
}

func (db *DB) plan(samples []features.Sample) (*addPlan, error) {
	n := len(samples)
	p := &addPlan{
		enc:  make([]byte, 0, 64*n),
		ends: make([]int32, n),
		ids:  make([]uint64, n),
	}
	for _, t := range streams {
		p.bucket[t] = make([]int32, n)
		p.held[t] = make([]bool, n)
	}
	for i := range samples {
		s := &samples[i]
		var err error
		if p.enc, err = appendSample(p.enc, s); err != nil {
			return nil, fmt.Errorf("add to store: sample %d: %w", i, err)
		}
		p.ends[i] = int32(len(p.enc))
		rec := p.record(int32(i))
		p.ids[i] = db.keys.identityOf(rec)
		labelled := false
		for _, t := range streams {
			p.bucket[t][i] = -1
			if _, ok := s.Label(t); !ok {
				continue
			}
			labelled = true
			p.bucket[t][i] = int32(db.bucketIndex(t, s))
			p.held[t][i] = db.keys.holdoutPoint(t, rec) < db.opts.HoldoutFraction
		}
		if labelled {
			p.labelled++
			if s.Timestamp.After(p.latest) {
				p.latest = s.Timestamp
			}
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
	if p.labelled == 0 {
		return AddResult{Discarded: len(samples)}, nil
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
		if minute := db.arrivalMinute(plans); minute != st.slot.minute {
			st.slot = arrivalSlot{seq: st.seq + 1, minute: minute}
			st.slotHoldout = [numStreams]int{}
			if err := tx.Bucket(bucketMeta).Put(keySlot, st.slot.encode()); err != nil {
				return err
			}
		}
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

// arrivalMinute is the Unix minute a commit of plans arrives in: by
// Options.Now, or with ReplayTime by the newest sample's timestamp.
func (db *DB) arrivalMinute(plans []*addPlan) int64 {
	var latest time.Time
	if db.opts.ReplayTime {
		for _, p := range plans {
			if p.latest.After(latest) {
				latest = p.latest
			}
		}
	}
	if latest.IsZero() {
		latest = db.opts.Now()
	}
	return latest.Unix() / 60
}

// txState is what the in-memory counts become if the transaction being
// built commits: copied from the DB when it starts, published after commit.
type txState struct {
	seq     uint64
	gen     [numStreams]uint64
	holdout [numStreams]int
	train   map[bucketRef]int // counts of the training buckets written
	// ids is what the transaction does to each stream's identities; slot
	// and slotHoldout the arrival slot's as they become (holdout.go).
	ids         [numStreams]idDelta
	slot        arrivalSlot
	slotHoldout [numStreams]int
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
	st := &txState{seq: db.seq, gen: db.gen, holdout: db.holdout, train: make(map[bucketRef]int),
		slot: db.slot, slotHoldout: db.slotHoldout}
	for _, t := range streams {
		st.ids[t] = idDelta{}
	}
	return st
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
	for _, t := range streams {
		db.ids[t].apply(st.ids[t])
	}
	db.slot, db.slotHoldout = st.slot, st.slotHoldout
}

// apply writes one plan into tx, numbering its samples after st.seq, and
// advances st. A sample identical to one a stream holds, or added before
// it in the transaction, is a duplicate and not written (dedup.go); of the
// others' held-out sides, what the arrival slot has no room for goes to
// training (holdout.go).
func (db *DB) apply(tx *bolt.Tx, p *addPlan, st *txState) (AddResult, error) {
	n := len(p.ends)
	res := AddResult{Discarded: n - p.labelled}
	// One key per sample, shared by every stream; live until commit, as
	// bbolt requires of keys and values.
	keys := make([]byte, 8*n)
	for i := 0; i < n; i++ {
		binary.BigEndian.PutUint64(keys[8*i:], st.seq+uint64(i)+1)
	}
	key := func(i int32) []byte { return keys[8*i : 8*i+8] }

	dup := make([]bool, n)
	for i := range n {
		id, any := p.ids[i], false
		for _, t := range streams {
			if p.bucket[t][i] >= 0 {
				any = true
				dup[i] = dup[i] || has(db.ids[t], st.ids[t], id)
			}
		}
		if !any {
			continue
		}
		if dup[i] {
			res.Duplicates++
			res.dups = append(res.dups, int32(i))
			continue
		}
		for _, t := range streams {
			if p.bucket[t][i] >= 0 {
				st.ids[t][id]++ // undone below if the call evicts it at once
			}
		}
	}

	meta := tx.Bucket(bucketMeta)
	for _, t := range streams {
		train, held, overflow := db.placeStream(p, t, dup, st.slotHoldout[t])
		if len(held)+len(overflow) == 0 && !anyTrain(train) {
			continue
		}
		res.HoldoutOverflow[t] = len(overflow)
		root := tx.Bucket(targetBucket(t))
		trainRoot := root.Bucket(bucketTrain)
		gone := func(k, v []byte, holdout, stored bool) {
			st.ids[t][db.keys.identityOf(v)]--
			if holdout && stored && binary.BigEndian.Uint64(k) >= st.slot.seq {
				st.slotHoldout[t]--
			}
		}
		for idx, list := range train {
			if len(list) == 0 {
				continue
			}
			b, err := trainRoot.CreateBucketIfNotExists(db.keyBytes[t][idx])
			if err != nil {
				return AddResult{}, fmt.Errorf("%s/%s/%s: %w", t, bucketTrain, db.keyBytes[t][idx], err)
			}
			ref := bucketRef{t, idx}
			kept, evicted, err := appendBounded(b, st.trainCount(db, ref), db.opts.BucketCapacity, list, key, p.record,
				func(k, v []byte, stored bool) { gone(k, v, false, stored) })
			if err != nil {
				return AddResult{}, fmt.Errorf("%s/%s/%s: %w", t, bucketTrain, db.keyBytes[t][idx], err)
			}
			res.Train[t] += len(list)
			res.Evicted[t] += evicted
			st.train[ref] = kept
		}
		if len(held) > 0 {
			kept, evicted, err := appendBounded(root.Bucket(bucketHoldout), st.holdout[t], db.opts.HoldoutCapacity, held, key, p.record,
				func(k, v []byte, stored bool) { gone(k, v, true, stored) })
			if err != nil {
				return AddResult{}, fmt.Errorf("%s/%s: %w", t, bucketHoldout, err)
			}
			res.Holdout[t] += len(held)
			res.Evicted[t] += evicted
			st.slotHoldout[t] += len(held) - max(0, len(held)-db.opts.HoldoutCapacity)
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

// placeStream lists, ascending, where plan p's samples that are not
// duplicates go in stream t: train[idx] for training bucket idx, held for
// the holdout, when the arrival slot, which holds inSlot held-out samples
// already, has room; the oldest of those it has no room for are overflow,
// and go to their training buckets (in train too).
func (db *DB) placeStream(p *addPlan, t features.Target, dup []bool, inSlot int) (train [][]int32, held, overflow []int32) {
	heldSide := 0
	for i, ok := range p.held[t] {
		if ok && !dup[i] && p.bucket[t][i] >= 0 {
			heldSide++
		}
	}
	over := max(0, heldSide-max(0, db.slotShare()-inSlot))
	for i := range p.bucket[t] {
		idx := p.bucket[t][i]
		if idx < 0 || dup[i] {
			continue
		}
		if p.held[t][i] {
			if over == 0 {
				held = append(held, int32(i))
				continue
			}
			over--
			overflow = append(overflow, int32(i))
		}
		if train == nil {
			train = make([][]int32, db.schemeOf(t).NumBuckets())
		}
		train[idx] = append(train[idx], int32(i))
	}
	return train, held, overflow
}

func anyTrain(train [][]int32) bool {
	for _, l := range train {
		if len(l) > 0 {
			return true
		}
	}
	return false
}

// appendBounded appends the listed records to b, which holds have samples,
// and evicts the oldest beyond capacity, calling gone with each record
// that leaves: stored (evicted from b) or not (one of the list's own,
// which the call would evict at once and so does not write). It returns
// the new count and the number evicted.
func appendBounded(b *bolt.Bucket, have, capacity int, list []int32, key, val func(int32) []byte, gone func(k, v []byte, stored bool)) (n, evicted int, err error) {
	if over := len(list) - capacity; over > 0 {
		for _, i := range list[:over] {
			gone(key(i), val(i), false)
		}
		list = list[over:]
		evicted = over
	}
	if over := have + len(list) - capacity; over > 0 {
		d, err := trimOldest(b, over, func(k, v []byte) { gone(k, v, true) })
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
