package spec

import (
	"math"
	"time"
)

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
// where rate(0) is plain decoding, and costs are the smallest of the last 8
// measurements (see estimate). The on/off decision is made with care,
// because a wrong "on" costs more than the speculation could gain:
//   - hysteresis: speculation turns on only when the best k beats plain by
//     onMargin with a lower confidence bound of α (one standard deviation
//     of the decayed acceptance counts), and stays on while it beats plain
//     with the estimate itself;
//   - when off, it probes with one draft token (the cheapest round that
//     measures acceptance) after 8 plain rounds; the gap to the next probe
//     doubles (up to maxProbeGap) while the estimate says drafting loses
//     and halves (down to 2) while only the confidence bound keeps it off,
//     so a drafter that does not pay costs a bounded share of the rounds
//     (about 1/maxProbeGap once settled) and one that pays is found within
//     a few probes.
//
// A Decoder keeps its adaptive controller across Runs of the same K: the
// costs and the acceptance it learned carry over, so short generations do
// not each pay the measuring rounds again.
type controller struct {
	k        int // K: the fixed length, or the adaptive maximum
	adaptive bool

	succ, fail float64    // decayed acceptance counts
	verify     []estimate // by positions 1..K+1
	draft      estimate   // per proposed token
	plain      int        // plain rounds since the last probe
	probeGap   int
	rounds     int
	on         bool // the last choice drafted (hysteresis)
	probing    bool // the last choice was a probe
	// probeCost is the last probe's cost beyond a plain pass, in plain
	// passes (a model drafter's catch-up is in it).
	probeCost float64
}

// onMargin is how much the best draft length must beat plain decoding (in
// expected tokens per second, with the lower bound of α) to turn
// speculation on; maxProbeGap bounds the plain rounds between probes.
// Probes are also spaced so that their measured extra cost stays within
// probeShare of the plain rounds between them (at most maxCostGap rounds).
const (
	onMargin    = 0.05
	maxProbeGap = 128
	probeShare  = 0.02
	maxCostGap  = 1024
)

// calibrate is how often (in rounds) a drafting controller decodes one
// round plainly to re-measure the plain pass.
const calibrate = 16

// estimate is a measured cost in seconds: the smallest of the last
// window samples. Another process taking the CPU, or the garbage
// collector, only ever lengthens a pass, so a low order statistic of
// recent passes tracks the pass's own cost on a shared machine far better
// than a mean; the window still follows real changes (a growing context,
// a colder cache).
type estimate struct {
	v    float64
	n    int
	last [window]float64
}

const window = 8

func (e *estimate) add(x float64) {
	e.last[e.n%window] = x
	e.n++
	e.v = x
	for _, y := range e.last[:min(e.n, window)] {
		e.v = min(e.v, y)
	}
}

// decay weights old acceptance observations (a window of about 20 rounds).
const decay = 0.95

func newController(k int, adaptive bool) *controller {
	return &controller{k: k, adaptive: adaptive, verify: make([]estimate, k+2), probeGap: 8}
}

func (c *controller) alpha() float64 { return (c.succ + 1) / (c.succ + c.fail + 2) }

// alphaLow is alpha minus one standard deviation of its estimate (the
// decayed counts as trials), at least 0.
func (c *controller) alphaLow() float64 {
	a := c.alpha()
	return max(0, a-math.Sqrt(a*(1-a)/(c.succ+c.fail+2)))
}

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
func (c *controller) rate(k int) float64 { return c.rateAt(k, c.alpha()) }

// rateAt is rate with acceptance probability a.
func (c *controller) rateAt(k int, a float64) float64 {
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
	// Measure plain passes and speculative ones before choosing (two of
	// each: the first pass after the prompt is cold), and re-measure the
	// plain pass every calibrate rounds while drafting, so the baseline
	// that decides stays current.
	c.rounds++
	if c.verify[1].n < 2 {
		return 0
	}
	if c.draft.n < 2 {
		// One short and one full-length draft: the widest pass anchors
		// verifyCost's interpolation, which a short pass alone would
		// extrapolate linearly (positions that share experts make wide
		// passes far cheaper than that).
		return [2]int{min(2, c.k), c.k}[c.draft.n]
	}
	if c.plain == 0 && c.rounds%calibrate == 0 {
		return 0
	}
	plainRate := c.rate(0)
	bestSpec, bestSpecRate := 1, 0.0
	for k := 1; k <= c.k; k++ {
		if r := c.rate(k); r > bestSpecRate {
			bestSpec, bestSpecRate = k, r
		}
	}
	// Turn on with the lower bound of α and a margin; stay on while the
	// estimate beats plain.
	if (c.on && bestSpecRate > plainRate) || c.rateAt(bestSpec, c.alphaLow()) > plainRate*(1+onMargin) {
		c.on = true
		c.plain, c.probeGap = 0, 8
		return bestSpec
	}
	c.on = false
	c.plain++
	if c.plain >= c.probeGap {
		// Probe sooner while the estimate itself says drafting would pay
		// (only the confidence bound keeps it off), later while it loses.
		c.plain = 0
		if bestSpecRate > plainRate {
			c.probeGap = max(2, c.probeGap/2)
		} else {
			c.probeGap = min(2*c.probeGap, maxProbeGap)
		}
		c.probeGap = max(c.probeGap, min(maxCostGap, int(c.probeCost/probeShare)))
		c.probing = true
		return 1
	}
	return 0
}

// observe records a round: drafted tokens asked for and proposed, accepted,
// the target pass time over positions and the draft time.
func (c *controller) observe(proposed, accepted, positions int, verify, draft time.Duration) {
	if c.probing {
		c.probing = false
		if p := c.verify[1].v; p > 0 {
			c.probeCost = max(0, (verify+draft).Seconds()/p-1-float64(accepted))
		}
	}
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
