package store

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// No burst floods the holdout. The holdout keeps a stream's newest
// HoldoutCapacity held-out samples, oldest evicted first, and measures
// every model the gate publishes: a burst that filled it decided what the
// next bundle would be measured on (1,000 crafted rows in one request
// replaced all 169 real ones, and the next bundle served 87.8% MAPE; issue
// 26). So the samples that arrive in one minute, by the store's clock, may
// take at most a 1/HoldoutSpread share of the holdout (100 of 1,000): the
// rest of a burst's held-out side goes to training, where the buckets bound
// what it displaces, and nothing of it is lost. A shift that persists
// takes the holdout over minute by minute, as a real one should; a burst,
// whatever its size and however many uploads it is spread over, takes a
// tenth. Under steady traffic of fewer than HoldoutCapacity/HoldoutSpread
// held-out samples a minute the rule never acts, and the holdout is the
// newest HoldoutCapacity, as before.
//
// Minutes are counted as arrival slots: a slot begins with the first
// commit whose minute (of Options.Now) differs from the slot before, at
// that commit's first sequence number, so a slot is a run of sequence
// numbers and its held-out samples are those of the holdout at or above
// it. Only the newest slot is needed, kept in meta/slot so that a restart
// within the minute goes on counting.

var keySlot = []byte("slot")

// arrivalSlot is the newest arrival slot: from sequence number seq on,
// samples arrived in minute (Unix minutes).
type arrivalSlot struct {
	seq    uint64
	minute int64
}

func (a arrivalSlot) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, a.seq)
	return binary.BigEndian.AppendUint64(b, uint64(a.minute))
}

// readSlot reads meta/slot; a store without one has none (seq 0 counts
// every held-out sample in it, the minute no clock shows).
func readSlot(meta *bolt.Bucket) (arrivalSlot, error) {
	v := meta.Get(keySlot)
	if v == nil {
		return arrivalSlot{minute: -1 << 62}, nil
	}
	if len(v) != 16 {
		return arrivalSlot{}, fmt.Errorf("meta/%s is %d bytes, want 16", keySlot, len(v))
	}
	return arrivalSlot{seq: binary.BigEndian.Uint64(v), minute: int64(binary.BigEndian.Uint64(v[8:]))}, nil
}

// slotShare is the most held-out samples one slot may hold per stream.
func (db *DB) slotShare() int {
	return max(1, db.opts.HoldoutCapacity/db.opts.HoldoutSpread)
}
