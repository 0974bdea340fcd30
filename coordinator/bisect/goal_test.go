package bisect

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/abtest"
)

// simRun is the device time of one simulated run: a phone running one
// config of a suite with a warm-up and a few repetitions.
const simRun = 90 * time.Second

// simTrial is one simulated bisection, driven the way the coordinator
// drives one (Bisector.advance): each step an A/B comparison of the pair
// Search.Next names, in ABBA rounds on one device, Initial rounds first
// and more while Search.More says so, judged by Search.Judge and recorded.
// Each run's value is drawn with coefficient of variation cv around 1 for
// builds before planted and 1+effect from it on, riding a linear drift of
// drift per 100 runs. The alert reported expected.
type simTrial struct {
	n, planted      int
	cv, effect      float64
	expected, drift float64
}

type simResult struct {
	s      *Search
	steps  int
	rounds int
	device time.Duration
}

func (tr simTrial) run(rng *rand.Rand, budget time.Duration) simResult {
	builds := make([]Build, tr.n)
	for i := range builds {
		builds[i] = Build{ID: fmt.Sprintf("b%d", i), Position: int64(i + 1)}
	}
	s, err := NewSearch(builds, tr.expected, budget, abtest.Plan{})
	if err != nil {
		panic(err)
	}
	var spent time.Duration
	runs, rounds := 0, 0
	draw := func(i int) float64 {
		mean := 1.0
		if i >= tr.planted {
			mean += tr.effect
		}
		v := mean * (1 + tr.drift*float64(runs)/100) * (1 + tr.cv*rng.NormFloat64())
		runs++
		spent += time.Duration(float64(simRun) * (0.9 + 0.2*rng.Float64()))
		return v
	}
	for {
		p, ok := s.Next()
		if !ok {
			break
		}
		if !s.Affords(2*s.Plan.Initial, spent, runs) {
			s.Exhausted(spent)
			break
		}
		var a, b []float64
		done := 0
		add := func(k int) {
			for range k {
				if done%2 == 0 {
					a = append(a, draw(p.A))
					b = append(b, draw(p.B))
				} else {
					b = append(b, draw(p.B))
					a = append(a, draw(p.A))
				}
				done++
			}
		}
		add(s.Plan.Initial)
		for {
			c := abtest.Compare(a, b, s.Options(p))
			j := s.Judge(p, c)
			if more := s.More(done, j, spent, runs); more > 0 {
				add(more)
				continue
			}
			s.Record(p, c, j)
			break
		}
		rounds += done
	}
	return simResult{s: s, steps: s.Steps, rounds: rounds, device: spent}
}

type goalStats struct {
	trials, named, notReproduced, ambiguous, wrong int
	steps, bound                                   float64 // means
	maxDevice, sumDevice                           time.Duration
	overBudget                                     int
}

// ceilLog2 is ⌈log2 n⌉.
func ceilLog2(n int) int { return bits.Len(uint(n - 1)) }

func runGoal(seed uint64, trials int, cvLo, cvHi, effect float64, noChange bool, budget time.Duration) goalStats {
	var st goalStats
	for i := range trials {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		n := 8 + rng.IntN(57) // 8..64 builds from last good to first bad
		cv := cvLo + (cvHi-cvLo)*rng.Float64()
		tr := simTrial{n: n, planted: 1 + rng.IntN(n-1), cv: cv, effect: effect,
			// The detector's estimate of the change: within ±30% of it.
			expected: effect * (0.7 + 0.6*rng.Float64()), drift: -0.02}
		if noChange {
			tr.effect, tr.planted, tr.expected = 0, n, effect*(0.7+0.6*rng.Float64())
		}
		r := tr.run(rng, budget)
		st.trials++
		st.steps += float64(r.steps)
		st.bound += float64(ceilLog2(n) + 2)
		st.sumDevice += r.device
		st.maxDevice = max(st.maxDevice, r.device)
		if r.device > budget {
			st.overBudget++
		}
		switch r.s.State {
		case StateCulprit:
			if !noChange && r.s.Hi == tr.planted && r.s.Lo == tr.planted-1 {
				st.named++
			} else {
				st.wrong++
			}
		case StateNotReproduced:
			st.notReproduced++
		case StateAmbiguous:
			st.ambiguous++
		default:
			st.wrong++
		}
	}
	st.steps /= float64(trials)
	st.bound /= float64(trials)
	return st
}

func (s goalStats) String() string {
	return fmt.Sprintf("%d trials: culprit named %d, not reproduced %d, ambiguous %d, wrong %d; steps mean %.2f (mean bound ⌈log2 N⌉+2 = %.2f); device time mean %s, max %s, over budget %d",
		s.trials, s.named, s.notReproduced, s.ambiguous, s.wrong, s.steps, s.bound,
		(s.sumDevice / time.Duration(s.trials)).Round(time.Minute), s.maxDevice.Round(time.Minute), s.overBudget)
}

