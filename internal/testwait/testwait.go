// Package testwait waits in tests for a condition that another goroutine or
// process brings about: it polls with a deadline, never sleeps a fixed time
// hoping the condition holds by then. It is for tests only.
package testwait

import (
	"testing"
	"time"
)

// Interval is how often conditions are checked.
const Interval = time.Millisecond

// Until checks cond every Interval until it holds, and fails the test when
// it still does not after timeout. cond runs on the test's goroutine, so it
// may use require.
func Until(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// Tick waits one Interval, for loops that poll with a deadline of their own.
func Tick() { <-time.After(Interval) }
