package expert

import (
	"testing"
	"time"
)

// waitFor waits until cond holds, checking it every 100 µs, and fails the
// test after 10 s: the wait on an event for state the code under test
// signals on no channel (a counter under the store's lock, the throttle's
// reservations). cond is called from the test's goroutine and takes the
// locks it needs itself.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(100 * time.Microsecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		<-tick.C
	}
}