// TestGoalBisection is issue 30's bisection goal on the search, by
// simulation: over 8 to 64 builds between the alert's last good and first
// bad build whose code changes at one planted build, at the phones' CVs
// (each sample one run's mean), the planted build is named in ≥ 95% of 40
// seeded trials, in at most ⌈log2 N⌉ + 2 steps (A/B comparisons) on
// average; planted noise (no change anywhere, an alert of −10% ± 30%)
// ends not reproduced; every bisection's device time (90 s a run) stays
// within its budget (8 h). docs/bisect.md quotes the figures
// (go test ./coordinator/bisect -run TestGoalBisection -v).
func TestGoalBisection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		cvLo, cvHi    float64
		effect        float64
		noChange      bool
		namedPct      int // goal: at least this share named (or not reproduced, for noise)
		checkStepMean bool
	}{
		{"10% regression, CV 2%", 0.02, 0.02, -0.10, false, 95, true},
		{"10% regression, CV 3%", 0.03, 0.03, -0.10, false, 95, true},
		{"10% regression, CV 4%", 0.04, 0.04, -0.10, false, 95, true},
		{"10% regression, CV 5%", 0.05, 0.05, -0.10, false, 95, true},
		{"10% regression, CV 2–5%", 0.02, 0.05, -0.10, false, 95, true},
		{"5% regression, CV 2%", 0.02, 0.02, -0.05, false, 95, true},
		{"10% improvement, CV 2–5%", 0.02, 0.05, 0.10, false, 95, true},
		{"noise, CV 2%", 0.02, 0.02, -0.10, true, 95, false},
		{"noise, CV 3%", 0.03, 0.03, -0.10, true, 95, false},
		{"noise, CV 5%", 0.05, 0.05, -0.10, true, 90, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := runGoal(2030, 40, tc.cvLo, tc.cvHi, tc.effect, tc.noChange, DefaultBudget)
			t.Logf("%s: %s", tc.name, s)
			got := s.named
			if tc.noChange {
				got = s.notReproduced
			}
			if got*100 < tc.namedPct*s.trials {
				t.Errorf("goal missed: %d of %d, want ≥ %d%%", got, s.trials, tc.namedPct)
			}
			if tc.checkStepMean && s.steps > s.bound {
				t.Errorf("mean steps %.2f over the mean bound %.2f", s.steps, s.bound)
			}
			if s.wrong > 0 && !tc.noChange && s.wrong*100 > 2*s.trials {
				t.Errorf("%d wrong culprits", s.wrong)
			}
			if s.overBudget > 0 {
				t.Errorf("%d bisections over their budget", s.overBudget)
			}
		})
	}
}

// TestGoalBisectionPerSize: with N fixed at each size (the smallest and
// largest, and just past powers of two, where ⌈log2 N⌉ is least
// generous), the goal holds at the noisiest CV, 5%.
func TestGoalBisectionPerSize(t *testing.T) {
	t.Parallel()
	for _, n := range []int{8, 9, 17, 33, 64} {
		var steps, named int
		const trials = 40
		for i := range trials {
			rng := rand.New(rand.NewPCG(77, uint64(n*1000+i)))
			tr := simTrial{n: n, planted: 1 + rng.IntN(n-1), cv: 0.05, effect: -0.10, expected: -0.10, drift: -0.02}
			r := tr.run(rng, DefaultBudget)
			steps += r.steps
			if r.s.State == StateCulprit && r.s.Hi == tr.planted && r.s.Lo == tr.planted-1 {
				named++
			}
		}
		mean := float64(steps) / trials
		t.Logf("N=%d CV 5%%: named %d/%d, steps mean %.2f, bound %d", n, named, trials, mean, ceilLog2(n)+2)
		if mean > float64(ceilLog2(n)+2) || named*100 < 95*trials {
			t.Errorf("N=%d: named %d/%d, mean steps %.2f over %d", n, named, trials, mean, ceilLog2(n)+2)
		}
	}
}

// TestGoalBisectionOtherSeeds: the goal is no artefact of seed 2030:
// five other seeds at CV 2–5% name the planted build in ≥ 95% of 40
// trials within the step bound, and noise is not reproduced in ≥ 90%.
func TestGoalBisectionOtherSeeds(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 5; seed++ {
		s := runGoal(seed, 40, 0.02, 0.05, -0.10, false, DefaultBudget)
		n := runGoal(seed, 40, 0.02, 0.05, -0.10, true, DefaultBudget)
		t.Logf("seed %d: %s; noise: not reproduced %d/%d", seed, s, n.notReproduced, n.trials)
		if s.named*100 < 95*s.trials || s.steps > s.bound || n.notReproduced*100 < 90*n.trials || s.overBudget+n.overBudget > 0 {
			t.Errorf("seed %d: goal missed", seed)
		}
	}
}
