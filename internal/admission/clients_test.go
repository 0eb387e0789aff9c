package admission

import (
	"errors"
	"testing"
)

// Each address has its bound, all of them theirs, and leaving makes room
// for whoever comes next.
func TestClientsBounds(t *testing.T) {
	c := NewClients(2, 3)
	for i, addr := range []string{"a", "a", "b"} {
		if err := c.Enter(addr); err != nil {
			t.Fatalf("unit %d (%s) refused: %v", i, addr, err)
		}
	}
	if err := c.Enter("a"); !errors.Is(err, ErrClientFull) {
		t.Errorf("a third unit of a: %v, want ErrClientFull", err)
	}
	if err := c.Enter("c"); !errors.Is(err, ErrAllFull) {
		t.Errorf("a fourth unit in all: %v, want ErrAllFull", err)
	}
	c.Leave("a")
	if err := c.Enter("c"); err != nil {
		t.Errorf("c refused once a left: %v", err)
	}
	if got := c.Held(); got != 3 {
		t.Errorf("held %d, want 3", got)
	}
	for _, addr := range []string{"a", "b", "c", "c"} { // the last is not held
		c.Leave(addr)
	}
	if c.Held() != 0 || len(c.n) != 0 {
		t.Errorf("after every unit left: held %d, addresses %v", c.Held(), c.n)
	}
	if err := NewClients(1, 0).Enter("x"); err != nil {
		t.Errorf("no total bound: %v", err)
	}
}
