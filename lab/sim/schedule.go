package sim

import (
	"container/heap"
	"time"
)

// schedule holds the requests a fleet has not dispatched yet: those due at
// a known time, in time then submission order, and follow-up turns waiting
// for the request they follow to end, whose arrival is known only then.
// The zero value is empty and ready.
type schedule struct {
	arrivals arrivalHeap
	order    int                // tie-break among equal arrival times: submission order
	children map[int][]*Outcome // requests waiting for the key's request to end
}

// add schedules o: at its arrival for a first turn (parent nil, r.After
// 0); for a follow-up, a think time after its parent ended, was rejected
// or timed out (and not before now), or when the parent ends.
func (s *schedule) add(o, parent *Outcome, now time.Duration) {
	r := o.Request
	switch {
	case parent == nil:
		s.push(r.Arrival, o)
	case parent.Done:
		s.push(max(r.Arrival, parent.Finish+r.Think, now), o)
	case parent.Rejected:
		s.push(max(r.Arrival, parent.Dispatch+r.Think, now), o)
	case parent.TimedOut:
		s.push(max(r.Arrival, parent.Deadline+r.Think, now), o)
	default:
		if s.children == nil {
			s.children = make(map[int][]*Outcome)
		}
		s.children[r.After] = append(s.children[r.After], o)
	}
}

func (s *schedule) push(at time.Duration, o *Outcome) {
	heap.Push(&s.arrivals, arrival{at: at, order: s.order, out: o})
	s.order++
}

// release schedules the requests that waited for o, now that it has ended
// at end.
func (s *schedule) release(o *Outcome, end time.Duration) {
	for _, c := range s.children[o.Request.ID] {
		s.push(max(c.Request.Arrival, end+c.Request.Think), c)
	}
	delete(s.children, o.Request.ID)
}

// next is the time of the next due dispatch, if any.
func (s *schedule) next() (time.Duration, bool) {
	if len(s.arrivals) == 0 {
		return 0, false
	}
	return s.arrivals[0].at, true
}

// pop removes and returns the next due request.
func (s *schedule) pop() *Outcome { return heap.Pop(&s.arrivals).(arrival).out }

// waiting is the number of requests, not yet ended, that others wait for.
func (s *schedule) waiting() int { return len(s.children) }

type arrival struct {
	at    time.Duration
	order int
	out   *Outcome
}

// arrivalHeap orders pending dispatches by time, then submission order, so
// that a run does not depend on heap internals.
type arrivalHeap []arrival

func (h arrivalHeap) Len() int { return len(h) }
func (h arrivalHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].order < h[j].order
}
func (h arrivalHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *arrivalHeap) Push(x any)   { *h = append(*h, x.(arrival)) }
func (h *arrivalHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
