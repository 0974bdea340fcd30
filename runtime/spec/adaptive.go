package spec

import "time"

// controller chooses the draft length of each round. With a fixed K it
// always asks for K. Adaptive, it keeps a decayed estimate of the
// per-token acceptance probability α and measured costs: the target pass
// time per number of positions (in a streaming mode this includes the
// expert reads of the union of the positions' experts) and the draft time
// per proposed token. Each round it takes the k in [0, K] that maximises
// the expected tokens per second
//
//	rate(k) = (1 + α + … + α^k) / (verify(k+1) + k·draft)
//
// where rate(0) is plain decoding. When k = 0 wins, speculation is off; it
// probes the best k > 0 once after 8 plain rounds, then after 16, 32 and
// at most 64 while it keeps losing, so a drafter that does not pay costs a
// bounded share of the rounds.
type controller struct {
	k        int // K: the fixed length, or the adaptive maximum
	adaptive bool

	succ, fail float64    // decayed acceptance counts
	verify     []estimate // by positions 1..K+1
	draft      estimate   // per proposed token
	plain      int        // plain rounds since the last probe
	probeGap   int
}

// estimate is an exponentially weighted mean of measured seconds.
type estimate struct {
	v float64
	n int
}

func (e *estimate) add(x float64) {
	e.n++
	if e.n == 1 {
		e.v = x
		return
	}
	w := max(0.15, 1/float64(e.n))
	e.v += w * (x - e.v)
}

// decay weights old acceptance observations (a window of about 20 rounds).
const decay = 0.95

func newController(k int, adaptive bool) *controller {
	return &controller{k: k, adaptive: adaptive, verify: make([]estimate, k+2), probeGap: 8}
}

func (c *controller) alpha() float64 { return (c.succ + 1) / (c.succ + c.fail + 2) }

// verifyCost estimates a target pass over n positions: measured, or
// interpolated from 1 position and the widest measured pass, or (nothing
// measured) n times a 1-position pass.
func (c *controller) verifyCost(n int) float64 {
	if e := c.verify[n]; e.n > 0 {
		return e.v
	}
	t1 := c.verify[1].v
	for m := len(c.verify) - 1; m > 1; m-- {
		if e := c.verify[m]; e.n > 0 {
			if c.verify[1].n == 0 {
				return e.v * float64(n) / float64(m)
			}
			return t1 + (e.v-t1)*float64(n-1)/float64(m-1)
		}
	}
	return t1 * float64(n)
}

// rate is the expected tokens per second of a round of k drafts.
func (c *controller) rate(k int) float64 {
	a := c.alpha()
	exp, p := 0.0, 1.0
	for i := 0; i <= k; i++ {
		exp += p
		p *= a
	}
	cost := c.verifyCost(k+1) + float64(k)*c.draft.v
	if cost <= 0 {
		return 0
	}
	return exp / cost
}

// next returns the draft length of the next round.
func (c *controller) next() int {
	if !c.adaptive {
		return c.k
	}
	// Measure a plain pass and a speculative one before choosing.
	if c.verify[1].n == 0 {
		return 0
	}
	if c.draft.n == 0 {
		return min(2, c.k)
	}
	best, bestRate := 0, c.rate(0)
	bestSpec, bestSpecRate := 1, 0.0
	for k := 1; k <= c.k; k++ {
		if r := c.rate(k); r > bestSpecRate {
			bestSpec, bestSpecRate = k, r
		}
	}
	if bestSpecRate > bestRate {
		best = bestSpec
	}
	if best == 0 {
		c.plain++
		if c.plain >= c.probeGap {
			c.plain = 0
			c.probeGap = min(2*c.probeGap, 64)
			return bestSpec
		}
		return 0
	}
	c.plain, c.probeGap = 0, 8
	return best
}

// observe records a round: drafted tokens asked for and proposed, accepted,
// the target pass time over positions and the draft time.
func (c *controller) observe(proposed, accepted, positions int, verify, draft time.Duration) {
	if positions < len(c.verify) {
		c.verify[positions].add(verify.Seconds())
	}
	if proposed > 0 {
		c.draft.add(draft.Seconds() / float64(proposed))
		c.succ = c.succ*decay + float64(accepted)
		c.fail *= decay
		if accepted < proposed {
			c.fail++
		}
	}
}
