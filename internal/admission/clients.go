package admission

import (
	"errors"
	"sync"
)

// Errors Clients.Enter returns.
var (
	// ErrClientFull: the address holds its most units.
	ErrClientFull = errors.New("the client holds the most allowed to one address")
	// ErrAllFull: every client together holds the most units allowed.
	ErrAllFull = errors.New("the clients together hold the most allowed")
)

// Clients counts the units of some work each client address holds (bodies
// arriving, long polls held): at most maxPerClient per address and, when
// max is positive, max in all. One address cannot take every unit, and
// many addresses cannot together hold more than the server can afford.
//
// Invariant, under mu: total is the sum of n, n[a] ≤ maxPerClient for
// every a, total ≤ max when max > 0, and n holds only addresses with
// units.
type Clients struct {
	maxPerClient int
	max          int // 0: no bound in all

	mu    sync.Mutex
	total int
	n     map[string]int
}

// NewClients returns a bound of maxPerClient units per address, which must
// be positive, and max in all (0: none).
func NewClients(maxPerClient, max int) *Clients {
	return &Clients{maxPerClient: maxPerClient, max: max, n: map[string]int{}}
}

// Limits returns the per-address and total bounds.
func (c *Clients) Limits() (perClient, total int) { return c.maxPerClient, c.max }

// Held returns the units held in all.
func (c *Clients) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Enter counts one more unit for addr, or returns ErrClientFull or
// ErrAllFull without counting it. Leave must follow a nil return.
func (c *Clients) Enter(addr string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.n[addr] >= c.maxPerClient:
		return ErrClientFull
	case c.max > 0 && c.total >= c.max:
		return ErrAllFull
	}
	c.n[addr]++
	c.total++
	return nil
}

// Leave ends one of addr's units.
func (c *Clients) Leave(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[addr] <= 0 {
		return // not held: a caller's bug must not corrupt the counts
	}
	c.total--
	if c.n[addr]--; c.n[addr] == 0 {
		delete(c.n, addr)
	}
}
