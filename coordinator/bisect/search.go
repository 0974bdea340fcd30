package bisect

import (
	"cmp"
	"fmt"
	"math"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/abtest"
)

// States of a bisection: running until it ends in one of the others.
const (
	StateRunning = "running"
	// StateCulprit: the first bad build and the last good one were found
	// next to each other (or with only unmeasurable builds between).
	StateCulprit = "culprit"
	// StateNotReproduced: the endpoints' A/B comparison says they are the
	// same (or that the first bad build changed the other way).
	StateNotReproduced = "not_reproduced"
	// StateAmbiguous: noise or the device-time budget left a comparison
	// undecided, or a build differs from the last good one in the other
	// direction (more than one change in the range).
	StateAmbiguous = "ambiguous"
	// StateFailed: the bisection could not go on (an endpoint build was
	// deleted or fails to run, no device can run it); Reason says why.
	StateFailed = "failed"
	// StateCancelled: stopped on request.
	StateCancelled = "cancelled"
)

// Kinds of step.
const (
	// KindVerify compares the last good build (A) with the first bad one
	// (B): is the alerted change there at all?
	KindVerify = "verify"
	// KindBisect compares the newest known-good build (A) with the
	// midpoint (B).
	KindBisect = "bisect"
	// KindRecheck compares the midpoint (A) with the oldest known-bad
	// build (B), when the bisect step on it ran out of rounds undecided.
	KindRecheck = "recheck"
)

// Build is one build of the bisected range, in lineage order.
type Build struct {
	ID       string `json:"id"`
	GitSHA   string `json:"git_sha,omitempty"`
	Position int64  `json:"position"`
	// Skipped says why the build is left out of the search: no executable
	// for the device's platform, deleted, or it failed to run. "" while
	// it is a candidate.
	Skipped string `json:"skipped,omitempty"`
}

// Pair is one comparison to run: build A (the baseline side) against
// build B, indexes into Search.Builds.
type Pair struct {
	A, B int
	Kind string
}

// Judgement is a comparison read against the change being bisected.
type Judgement string

// Judgements.
const (
	// Differs: B differs from A by about the change (in its direction).
	Differs Judgement = "differs"
	// Matches: B is the same as A (no change of half the change's size).
	Matches Judgement = "matches"
	// Opposite: B differs from A in the other direction.
	Opposite Judgement = "opposite"
	// Undecided: more rounds are needed.
	Undecided Judgement = "undecided"
)

// Defaults of Search.
const (
	DefaultBudget = 12 * time.Hour
	// DefaultLevel is the confidence of the change's interval that the
	// midpoint rule reads (see Judge).
	DefaultLevel = 0.95
)

