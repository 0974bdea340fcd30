package cli

import (
	"testing"
	"time"
)

// TestLadderETA: the lines that end a repetition carry the elapsed time
// and the time left, measured from the repetitions done (the loads and
// warm-ups before them count as elapsed only); other lines pass unchanged.
func TestLadderETA(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	now := t0
	e := newLadderETA(func() time.Time { return now }, 0)
	steps := []struct {
		at         time.Duration
		line, want string
	}{
		{5 * time.Second, "reference (all resident): 8 tokens", "reference (all resident): 8 tokens"},
		{20 * time.Second, "scheduled          loaded and warmed up (1 runs)", "scheduled          loaded and warmed up (1 runs)"},
		{45 * time.Second, "repetition 1/5 done", "repetition 1/5 done (20%, 45s elapsed, about 1m40s left)"},
		{70 * time.Second, "repetition 2/5 done", "repetition 2/5 done (40%, 1m10s elapsed, about 1m15s left)"},
		{71 * time.Second, "scheduled 10.00 ± 0.10 tok/s", "scheduled 10.00 ± 0.10 tok/s"},
		{145 * time.Second, "repetition 5/5 done", "repetition 5/5 done (100%, 2m25s elapsed)"},
	}
	for _, s := range steps {
		now = t0.Add(s.at)
		if got := e.line(s.line); got != s.want {
			t.Errorf("at %v: %q, want %q", s.at, got, s.want)
		}
	}
	r := newLadderETA(func() time.Time { return now }, 0)
	now = now.Add(10 * time.Second)
	if got := r.line("replay round 1/4 done"); got != "replay round 1/4 done (25%, 10s elapsed, about 30s left)" {
		t.Errorf("replay: %q", got)
	}
	// One rung at a time: 3 rungs of 2 repetitions, each rung's warm-up
	// inside the time per repetition.
	a := newLadderETA(func() time.Time { return now }, 3)
	t1 := now
	for _, s := range []struct {
		at         time.Duration
		line, want string
	}{
		{1 * time.Second, "naive              loaded and warmed up (1 runs)", "naive              loaded and warmed up (1 runs)"},
		{10 * time.Second, "naive              repetition 1/2 done", "naive              repetition 1/2 done (16%, 10s elapsed, about 50s left)"},
		{20 * time.Second, "naive              repetition 2/2 done", "naive              repetition 2/2 done (33%, 20s elapsed, about 40s left)"},
		{40 * time.Second, "on-demand          repetition 1/2 done", "on-demand          repetition 1/2 done (50%, 40s elapsed, about 40s left)"},
		{90 * time.Second, "oracle             repetition 2/2 done", "oracle             repetition 2/2 done (100%, 1m30s elapsed)"},
	} {
		now = t1.Add(s.at)
		if got := a.line(s.line); got != s.want {
			t.Errorf("one at a time, at %v: %q, want %q", s.at, got, s.want)
		}
	}
}
