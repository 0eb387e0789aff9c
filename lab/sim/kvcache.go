package sim

// blockPool is a paged KV cache: a fixed pool of blocks, each referenced by
// the running sequences that use it, plus a prefix cache that maps a block's
// chain hash to the block holding that content.
//
// Invariants, as in vLLM's v1 block manager:
//   - a block is on the free list iff its reference count is 0;
//   - a free block may still hold cached content (hashed): it is reusable by a
//     prefix hit until allocate hands it out, which evicts the content;
//   - the free list is in eviction order: allocate takes the head (least
//     recently used), release appends at the tail;
//   - cached[h] == b iff block b is hashed with h; a hash maps to one block.
type blockPool struct {
	caching bool
	ref     []int32
	hash    []uint64
	hashed  []bool
	// Doubly linked free list over block ids; -1 ends it.
	prev, next []int32
	head, tail int32
	free       int
	cached     map[uint64]int32
	evictions  int

	// journal, while set, records every change so that rollback can undo
	// them: a lookahead runs a copy of an engine forward on its parent's
	// pool instead of copying the pool (see lookahead.go).
	journal *poolJournal
}

// blockState is everything the pool keeps about one block.
type blockState struct {
	ref        int32
	hash       uint64
	hashed     bool
	prev, next int32
}

type blockUndo struct {
	b   int32
	old blockState
}

type cacheUndo struct {
	h   uint64
	b   int32
	had bool // cached[h] existed (and was b) before the change
}

// poolJournal is the undo log of a pool: the prior state of every block
// and prefix-cache entry changed since begin, in order, and the scalars as
// they were at begin.
type poolJournal struct {
	blocks          []blockUndo
	cached          []cacheUndo
	head, tail      int32
	free, evictions int
}

// begin starts recording changes. The pool must not be journaling already.
func (p *blockPool) begin(j *poolJournal) {
	j.blocks, j.cached = j.blocks[:0], j.cached[:0]
	j.head, j.tail, j.free, j.evictions = p.head, p.tail, p.free, p.evictions
	p.journal = j
}

// rollback undoes every change since begin, newest first, and stops
// recording.
func (p *blockPool) rollback() {
	j := p.journal
	p.journal = nil
	for i := len(j.cached) - 1; i >= 0; i-- {
		u := j.cached[i]
		if u.had {
			p.cached[u.h] = u.b
		} else {
			delete(p.cached, u.h)
		}
	}
	for i := len(j.blocks) - 1; i >= 0; i-- {
		u := j.blocks[i]
		b := u.b
		p.ref[b], p.hash[b], p.hashed[b], p.prev[b], p.next[b] = u.old.ref, u.old.hash, u.old.hashed, u.old.prev, u.old.next
	}
	p.head, p.tail, p.free, p.evictions = j.head, j.tail, j.free, j.evictions
}

// save records block b's state before a change, when journaling.
func (p *blockPool) save(b int32) {
	if p.journal != nil && b >= 0 {
		p.journal.blocks = append(p.journal.blocks, blockUndo{b,
			blockState{ref: p.ref[b], hash: p.hash[b], hashed: p.hashed[b], prev: p.prev[b], next: p.next[b]}})
	}
}

// saveCached records the prefix-cache entry of h before a change.
func (p *blockPool) saveCached(h uint64) {
	if p.journal != nil {
		b, had := p.cached[h]
		p.journal.cached = append(p.journal.cached, cacheUndo{h, b, had})
	}
}

func newBlockPool(n int, caching bool) *blockPool {
	p := &blockPool{
		caching: caching,
		ref:     make([]int32, n),
		hash:    make([]uint64, n),
		hashed:  make([]bool, n),
		prev:    make([]int32, n),
		next:    make([]int32, n),
		head:    -1,
		tail:    -1,
		cached:  make(map[uint64]int32),
	}
	for b := range n {
		p.pushTail(int32(b))
	}
	return p
}

