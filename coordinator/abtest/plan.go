package abtest

import "cmp"

// Plan is the repetition budget of a comparison, in rounds. A round is one
// sample of each side on each device: one run of the baseline and one run
// of the build under test, back to back. The zero value means the
// defaults.
type Plan struct {
	// Initial rounds run before the first decision (default 6; with
	// fewer than 5 samples a side no test can reach p ≤ 0.01).
	Initial int `json:"initial"`
	// Step rounds are added each time the answer is Unknown (default 6).
	Step int `json:"step"`
	// Max is the most rounds a comparison may run (default 30).
	Max int `json:"max"`
}

// Defaults of Plan.
const (
	DefaultInitialRounds = 6
	DefaultStepRounds    = 6
	DefaultMaxRounds     = 30
)

// WithDefaults fills in the zero fields and keeps Initial ≤ Max.
func (p Plan) WithDefaults() Plan {
	p.Initial = cmp.Or(p.Initial, DefaultInitialRounds)
	p.Step = cmp.Or(p.Step, DefaultStepRounds)
	p.Max = cmp.Or(p.Max, DefaultMaxRounds)
	p.Max = max(p.Max, p.Initial)
	return p
}

// More returns how many rounds to add after done rounds when the answer
// is v: Step (or what is left of Max) while v is Unknown, else 0.
func (p Plan) More(done int, v Verdict) int {
	p = p.WithDefaults()
	if v != Unknown || done >= p.Max {
		return 0
	}
	return min(p.Step, p.Max-done)
}

// Outcome is a comparison read in the metric's direction.
type Outcome string

// Outcomes.
const (
	Regression   Outcome = "regression"
	Improvement  Outcome = "improvement"
	NoChange     Outcome = "same"
	Inconclusive Outcome = "unknown"
)

// OutcomeOf reads c for a metric where higher is better (decode tok/s) or
// not (time to first token).
func OutcomeOf(c Comparison, higherIsBetter bool) Outcome {
	switch c.Verdict {
	case Same:
		return NoChange
	case Unknown:
		return Inconclusive
	}
	if (c.Shift.Change < 0) == higherIsBetter {
		return Regression
	}
	return Improvement
}

// Combine is the verdict over many comparisons: Different when any is
// Different (a change anywhere is a change), else Unknown when any is
// Unknown, else Same.
func Combine(cs ...Comparison) Verdict {
	v := Same
	for _, c := range cs {
		switch c.Verdict {
		case Different:
			return Different
		case Unknown:
			v = Unknown
		}
	}
	return v
}
