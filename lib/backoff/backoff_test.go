package backoff

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		attempt   int
		base, max time.Duration
		want      time.Duration // before jitter
	}{
		{0, 100 * time.Millisecond, time.Second, 100 * time.Millisecond},
		{1, 100 * time.Millisecond, time.Second, 200 * time.Millisecond},
		{3, 100 * time.Millisecond, time.Second, 800 * time.Millisecond},
		{4, 100 * time.Millisecond, time.Second, time.Second},
		{60, 100 * time.Millisecond, time.Second, time.Second},
		{5, time.Millisecond, 0, 32 * time.Millisecond},
	} {
		lo, hi := time.Duration(float64(tc.want)*(1-Jitter)), time.Duration(float64(tc.want)*(1+Jitter))
		seen := map[time.Duration]bool{}
		for range 200 {
			d := Delay(tc.attempt, tc.base, tc.max)
			if d < lo || d > hi {
				t.Fatalf("Delay(%d, %v, %v) = %v, want in [%v, %v]", tc.attempt, tc.base, tc.max, d, lo, hi)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Errorf("Delay(%d, %v, %v) is not jittered: %d distinct values", tc.attempt, tc.base, tc.max, len(seen))
		}
	}
	if d := Delay(0, 0, 0); d != time.Millisecond {
		t.Errorf("zero base gave %v, want the 1 ms floor", d)
	}
	if d := Delay(1000, time.Hour, 0); d <= 0 {
		t.Errorf("uncapped delay overflowed: %v", d)
	}
}
