// Package polltest waits in tests for state another goroutine changes; like
// net/http/httptest, it exists for tests only.
package polltest

import (
	"testing"
	"time"
)

// Until polls cond every millisecond until it holds, and fails t, naming
// what, if it has not held within bound. The bound stops a hang; it is not
// a timing assertion, so make it generous.
func Until(t testing.TB, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(bound)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("not reached in %v: %s", bound, what)
		}
	}
}
