// Package bufpool recycles the large per-request slices of the HTTP hot
// paths (bodies, rows, predictions, encoded responses).
package bufpool

import (
	"sync"
	"sync/atomic"
)

// Pool recycles the slices one request needs. Small slices go
// through a sync.Pool. A sync.Pool is emptied by every garbage collection,
// and a 10,000-row request allocates ~10 MB, enough to start one, so large
// slices would be allocated (and zeroed) afresh for every large request:
// that cost a tenth of such a request's CPU. One large slice is therefore
// kept aside, outside the pool, up to a bound on its size.
type Pool[T any] struct {
	small  sync.Pool // *[]T with cap ≤ bigCap
	big    atomic.Pointer[[]T]
	bigCap int // above this many elements a slice is large
	maxCap int // above this many it is not kept at all
}

// New returns a pool whose slices above bigCap elements are large and
// whose slices above maxCap are not kept.
func New[T any](bigCap, maxCap int) *Pool[T] {
	return &Pool[T]{bigCap: bigCap, maxCap: maxCap}
}

// Get returns an empty slice with room for at least n elements.
func (p *Pool[T]) Get(n int) *[]T {
	if n > p.bigCap {
		if b := p.big.Swap(nil); b != nil {
			if cap(*b) >= n {
				*b = (*b)[:0]
				return b
			}
			p.Put(b) // too small for this one; keep it for the next
		}
		b := make([]T, 0, n)
		return &b
	}
	b, ok := p.small.Get().(*[]T)
	if !ok {
		b = new([]T)
	}
	if cap(*b) < n {
		*b = make([]T, 0, n)
	}
	*b = (*b)[:0]
	return b
}

// Put gives b back; the caller must not use it afterwards.
func (p *Pool[T]) Put(b *[]T) {
	switch c := cap(*b); {
	case c > p.maxCap:
	case c > p.bigCap:
		if !p.big.CompareAndSwap(nil, b) {
			// Another large slice is kept; keep the larger of the two.
			if old := p.big.Load(); old != nil && cap(*old) < c {
				p.big.CompareAndSwap(old, b)
			}
		}
	default:
		p.small.Put(b)
	}
}
