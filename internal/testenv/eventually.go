package testenv

import (
	"testing"
	"time"
)

// Eventually calls check every `every` until it returns nil and fails the
// test with check's last error once total has passed (nats-server's
// checkFor). check is the signal a test waits for: a counter, a row, a
// state; a test never sleeps and then assumes the event happened. check
// runs at once, then after each interval; it must not call t.Fatal (return
// an error instead).
func Eventually(t testing.TB, total, every time.Duration, check func() error) {
	t.Helper()
	if err := eventually(total, every, check); err != nil {
		t.Fatalf("not within %s: %v", total, err)
	}
}

// Until is Eventually for a caller that acts on a timeout itself (such as
// killing what did not stop): it returns nil once check does, or check's
// last error once total has passed.
func Until(total, every time.Duration, check func() error) error {
	return eventually(total, every, check)
}

func eventually(total, every time.Duration, check func() error) error {
	deadline := time.Now().Add(total)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(min(every, time.Until(deadline)+time.Millisecond))
	}
}
