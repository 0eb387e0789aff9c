package bufpool

import "testing"

func TestBufferPool(t *testing.T) {
	p := New[int](8, 100)

	for _, n := range []int{5, 2, 7, 8, 0} { // recycled or not, room for n
		small := p.Get(n)
		if len(*small) != 0 || cap(*small) < n {
			t.Fatalf("get(%d): len %d cap %d", n, len(*small), cap(*small))
		}
		*small = append(*small, 9)
		p.Put(small)
	}

	// A large slice is kept across gets, whatever the garbage collector
	// does to the sync.Pool.
	big := p.Get(50)
	*big = append(*big, 1, 2, 3)
	p.Put(big)
	again := p.Get(40)
	if again != big || len(*again) != 0 {
		t.Fatalf("large slice not reused (same %v, len %d)", again == big, len(*again))
	}
	// While it is out, another large request gets a fresh one.
	other := p.Get(40)
	if other == big || cap(*other) < 40 {
		t.Fatal("the kept slice was handed out twice")
	}
	p.Put(again)
	p.Put(other) // one is kept, not both: the larger
	if k := p.big.Load(); k == nil || cap(*k) != max(cap(*again), cap(*other)) {
		t.Fatal("kept slice is not the larger one")
	}

	// A request larger than the kept slice gets its own, and the kept one
	// stays for the next.
	kept := p.big.Load()
	huge := p.Get(cap(*kept) + 10)
	if huge == kept || cap(*huge) < cap(*kept)+10 || p.big.Load() != kept {
		t.Fatal("a too-small kept slice was returned or lost")
	}

	// Past maxCap nothing is kept.
	p.big.Store(nil)
	over := p.Get(101)
	p.Put(over)
	if p.big.Load() != nil {
		t.Fatal("a slice above maxCap was kept")
	}
}
