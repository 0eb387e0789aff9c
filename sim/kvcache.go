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

func (p *blockPool) size() int      { return len(p.ref) }
func (p *blockPool) numFree() int   { return p.free }
func (p *blockPool) numUsed() int   { return len(p.ref) - p.free }
func (p *blockPool) numCached() int { return len(p.cached) }

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
	p.ref[b]++
}

// allocate hands out the least recently used free block, evicting its cached
// content. The caller has checked numFree.
func (p *blockPool) allocate() int32 {
	b := p.head
	p.unlink(b)
	if p.hashed[b] {
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
	p.cached[h] = b
	p.hash[b] = h
	p.hashed[b] = true
}

func (p *blockPool) pushTail(b int32) {
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