func (p *blockPool) size() int    { return len(p.ref) }
func (p *blockPool) numFree() int { return p.free }
func (p *blockPool) numUsed() int { return len(p.ref) - p.free }

// match returns the blocks holding the longest cached prefix of hashes, at
// most limit of them. It changes nothing.
func (p *blockPool) match(hashes []uint64, limit int, dst []int32) []int32 {
	dst = dst[:0]
	if !p.caching {
		return dst
	}
	for _, h := range hashes[:min(limit, len(hashes))] {
		b, ok := p.cached[h]
		if !ok {
			break
		}
		dst = append(dst, b)
	}
	return dst
}

// matchLen is len(match(...)) without a destination slice.
func (p *blockPool) matchLen(hashes []uint64, limit int) int {
	if !p.caching {
		return 0
	}
	n := 0
	for _, h := range hashes[:min(limit, len(hashes))] {
		if _, ok := p.cached[h]; !ok {
			break
		}
		n++
	}
	return n
}

// evictable counts the blocks among bs that sit on the free list: taking a
// reference to them shrinks what allocate can hand out.
func (p *blockPool) evictable(bs []int32) int {
	n := 0
	for _, b := range bs {
		if p.ref[b] == 0 {
			n++
		}
	}
	return n
}

// acquire takes a reference to a cached block (a prefix hit).
func (p *blockPool) acquire(b int32) {
	if p.ref[b] == 0 {
		p.unlink(b)
	}
	p.save(b)
	p.ref[b]++
}

// allocate hands out the least recently used free block, evicting its cached
// content. The caller has checked numFree.
func (p *blockPool) allocate() int32 {
	b := p.head
	p.unlink(b) // saves b
	if p.hashed[b] {
		p.saveCached(p.hash[b])
		delete(p.cached, p.hash[b])
		p.hashed[b] = false
		p.evictions++
	}
	p.ref[b] = 1
	return b
}

// release drops a reference; an unreferenced block joins the tail of the
// free list with its content intact.
func (p *blockPool) release(b int32) {
	p.save(b)
	p.ref[b]--
	if p.ref[b] == 0 {
		p.pushTail(b)
	}
}

// releaseAll releases a sequence's blocks last to first, so that its tail
// (the content least likely to be shared) is evicted before its head.
func (p *blockPool) releaseAll(bs []int32) {
	for i := len(bs) - 1; i >= 0; i-- {
		p.release(bs[i])
	}
}

// register records that block b, now full, holds the content with chain
// hash h. If another block already holds it, the first copy stays the
// cached one and b stays anonymous (it is freed without being reusable).
func (p *blockPool) register(b int32, h uint64) {
	if !p.caching || p.hashed[b] {
		return
	}
	if _, dup := p.cached[h]; dup {
		return
	}
	p.saveCached(h)
	p.save(b)
	p.cached[h] = b
	p.hash[b] = h
	p.hashed[b] = true
}

func (p *blockPool) pushTail(b int32) {
	p.save(b)
	p.save(p.tail)
	p.prev[b], p.next[b] = p.tail, -1
	if p.tail >= 0 {
		p.next[p.tail] = b
	} else {
		p.head = b
	}
	p.tail = b
	p.free++
}

func (p *blockPool) unlink(b int32) {
	p.save(b)
	p.save(p.prev[b])
	p.save(p.next[b])
	if p.prev[b] >= 0 {
		p.next[p.prev[b]] = p.next[b]
	} else {
		p.head = p.next[b]
	}
	if p.next[b] >= 0 {
		p.prev[p.next[b]] = p.prev[b]
	} else {
		p.tail = p.prev[b]
	}
	p.prev[b], p.next[b] = -1, -1
	p.free--
}

// blocksFor is the number of blocks that hold n tokens.
func blocksFor(n int) int { return (n + BlockSize - 1) / BlockSize }
