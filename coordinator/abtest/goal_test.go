package abtest

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// gateTrial simulates one A/B gate the way the coordinator runs it: rounds
// of one baseline run and one run of the build under test on one device,
// in ABBA order, each run's value drawn with coefficient of variation cv
// around 1 (A) or ratio (B), both riding one linear drift of drift over
// the whole budget; Compare after Initial rounds and after each Step until
// the verdict is known or Max is spent. tests is the number of independent
// config × metric comparisons the gate decides at once (1: decode tok/s of
// one config). It returns the combined verdict, the outcome of the first
// comparison read as decode tok/s, and the rounds used.
func gateTrial(rng *rand.Rand, ratio, cv, drift float64, tests int, plan Plan) (Verdict, Outcome, int) {
	plan = plan.WithDefaults()
	a := make([][]float64, tests)
	b := make([][]float64, tests)
	slot := 0
	draw := func(mean float64) float64 {
		t := float64(slot) / float64(2*plan.Max)
		slot++
		return mean * (1 + drift*t) * (1 + cv*rng.NormFloat64())
	}
	rounds := 0
	add := func(k int) {
		for range k {
			for i := range tests {
				if rounds%2 == 0 { // ABBA: drift within a pair cancels over two rounds
					a[i] = append(a[i], draw(1))
					b[i] = append(b[i], draw(ratio))
				} else {
					b[i] = append(b[i], draw(ratio))
					a[i] = append(a[i], draw(1))
				}
			}
			rounds++
		}
	}
	add(plan.Initial)
	for {
		cs := make([]Comparison, tests)
		for i := range tests {
			cs[i] = Compare(a[i], b[i], Options{})
		}
		v := Combine(cs...)
		if more := plan.More(rounds, v); more > 0 {
			add(more)
			continue
		}
		return v, OutcomeOf(cs[0], true), rounds
	}
}

type gateStats struct {
	trials, caught, different, same, unknown int
	rounds                                   []int
}

func runTrials(seed uint64, trials int, ratio, cv, drift float64, tests int) gateStats {
	var s gateStats
	for i := range trials {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		v, out, r := gateTrial(rng, ratio, cv, drift, tests, Plan{})
		s.trials++
		s.rounds = append(s.rounds, r)
		switch v {
		case Different:
			s.different++
		case Same:
			s.same++
		default:
			s.unknown++
		}
		if out == Regression {
			s.caught++
		}
	}
	slices.Sort(s.rounds)
	return s
}

func (s gateStats) meanRounds() float64 {
	var sum int
	for _, r := range s.rounds {
		sum += r
	}
	return float64(sum) / float64(len(s.rounds))
}

// TestGoalGate is the A/B gate goal on the decision procedure, by
// simulation: at CV 3% (each sample is one run's mean), a planted 5%
// decode regression is caught in ≥ 95% of 40 seeded trials and an A/A
// comparison gives a false verdict (different) in ≤ 2% of 100, with a
// drift of −3% over the budget riding both sides. It logs the rounds used
// (a round is one run per side); docs/ab.md quotes these figures
// (go test ./coordinator/abtest -run TestGoalGate -v).
func TestGoalGate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		trials    int
		ratio, cv float64
		tests     int
		check     func(s gateStats) bool
		goal      string
	}{
		{"5% regression, CV 3%", 40, 0.95, 0.03, 1, func(s gateStats) bool { return s.caught*100 >= 95*s.trials }, "caught ≥ 95%"},
		{"A/A, CV 3%", 100, 1, 0.03, 1, func(s gateStats) bool { return s.different*100 <= 2*s.trials }, "false ≤ 2%"},
		{"5% regression, CV 2%", 40, 0.95, 0.02, 1, func(s gateStats) bool { return s.caught*100 >= 95*s.trials }, "caught ≥ 95%"},
		{"A/A, CV 1%", 100, 1, 0.01, 1, func(s gateStats) bool { return s.different*100 <= 2*s.trials }, "false ≤ 2%"},
		// A whole suite at once: 6 independent config × metric tests
		// (pessimistic: real metrics of one config are correlated).
		{"A/A, CV 3%, 6 tests", 100, 1, 0.03, 6, func(s gateStats) bool { return s.different*100 <= 5*s.trials }, "false ≤ 5%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := runTrials(2026, tc.trials, tc.ratio, tc.cv, -0.03, tc.tests)
			t.Logf("%s: %d trials: regression caught %d, different %d, same %d, unknown %d; rounds per side mean %.1f, median %d, max %d",
				tc.name, s.trials, s.caught, s.different, s.same, s.unknown, s.meanRounds(), s.rounds[len(s.rounds)/2], s.rounds[len(s.rounds)-1])
			if !tc.check(s) {
				t.Fatalf("goal %s missed", tc.goal)
			}
		})
	}
}
