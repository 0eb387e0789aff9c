package admission

import (
	"errors"
	"io"
	"sync/atomic"
)

// ErrArrivingFull is returned by a metered body whose bytes would take the
// arriving total past its bound.
var ErrArrivingFull = errors.New("the uploads arriving at once hold the most body bytes allowed")

// Arrivals bounds the request bodies still arriving. Each holds a goroutine
// and the bytes received so far, so without a bound one client could open
// them by the thousand (maxPerClient, per address), and many clients
// sending large bodies at full speed would hold gigabytes before a Queue
// admitted any of them (maxBytes, in total). A body that would pass the
// byte bound fails at once; a slow one holds only what it has sent.
// Enter and Leave count the bodies per address (Clients).
type Arrivals struct {
	*Clients
	maxBytes int64
	arriving atomic.Int64 // bytes received by bodies still arriving
}

// NewArrivals returns a bound of maxPerClient bodies arriving from one
// address and maxBytes arriving in all. Both must be positive.
func NewArrivals(maxPerClient int, maxBytes int64) *Arrivals {
	return &Arrivals{Clients: NewClients(maxPerClient, 0), maxBytes: maxBytes}
}

// MaxPerClient returns the per-address bound.
func (a *Arrivals) MaxPerClient() int { return a.maxPerClient }

// MaxBytes returns the bound on the bytes arriving.
func (a *Arrivals) MaxBytes() int64 { return a.maxBytes }

// Arriving returns the bytes that bodies still arriving hold.
func (a *Arrivals) Arriving() int64 { return a.arriving.Load() }

// Charge counts n bytes as arriving at once, for a body whose length is
// known and small (so that metering it would cost more than it holds),
// and reports whether they fit under the bound; Refund gives them back
// after a true return.
func (a *Arrivals) Charge(n int64) bool {
	for {
		cur := a.arriving.Load()
		if cur+n > a.maxBytes {
			return false
		}
		if a.arriving.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// Refund gives back bytes Charge counted.
func (a *Arrivals) Refund(n int64) { a.arriving.Add(-n) }

// Meter returns body charging the bytes read from it to the arriving
// total, and the function that gives them back once the body is done with.
func (a *Arrivals) Meter(body io.ReadCloser) (metered io.ReadCloser, release func()) {
	m := &meteredBody{ReadCloser: body, a: a}
	return m, func() { a.arriving.Add(-m.read) }
}

type meteredBody struct {
	io.ReadCloser
	a    *Arrivals
	read int64
}

// Read fails a body whose bytes would take the total past the bound,
// without counting them: compare-and-swap, so that the body that would
// pass the bound fails, not another one reading at the same moment.
func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	for {
		cur := b.a.arriving.Load()
		if cur+int64(n) > b.a.maxBytes {
			return n, ErrArrivingFull
		}
		if b.a.arriving.CompareAndSwap(cur, cur+int64(n)) {
			break
		}
	}
	b.read += int64(n)
	return n, err
}
