package testenv

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestEventually(t *testing.T) {
	t.Parallel()
	n := 0
	if err := eventually(time.Second, time.Millisecond, func() error {
		if n++; n < 5 {
			return fmt.Errorf("only %d calls", n)
		}
		return nil
	}); err != nil || n != 5 {
		t.Fatalf("eventually = %v after %d calls, want nil after 5", err, n)
	}
	start := time.Now()
	err := eventually(50*time.Millisecond, 10*time.Millisecond, func() error { return errors.New("never") })
	if err == nil || err.Error() != "never" {
		t.Fatalf("eventually = %v, want the check's last error", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > 2*time.Second {
		t.Fatalf("gave up after %s, want about 50ms", d)
	}
	if err := Until(20*time.Millisecond, 5*time.Millisecond, func() error { return errors.New("still there") }); err == nil || err.Error() != "still there" {
		t.Fatalf("Until = %v, want the check's last error", err)
	}
	if err := Until(time.Second, time.Millisecond, func() error { return nil }); err != nil {
		t.Fatalf("Until = %v, want nil", err)
	}
}
