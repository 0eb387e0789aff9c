package store

// Identical entries are counted once. A client retrying an upload, or a
// loop resending one entry, stored each copy as a sample of its own: one
// request of 1,000 copies of one row took 1,000 places, and with them the
// holdout (issue 26). A sample identical to one the store holds, in every
// field it keeps, the timestamp included, is not stored again: Add counts
// it in AddResult.Duplicates and the upload is acknowledged, since what it
// carries is durable. An entry without a timestamp is stamped when it
// arrives (api), so the same entry sent in two requests is two
// observations at two times; a client that retries must send timestamps
// (llm-d's router does) for its retries to count once.
//
// Identities are derived data: a keyed hash of each record (storeKeys),
// counted per stream in memory, computed at Open from the records it reads
// anyway, and changed only with the commits that add or evict records. So
// they survive every restart exactly as the records do, and cost no write.

// identitySet counts a stream's records (training and holdout) by
// identity. A count above 1 comes only from copies stored before
// identities were kept.
type identitySet map[uint64]uint32

func (s identitySet) add(id uint64) { s[id]++ }

func (s identitySet) remove(id uint64) {
	switch n := s[id]; {
	case n > 1:
		s[id] = n - 1
	case n == 1:
		delete(s, id)
	}
}

// idDelta is what one transaction does to a stream's identities, applied
// to the committed set once it commits.
type idDelta map[uint64]int32

// has reports whether a stream holds a record of identity id, committed
// (in) or added by the transaction (d).
func has(in identitySet, d idDelta, id uint64) bool {
	return int64(in[id])+int64(d[id]) > 0
}

// apply adds the delta to s.
func (s identitySet) apply(d idDelta) {
	for id, n := range d {
		for ; n > 0; n-- {
			s.add(id)
		}
		for ; n < 0; n++ {
			s.remove(id)
		}
	}
}
