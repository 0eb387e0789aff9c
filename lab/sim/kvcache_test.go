package sim

import (
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func TestBlockPoolAllocatesLeastRecentlyFreedLast(t *testing.T) {
	p := newBlockPool(4, true)
	a, b := p.allocate(), p.allocate()
	if a != 0 || b != 1 || p.numFree() != 2 {
		t.Fatalf("allocated %d, %d with %d free; want 0, 1 with 2 free", a, b, p.numFree())
	}
	p.register(a, 100)
	p.register(b, 200)
	p.releaseAll([]int32{a, b}) // b first: a sequence's tail is evicted before its head
	// Free order is now 2, 3, b, a.
	for _, want := range []int32{2, 3, b} {
		if got := p.allocate(); got != want {
			t.Fatalf("allocate gave %d, want %d", got, want)
		}
	}
	if p.evictions != 1 {
		t.Fatalf("%d evictions after reusing one cached block, want 1", p.evictions)
	}
	if got := p.matchLen([]uint64{100, 200}, 2); got != 1 {
		t.Fatalf("after evicting 200, match is %d blocks, want 1", got)
	}
}

func TestBlockPoolSharesAndCountsReferences(t *testing.T) {
	p := newBlockPool(3, true)
	b := p.allocate()
	p.register(b, 7)
	p.release(b)
	if p.numFree() != 3 || p.numUsed() != 0 {
		t.Fatalf("free %d used %d after release, want 3 and 0", p.numFree(), p.numUsed())
	}
	hits := p.match([]uint64{7, 8}, 2, nil)
	if len(hits) != 1 || hits[0] != b {
		t.Fatalf("match = %v, want [%d]", hits, b)
	}
	if p.evictable(hits) != 1 {
		t.Fatal("an unreferenced cached block is not counted as evictable")
	}
	p.acquire(b)
	p.acquire(b)
	if p.numUsed() != 1 || p.ref[b] != 2 {
		t.Fatalf("used %d ref %d after two hits, want 1 and 2", p.numUsed(), p.ref[b])
	}
	p.release(b)
	if p.numFree() != 2 {
		t.Fatal("a block still referenced went back to the free list")
	}
	p.release(b)
	if p.numFree() != 3 || p.matchLen([]uint64{7}, 1) != 1 {
		t.Fatal("a released block lost its cached content")
	}
}

func TestBlockPoolKeepsFirstCopyOfDuplicateContent(t *testing.T) {
	p := newBlockPool(2, true)
	a, b := p.allocate(), p.allocate()
	p.register(a, 5)
	p.register(b, 5)
	if p.cached[5] != a || p.hashed[b] {
		t.Fatalf("cache maps 5 to %d (b hashed %v); the first copy should stay", p.cached[5], p.hashed[b])
	}
}

func TestBlockPoolWithoutCachingMatchesNothing(t *testing.T) {
	p := newBlockPool(2, false)
	b := p.allocate()
	p.register(b, 5)
	p.release(b)
	if p.matchLen([]uint64{5}, 1) != 0 || len(p.match([]uint64{5}, 1, nil)) != 0 || len(p.cached) != 0 {
		t.Fatal("prefix caching off, but content was cached")
	}
}

func TestBlockPoolMatchStopsAtLimitAndFirstMiss(t *testing.T) {
	p := newBlockPool(4, true)
	for _, h := range []uint64{1, 2, 4} {
		p.register(p.allocate(), h)
	}
	tests := []struct {
		hashes []uint64
		limit  int
		want   int
	}{
		{[]uint64{1, 2, 4}, 3, 3},
		{[]uint64{1, 2, 4}, 2, 2},
		{[]uint64{1, 3, 4}, 3, 1}, // 4 is cached but follows a miss
		{[]uint64{9, 1}, 2, 0},
		{nil, 5, 0},
	}
	for _, tt := range tests {
		if got := p.matchLen(tt.hashes, tt.limit); got != tt.want {
			t.Errorf("matchLen(%v, %d) = %d, want %d", tt.hashes, tt.limit, got, tt.want)
		}
	}
}

// A journaled run of random pool operations, rolled back, leaves the pool
// exactly as it was: every array, the free list's order and the prefix
// cache.
func TestBlockPoolRollbackRestoresEverything(t *testing.T) {
	type snapshot struct {
		ref             []int32
		hash            []uint64
		hashed          []bool
		prev, next      []int32
		head, tail      int32
		free, evictions int
		cached          map[uint64]int32
	}
	snap := func(p *blockPool) snapshot {
		return snapshot{slices.Clone(p.ref), slices.Clone(p.hash), slices.Clone(p.hashed), slices.Clone(p.prev),
			slices.Clone(p.next), p.head, p.tail, p.free, p.evictions, maps.Clone(p.cached)}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	p := newBlockPool(64, true)
	var held []int32
	step := func() {
		switch op := rng.IntN(4); {
		case op == 0 && p.numFree() > 0:
			b := p.allocate()
			p.register(b, uint64(rng.IntN(200)))
			held = append(held, b)
		case op == 1 && len(held) > 0:
			i := rng.IntN(len(held))
			p.release(held[i])
			held = slices.Delete(held, i, i+1)
		case op == 2:
			for _, b := range p.match([]uint64{uint64(rng.IntN(200))}, 1, nil) {
				p.acquire(b)
				held = append(held, b)
			}
		}
	}
	for range 500 {
		step()
	}
	var j poolJournal
	for round := range 20 {
		before, heldBefore := snap(p), slices.Clone(held)
		p.begin(&j)
		for range 200 {
			step()
		}
		p.rollback()
		held = heldBefore
		if !reflect.DeepEqual(before, snap(p)) {
			t.Fatalf("round %d: rollback left the pool changed", round)
		}
		step() // move on unjournaled, so each round starts elsewhere
	}
}
