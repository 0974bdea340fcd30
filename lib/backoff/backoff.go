// Package backoff is the one retry delay of lesfarm: exponential with
// jitter, used by the agent's reconnects and hellos, its artifact
// downloads, and the coordinator's run listener.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Jitter is the relative spread of a delay: Delay is uniform in
// [d·(1−Jitter), d·(1+Jitter)], so a farm of clients that failed together
// does not retry in lockstep.
const Jitter = 0.25

// Delay returns the delay before retry number attempt (0 for the first
// retry): base·2^attempt capped at max (max <= 0: no cap), spread by
// ±Jitter, and at least 1 ms. It is safe for concurrent use.
func Delay(attempt int, base, max time.Duration) time.Duration {
	d := base
	for i := 0; i < attempt && (max <= 0 || d < max) && d < time.Duration(1)<<52; i++ {
		d *= 2
	}
	if max > 0 {
		d = min(d, max)
	}
	spread := time.Duration(float64(d) * Jitter)
	j := time.Duration(rand.Int64N(int64(2*spread)+1)) - spread
	return max1ms(d + j)
}

func max1ms(d time.Duration) time.Duration { return max(d, time.Millisecond) }