// Search is the state of one bisection: the builds between the alert's
// last good build and its first bad one, what is known about them, and
// where it ended. It is pure (no I/O) and serialises to JSON; the
// coordinator stores it with the bisection and the goal simulation drives
// it with synthetic samples. Its zero value is not usable: build one with
// NewSearch. Not safe for concurrent use.
type Search struct {
	Builds []Build `json:"builds"`
	// Lo is the newest build known good, Hi the oldest known bad.
	Lo int `json:"lo"`
	Hi int `json:"hi"`
	// Expected is the alert's relative change of the metric (−0.13 is 13%
	// lower): its direction and the size the endpoints are checked for.
	Expected float64 `json:"expected"`
	// Effect is the change measured between the endpoints once verified.
	Effect   float64 `json:"effect"`
	Verified bool    `json:"verified"`
	// Recheck is set while the midpoint is compared with Hi because its
	// comparison with Lo ran out of rounds undecided.
	Recheck bool `json:"recheck,omitempty"`
	// MinEffect is the smallest change the verify step calls different
	// (default abtest.DefaultMinEffect).
	MinEffect float64 `json:"min_effect"`
	// Plan is each step's rounds (abtest's defaults: 6, then 6 more while
	// undecided, up to 30).
	Plan abtest.Plan `json:"plan"`
	// Budget bounds the bisection's total device time.
	Budget time.Duration `json:"budget"`
	// Steps counts decided comparisons.
	Steps  int    `json:"steps"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// NewSearch starts a search over builds (lineage order; builds[0] the
// last good build, the last one the first bad), for a change of expected
// (relative, signed) that the alert reported. Builds already marked
// Skipped are left out; the endpoints must not be.
func NewSearch(builds []Build, expected float64, budget time.Duration, plan abtest.Plan) (*Search, error) {
	if len(builds) < 2 {
		return nil, fmt.Errorf("bisect: %d build(s) in the range, need the last good and the first bad", len(builds))
	}
	if builds[0].Skipped != "" || builds[len(builds)-1].Skipped != "" {
		return nil, fmt.Errorf("bisect: an endpoint of the range is skipped")
	}
	if expected == 0 || math.IsNaN(expected) || math.IsInf(expected, 0) {
		return nil, fmt.Errorf("bisect: the alert's change %v has no direction", expected)
	}
	return &Search{Builds: append([]Build(nil), builds...), Lo: 0, Hi: len(builds) - 1, Expected: expected,
		MinEffect: abtest.DefaultMinEffect, Plan: plan.WithDefaults(), Budget: cmp.Or(budget, DefaultBudget), State: StateRunning}, nil
}

// Candidates returns the indexes strictly between Lo and Hi still in the
// search.
func (s *Search) Candidates() []int {
	var out []int
	for i := s.Lo + 1; i < s.Hi; i++ {
		if s.Builds[i].Skipped == "" {
			out = append(out, i)
		}
	}
	return out
}

// mid is the candidate that splits the possible first bad builds (the
// candidates and Hi) most evenly, or -1 when none is left.
func (s *Search) mid() int {
	c := s.Candidates()
	if len(c) == 0 {
		return -1
	}
	return c[(len(c)+1)/2-1]
}

// Next returns the comparison to run next, or false when the search has
// ended (it may end here: no candidate left between a verified Lo and Hi
// names the culprit).
func (s *Search) Next() (Pair, bool) {
	if s.State != StateRunning {
		return Pair{}, false
	}
	if !s.Verified {
		return Pair{A: s.Lo, B: s.Hi, Kind: KindVerify}, true
	}
	m := s.mid()
	if m < 0 {
		s.end(StateCulprit, s.culpritReason())
		return Pair{}, false
	}
	if s.Recheck {
		return Pair{A: m, B: s.Hi, Kind: KindRecheck}, true
	}
	return Pair{A: s.Lo, B: m, Kind: KindBisect}, true
}

func (s *Search) culpritReason() string {
	lo, hi := s.Builds[s.Lo], s.Builds[s.Hi]
	r := fmt.Sprintf("first bad build %s (%s), last good build %s (%s): %+.1f%% between them", hi.ID, shaOr(hi.GitSHA), lo.ID, shaOr(lo.GitSHA), 100*s.Effect)
	var between []string
	for i := s.Lo + 1; i < s.Hi; i++ {
		between = append(between, s.Builds[i].ID+" ("+s.Builds[i].Skipped+")")
	}
	if len(between) > 0 {
		r += fmt.Sprintf("; %d build(s) between them could not be measured: %s", len(between), joinMax(between, 3))
	}
	return r
}

// Options are the abtest options of pair p's comparison.
func (s *Search) Options(p Pair) abtest.Options {
	o := abtest.Options{MinEffect: s.MinEffect, Level: DefaultLevel}
	if p.Kind != KindVerify {
		// Between two known levels: a change of half the measured one
		// is what tells them apart.
		o.MinEffect = math.Max(s.MinEffect, math.Abs(s.Effect)/2)
	}
	return o
}

// change is the change pair p looks for: B against A when they are on
// both sides of it.
func (s *Search) change(p Pair) float64 {
	if p.Kind == KindVerify {
		return s.Expected
	}
	return s.Effect
}

// minTestSamples is the fewest samples a side with which KS and
// Mann–Whitney can reach p ≤ 0.01 (5+5: 2/252).
const minTestSamples = 5

// Judge reads comparison c (of pair p, made with s.Options(p)) against
// the change e that p looks for. The verify step takes abtest's verdict
// first (with 5 samples a side or more): Different in e's direction is
// Differs, in the other Opposite; Same is Matches. Otherwise, and for
// every other step, the change's interval decides when it lies wholly on
// one side of e/2, the midpoint between the two levels: wholly nearer 0,
// Matches; wholly nearer e, Differs; wholly beyond −e/2, Opposite (a
// midpoint must also lie within −e/2 for Matches: between the levels, not
// past the old one). Otherwise Undecided.
func (s *Search) Judge(p Pair, c abtest.Comparison) Judgement {
	e := s.change(p)
	// Below 5 samples a side no test reaches p ≤ 0.01, and abtest's same
	// threshold does not know it: trust its verdicts from 5 on only.
	if p.Kind == KindVerify && min(c.NA, c.NB) >= minTestSamples {
		switch c.Verdict {
		case abtest.Different:
			if c.Shift.Change*e > 0 {
				return Differs
			}
			return Opposite
		case abtest.Same:
			return Matches
		}
	}
	if c.NA == 0 || c.NB == 0 {
		return Undecided
	}
	half := e / 2
	lo, hi := c.Shift.Low, c.Shift.High
	if e < 0 {
		lo, hi, half = -hi, -lo, -half // read as a positive change
	}
	switch {
	case lo > half:
		return Differs
	case hi < -half:
		return Opposite
	case hi < half && (p.Kind == KindVerify || lo > -half):
		return Matches
	}
	return Undecided
}

// More returns how many rounds to add to pair p's comparison after done
// rounds judged j, given the device time spent so far over runs runs: the
// plan's next step while Undecided, as long as the budget is expected to
// cover them (each round is two runs at the mean run's device time).
func (s *Search) More(done int, j Judgement, spent time.Duration, runs int) int {
	k := s.Plan.More(done, verdictOf(j))
	if k == 0 || !s.Affords(2*k, spent, runs) {
		return 0
	}
	return k
}

// Affords reports whether n more runs fit the budget after spent device
// time over runs runs (true before any run has a known time).
func (s *Search) Affords(n int, spent time.Duration, runs int) bool {
	if runs == 0 {
		return spent <= s.Budget
	}
	per := spent / time.Duration(runs)
	return spent+per*time.Duration(n) <= s.Budget
}

func verdictOf(j Judgement) abtest.Verdict {
	if j == Undecided {
		return abtest.Unknown
	}
	return abtest.Same
}

// Record applies the final judgement j of pair p's comparison c and
// moves the search on: narrows the range, or ends it. spent and runs say
// whether the budget allows another step (for the reason given when not).
func (s *Search) Record(p Pair, c abtest.Comparison, j Judgement) {
	if s.State != StateRunning {
		return
	}
	s.Steps++
	a, b := s.Builds[p.A], s.Builds[p.B]
	line := fmt.Sprintf("%s vs %s: %+.1f%% [%+.1f%%, %+.1f%%], p %.2g, %d+%d runs", b.ID, a.ID, 100*c.Shift.Change, 100*c.Shift.Low, 100*c.Shift.High, c.P, c.NA, c.NB)
	switch p.Kind {
	case KindVerify:
		switch j {
		case Differs:
			s.Verified, s.Effect = true, c.Shift.Change
		case Matches:
			s.end(StateNotReproduced, fmt.Sprintf("the first bad build does not differ from the last good one by the alert's %+.1f%%: %s", 100*s.Expected, line))
		case Opposite:
			s.end(StateNotReproduced, fmt.Sprintf("the first bad build changed the other way from the alert's %+.1f%%: %s", 100*s.Expected, line))
		default:
			s.end(StateAmbiguous, "the last good and first bad builds could not be told apart within the budget: "+line)
		}
	case KindBisect:
		switch j {
		case Differs:
			s.Hi = p.B
		case Matches:
			s.Lo = p.B
		case Opposite:
			s.end(StateAmbiguous, fmt.Sprintf("build %s differs from the last good build in the other direction than the change (%+.1f%%): more than one change in the range: %s", b.ID, 100*s.Effect, line))
		default:
			s.Recheck = true
		}
	case KindRecheck:
		s.Recheck = false
		switch j {
		case Differs: // the midpoint is at the old level
			s.Lo = p.A
		case Matches:
			s.Hi = p.A
		case Opposite:
			s.end(StateAmbiguous, fmt.Sprintf("build %s differs from the first bad build by more than the change (%+.1f%%): more than one change in the range: %s", a.ID, 100*s.Effect, line))
		default:
			s.end(StateAmbiguous, fmt.Sprintf("build %s could not be placed on either side of the change within the budget (noise): %s", a.ID, line))
		}
	}
	if s.State == StateRunning && s.Verified && s.mid() < 0 {
		s.end(StateCulprit, s.culpritReason())
	}
}

// Exhausted ends the search as ambiguous because the budget cannot pay
// for its next step.
func (s *Search) Exhausted(spent time.Duration) {
	s.end(StateAmbiguous, fmt.Sprintf("the device-time budget %s is spent (%s used) with %s still possible first bad builds", s.Budget, spent.Round(time.Second), s.remaining()))
}

func (s *Search) remaining() string {
	ids := []string{}
	for _, i := range s.Candidates() {
		ids = append(ids, s.Builds[i].ID)
	}
	ids = append(ids, s.Builds[s.Hi].ID)
	return fmt.Sprintf("%d", len(ids)) + " (" + joinMax(ids, 4) + ")"
}

// Skip leaves build i out of the search (why: deleted, no executable,
// failed to run). An endpoint cannot be skipped: the search fails.
func (s *Search) Skip(i int, why string) {
	if s.State != StateRunning {
		return
	}
	if i == s.Lo || i == s.Hi {
		s.end(StateFailed, fmt.Sprintf("build %s: %s", s.Builds[i].ID, why))
		return
	}
	s.Builds[i].Skipped = why
	// A recheck compares the midpoint with Hi; the midpoint is gone.
	s.Recheck = false
}

// Fail ends the search as failed.
func (s *Search) Fail(why string) { s.end(StateFailed, why) }

// Cancel ends the search as cancelled.
func (s *Search) Cancel(why string) { s.end(StateCancelled, why) }

func (s *Search) end(state, reason string) {
	if s.State == StateRunning {
		s.State, s.Reason = state, reason
	}
}

// LastGood and FirstBad are the range's current ends: Builds[Lo] and
// Builds[Hi] (the culprit pair once the state is culprit).
func (s *Search) LastGood() Build { return s.Builds[s.Lo] }

// FirstBad: see LastGood.
func (s *Search) FirstBad() Build { return s.Builds[s.Hi] }

func shaOr(sha string) string {
	if sha == "" {
		return "no git sha"
	}
	return sha
}

func joinMax(items []string, n int) string {
	out := ""
	for i, it := range items {
		if i == n {
			return out + fmt.Sprintf(", … %d more", len(items)-n)
		}
		if i > 0 {
			out += ", "
		}
		out += it
	}
	return out
}
