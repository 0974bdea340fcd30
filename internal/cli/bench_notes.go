package cli

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/lesfarm/lesfarm/runtime/bench"
	"github.com/lesfarm/lesfarm/runtime/expert"
)

// ladderLegend follows bench --ladder's md table: what its columns mean
// (docs/bench.md has the same table and the JSON fields).
const ladderLegend = `
Columns: decode t/s is mean ± stddev over the repetitions (cv: stddev/mean, n: repetitions);
× naive, × prev. row, × on-demand, × parallel: speed-up over that row; hit rate: share of the
router's experts already cached; pred. precision/recall: of the lookahead predictions (used
among predicted, predicted among used); stall: share of decode time waiting for reads;
× oracle bytes: bytes read per token over the oracle's (1.00× reads no more than Belady's MIN);
of oracle: the row's t/s as a share of the oracle's (the upper bound); identical: same greedy
tokens as the all-resident run. More: docs/bench.md.
`

// syntheticSpecNote says why bench --ladder skipped the +speculative rung
// on a model written by lesfarm synth.
func syntheticSpecNote(model string) string {
	return fmt.Sprintf("+speculative skipped: %s has random weights (lesfarm synth), so the drafter cannot predict its tokens (acceptance ≈ 0) and the row would cost a full set of repetitions for nothing; list speculative in --modes or give --draft to run it anyway", model)
}

// ladderETA adds the elapsed time and an estimate of the time left to
// bench --ladder's progress lines. Side by side, every repetition (a
// replay's round) runs each row once, so the time per repetition measured
// so far times the repetitions left is the estimate; the loads and
// warm-ups before the first repetition count as elapsed only. One rung at
// a time (--one-at-a-time, rungs > 0), each rung loads, warms up and runs
// its repetitions in turn, so the time per repetition done so far, its
// rung's warm-up included, times the repetitions left of every rung is.
type ladderETA struct {
	now      func() time.Time
	start    time.Time
	repsFrom time.Time // when the first repetition began (the last line before it)
	inReps   bool
	rungs    int    // rungs measured one at a time; 0: side by side
	rung     string // the rung of the last repetition line
	rungsIn  int    // rungs whose repetitions have begun
}

func newLadderETA(now func() time.Time, rungs int) *ladderETA {
	t := now()
	return &ladderETA{now: now, start: t, repsFrom: t, rungs: rungs}
}

// rungRepDone matches a one-at-a-time rung's "lookahead   repetition 2/5
// done" (runtime/bench).
var rungRepDone = regexp.MustCompile(`^(\S+)\s+repetition (\d+)/(\d+) done$`)

// repDone matches the ladder's "repetition 2/5 done" and a replay's
// "replay round 2/5 done" (runtime/bench).
var repDone = regexp.MustCompile(`^(?:repetition|replay round) (\d+)/(\d+) done$`)

// line returns the progress line s with the estimate appended when s
// ends a repetition.
func (e *ladderETA) line(s string) string {
	now := e.now()
	if e.rungs > 0 {
		return e.rungLine(s, now)
	}
	m := repDone.FindStringSubmatch(s)
	if m == nil {
		if !e.inReps {
			e.repsFrom = now
		}
		return s
	}
	e.inReps = true
	i, _ := strconv.Atoi(m[1])
	n, _ := strconv.Atoi(m[2])
	elapsed := now.Sub(e.start).Round(time.Second)
	if i >= n || i < 1 {
		return fmt.Sprintf("%s (%d%%, %s elapsed)", s, 100, elapsed)
	}
	left := now.Sub(e.repsFrom) / time.Duration(i) * time.Duration(n-i)
	return fmt.Sprintf("%s (%d%%, %s elapsed, about %s left)", s, 100*i/n, elapsed, left.Round(time.Second))
}

// rungLine is line for a ladder measured one rung at a time.
func (e *ladderETA) rungLine(s string, now time.Time) string {
	m := rungRepDone.FindStringSubmatch(s)
	if m == nil {
		return s
	}
	if m[1] != e.rung {
		e.rung, e.rungsIn = m[1], e.rungsIn+1
	}
	i, _ := strconv.Atoi(m[2])
	n, _ := strconv.Atoi(m[3])
	done, total := (e.rungsIn-1)*n+i, e.rungs*n
	elapsed := now.Sub(e.start)
	if done >= total || done < 1 {
		return fmt.Sprintf("%s (100%%, %s elapsed)", s, elapsed.Round(time.Second))
	}
	left := elapsed / time.Duration(done) * time.Duration(total-done)
	return fmt.Sprintf("%s (%d%%, %s elapsed, about %s left)", s, 100*done/total, elapsed.Round(time.Second), left.Round(time.Second))
}

// aloneRungs is how many rungs a ladder measured one at a time runs (its
// modes, +mixed-precision, +speculative and the oracle), 0 when it runs
// them side by side.
func aloneRungs(lc *bench.LadderConfig) int {
	if !lc.OneAtATime {
		return 0
	}
	n := len(lc.Modes)
	if n == 0 {
		n = len(expert.Modes())
	}
	for _, extra := range []bool{lc.Mixed != "", !lc.NoSpeculative, !lc.NoOracle} {
		if extra {
			n++
		}
	}
	return n
}
