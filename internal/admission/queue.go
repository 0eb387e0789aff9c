// Package admission bounds the work a server holds in memory: a
// first-come-first-served Queue of uploads by count and by bytes, and
// Arrivals, the bound on request bodies still arriving, per client address
// and in total. It knows nothing of HTTP; the api package answers for it.
package admission

import (
	"context"
	"sync"
)

// Gauge is what a Queue reports its number of waiters to; a Prometheus
// gauge is one.
type Gauge interface{ Set(float64) }

// Queue admits units of work by count and by bytes, first come first
// served: a small unit does not overtake a large one waiting, so a large
// one cannot be starved.
//
// Invariant, under mu: held ≤ max and bytes ≤ maxBytes; a waiter is either
// in queue or has been granted (its ready channel closed and its
// reservation counted), never both.
type Queue struct {
	max      int
	maxBytes int64
	waiting  Gauge // len(queue); may be nil

	mu    sync.Mutex
	held  int
	bytes int64
	queue []*waiter
}

type waiter struct {
	n     int64
	ready chan struct{}
}

// NewQueue returns a queue admitting at most max units holding maxBytes
// together. Both must be positive. waiting, when not nil, follows the
// number of units waiting.
func NewQueue(max int, maxBytes int64, waiting Gauge) *Queue {
	return &Queue{max: max, maxBytes: maxBytes, waiting: waiting}
}

// Limits returns the count and byte bounds.
func (q *Queue) Limits() (int, int64) { return q.max, q.maxBytes }

// Reserve takes room for one unit of n bytes (clamped to the byte bound,
// so that any unit can run alone), waiting until ctx ends. It returns the
// bytes reserved, to give back with Release, and whether it got them.
func (q *Queue) Reserve(ctx context.Context, n int64) (int64, bool) {
	n = min(max(n, 0), q.maxBytes)
	q.mu.Lock()
	if len(q.queue) == 0 && q.fits(n) {
		q.take(n)
		q.mu.Unlock()
		return n, true
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	q.queue = append(q.queue, w)
	q.report()
	q.mu.Unlock()

	select {
	case <-w.ready:
		return n, true
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-w.ready: // granted while ctx ended: keep it
		return n, true
	default:
	}
	for i, x := range q.queue {
		if x == w {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			q.report()
			break
		}
	}
	q.grant() // w may have been holding back smaller waiters behind it
	return 0, false
}

// TryReserve takes room for one unit of n bytes (clamped as Reserve
// does) if it is free now and nobody waits for it, without waiting, and
// without allocating.
func (q *Queue) TryReserve(n int64) (int64, bool) {
	n = min(max(n, 0), q.maxBytes)
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) == 0 && q.fits(n) {
		q.take(n)
		return n, true
	}
	return 0, false
}

// Release gives back a reservation of n bytes and admits the waiters that
// now fit.
func (q *Queue) Release(n int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.held--
	q.bytes -= n
	q.grant()
}

func (q *Queue) fits(n int64) bool {
	return q.held < q.max && q.bytes+n <= q.maxBytes
}

func (q *Queue) take(n int64) {
	q.held++
	q.bytes += n
}

// grant admits waiters in arrival order while the first fits. Called with
// mu held.
func (q *Queue) grant() {
	for len(q.queue) > 0 && q.fits(q.queue[0].n) {
		w := q.queue[0]
		q.queue[0] = nil
		q.queue = q.queue[1:]
		q.take(w.n)
		close(w.ready)
		q.report()
	}
}

// report sets the waiting gauge. Called with mu held.
func (q *Queue) report() {
	if q.waiting != nil {
		q.waiting.Set(float64(len(q.queue)))
	}
}
