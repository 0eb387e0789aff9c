package admission

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/headroomhq/headroom/internal/polltest"
)

// The queue admits by count and by bytes, first come first served: a
// small upload does not overtake a large one waiting, and a waiter that
// gives up lets those behind it in.
func TestQueueOrder(t *testing.T) {
	l := NewQueue(3, 100, nil)
	granted := func(ctx context.Context, n int64) <-chan bool {
		c := make(chan bool, 1)
		go func() { _, ok := l.Reserve(ctx, n); c <- ok }()
		return c
	}
	queued := func(want int) { // waits until want uploads are queued
		t.Helper()
		polltest.Until(t, fmt.Sprintf("%d uploads queued", want), 10*time.Second, func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			return len(l.queue) == want
		})
	}
	result := func(c <-chan bool) bool {
		t.Helper()
		select {
		case ok := <-c:
			return ok
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter was neither admitted nor refused")
			return false
		}
	}

	if n, ok := l.Reserve(context.Background(), 500); !ok || n != 100 {
		t.Fatalf("idle limiter: reserved %d, %v; want all 100 bytes (clamped)", n, ok)
	}
	l.Release(100)
	if _, ok := l.Reserve(context.Background(), 60); !ok {
		t.Fatal("60 of 100 bytes refused")
	}
	bigCtx, giveUp := context.WithCancel(context.Background())
	big := granted(bigCtx, 60) // does not fit beside the first
	queued(1)
	small := granted(context.Background(), 10) // would fit, but queues behind big
	queued(2)
	giveUp()
	if result(big) {
		t.Fatal("the waiter that gave up was admitted")
	}
	if !result(small) {
		t.Fatal("the waiter behind the one that gave up was not admitted")
	}
	queued(0)

	// Count: 60 and 10 bytes held by two uploads; a third fits, a fourth waits.
	if _, ok := l.Reserve(context.Background(), 1); !ok {
		t.Fatal("third upload refused")
	}
	fourth := granted(context.Background(), 1)
	queued(1)
	l.Release(60)
	if !result(fourth) {
		t.Fatal("the fourth upload was not admitted when one ended")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held != 3 || l.bytes != 12 {
		t.Errorf("holding %d units, %d bytes; want 3 and 12", l.held, l.bytes)
	}
}

type gauge struct{ v float64 }

func (g *gauge) Set(v float64) { g.v = v }

// The waiting gauge follows the queue, and a queue without one works.
func TestQueueReportsWaiters(t *testing.T) {
	g := &gauge{}
	q := NewQueue(1, 10, g)
	if _, ok := q.Reserve(context.Background(), 5); !ok {
		t.Fatal("idle queue refused")
	}
	done := make(chan bool)
	go func() { _, ok := q.Reserve(context.Background(), 5); done <- ok }()
	polltest.Until(t, "one waiter reported", 10*time.Second, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return g.v == 1
	})
	q.Release(5)
	if !<-done {
		t.Fatal("the waiter was refused when room freed")
	}
	q.mu.Lock()
	if g.v != 0 {
		t.Errorf("waiting gauge %v after admission, want 0", g.v)
	}
	q.mu.Unlock()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := NewQueue(1, 10, nil).Reserve(ctx, 1); !ok {
		t.Error("an idle queue refused a unit whose context had ended; it needs no wait")
	}
}

// TryReserve takes only free room, and not ahead of a waiter.
func TestQueueTryReserve(t *testing.T) {
	q := NewQueue(2, 10, nil)
	if n, ok := q.TryReserve(6); !ok || n != 6 {
		t.Fatalf("idle queue: %d, %v", n, ok)
	}
	if _, ok := q.TryReserve(6); ok {
		t.Fatal("6 bytes beside 6 of 10 reserved")
	}
	done := make(chan bool)
	go func() { _, ok := q.Reserve(context.Background(), 5); done <- ok }()
	polltest.Until(t, "a waiter", 10*time.Second, func() bool { q.mu.Lock(); defer q.mu.Unlock(); return len(q.queue) == 1 })
	if _, ok := q.TryReserve(1); ok {
		t.Error("TryReserve overtook a waiter")
	}
	q.Release(6)
	if !<-done {
		t.Fatal("the waiter was refused")
	}
}
