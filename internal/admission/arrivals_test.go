package admission

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestArrivalsPerClient(t *testing.T) {
	a := NewArrivals(2, 100)
	for i := range 2 {
		if a.Enter("10.0.0.1") != nil {
			t.Fatalf("body %d of 2 from one address refused", i+1)
		}
	}
	if a.Enter("10.0.0.1") == nil {
		t.Fatal("a third body from one address admitted; the bound is 2")
	}
	if a.Enter("10.0.0.2") != nil {
		t.Fatal("another address refused while the first had its maximum")
	}
	a.Leave("10.0.0.1")
	if a.Enter("10.0.0.1") != nil {
		t.Fatal("the address refused after one of its bodies left")
	}
	a.Leave("10.0.0.1")
	a.Leave("10.0.0.1")
	a.Leave("10.0.0.2")
	if len(a.n) != 0 {
		t.Errorf("addresses kept with no body arriving: %v", a.n)
	}
}

// The body that would pass the byte bound fails, the bytes of a body come
// back when it is released, and then a body of the whole bound fits.
func TestArrivalsByteBound(t *testing.T) {
	a := NewArrivals(10, 100)
	first, releaseFirst := a.Meter(io.NopCloser(strings.NewReader(strings.Repeat("a", 70))))
	if b, err := io.ReadAll(first); err != nil || len(b) != 70 {
		t.Fatalf("a body within the bound: %d bytes, %v", len(b), err)
	}
	second, releaseSecond := a.Meter(io.NopCloser(strings.NewReader(strings.Repeat("b", 40))))
	if _, err := io.ReadAll(second); !errors.Is(err, ErrArrivingFull) {
		t.Fatalf("a body past the bound: %v, want ErrArrivingFull", err)
	}
	if got := a.Arriving(); got != 70 {
		t.Errorf("arriving %d bytes, want 70: the refused body's bytes must not count", got)
	}
	releaseSecond()
	releaseFirst()
	if got := a.Arriving(); got != 0 {
		t.Fatalf("%d bytes still counted after both were released", got)
	}
	third, releaseThird := a.Meter(io.NopCloser(strings.NewReader(strings.Repeat("c", 100))))
	defer releaseThird()
	if b, err := io.ReadAll(third); err != nil || len(b) != 100 {
		t.Fatalf("a body of the whole bound once the others are done: %d bytes, %v", len(b), err)
	}
}

// Charged bytes count against the bound as metered ones do.
func TestArrivalsCharge(t *testing.T) {
	a := NewArrivals(10, 100)
	if !a.Charge(60) {
		t.Fatal("60 of 100 bytes refused")
	}
	m, release := a.Meter(io.NopCloser(strings.NewReader(strings.Repeat("x", 50))))
	if _, err := io.ReadAll(m); !errors.Is(err, ErrArrivingFull) {
		t.Errorf("a metered body past the charged bytes: %v, want ErrArrivingFull", err)
	}
	release()
	if a.Charge(41) {
		t.Error("41 bytes charged beside 60 of 100")
	}
	a.Refund(60)
	if a.Arriving() != 0 {
		t.Errorf("arriving %d after the refund", a.Arriving())
	}
}
