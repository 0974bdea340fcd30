package regress

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
)

// Noise is a kind of synthetic noise in the evaluation harness.
type Noise string

// Noise kinds. Every kind has the stated coefficient of variation (CV) of
// a point around its level, except for the outliers and the drift.
const (
	NoiseGaussian Noise = "gaussian" // independent normal noise
	NoiseOutliers Noise = "outliers" // gaussian plus 5% outliers of 15–40% (mostly slow runs)
	NoiseBimodal  Noise = "bimodal"  // two modes ±0.9·CV apart plus 0.45·CV normal noise
	NoiseDrift    Noise = "drift"    // gaussian plus a slow drift of ±0.05% per run
	NoiseGaps     Noise = "gaps"     // gaussian with 25% of the runs missing
)

// AllNoises lists the noise kinds in report order.
var AllNoises = []Noise{NoiseGaussian, NoiseOutliers, NoiseBimodal, NoiseDrift, NoiseGaps}

// Setting is a named detector configuration under evaluation.
type Setting struct {
	Name   string `json:"name"`
	Config Config `json:"config"`
	// ConfirmRerun models the per-suite confirmation policy: a detected
	// change triggers one rerun on the same device and build, and the
	// alert goes out only if the change is still confirmed with it.
	ConfirmRerun bool `json:"confirm_rerun"`
}

// DefaultSettings are the detector settings the harness compares by
// default: the default configuration, stricter and looser significance,
// no Mann-Whitney guard, a 3% minimum effect, the same level for old
// change points, no outlier filter, no drift check, the minimum effect
// as the null hypothesis for recent changes, the confirmation-rerun
// policy, and E-divisive instead of PELT.
func DefaultSettings() []Setting {
	return []Setting{
		{Name: "pelt-default", Config: Config{}},
		{Name: "pelt-a0.0001", Config: Config{Alpha: 0.0001}},
		{Name: "pelt-a0.001", Config: Config{Alpha: 0.001}},
		{Name: "pelt-a0.01", Config: Config{Alpha: 0.01}},
		{Name: "pelt-noMW", Config: Config{MWAlpha: -1}},
		{Name: "pelt-effect3%", Config: Config{MinEffect: 0.03}},
		{Name: "pelt-fixed-alpha", Config: Config{FixedAlpha: true}},
		{Name: "pelt-no-outlier-filter", Config: Config{OutlierSigmas: -1}},
		{Name: "pelt-no-drift-check", Config: Config{DriftAlpha: -1}},
		{Name: "pelt-recent-shift", Config: Config{RecentShiftAlpha: 0.015}},
		{Name: "pelt-confirm-rerun", Config: Config{}, ConfirmRerun: true},
		{Name: "edivisive", Config: Config{Method: MethodEDivisive}},
	}
}

// EvalConfig sets up an evaluation. Zero fields take the defaults noted.
type EvalConfig struct {
	Histories int       // histories per cell (default 100)
	Seed      uint64    // generator seed (default 1)
	Steps     []float64 // planted relative steps (default 2,3,5,10%)
	CVs       []float64 // noise CVs (default 1–5%)
	Noises    []Noise   // default AllNoises
	// Designs: how results and their repetitions are drawn (default
	// AllDesigns: no repetitions; 5 repetitions with the CV of a single
	// repetition; 5 repetitions with the CV of their mean).
	Designs   []Design
	Settings  []Setting // default DefaultSettings
	PreMin    int       // fewest runs before the step (default 20)
	PreMax    int       // most runs before the step (default 40)
	After     int       // runs generated after the step (default 8)
	Tolerance int       // an alert within this many runs of the step is a hit (default 2)
	// MergeWindow: a change point within this many runs of an alert of
	// the same direction refines that alert instead of raising a new one
	// (default 4, as monitor.Config.Tolerance).
	MergeWindow int
	Workers     int // parallel workers (default GOMAXPROCS)
}

func (c EvalConfig) withDefaults() EvalConfig {
	c.Histories = cmp.Or(c.Histories, 100)
	c.Seed = cmp.Or(c.Seed, 1)
	if len(c.Steps) == 0 {
		c.Steps = []float64{0.02, 0.03, 0.05, 0.10}
	}
	if len(c.CVs) == 0 {
		c.CVs = []float64{0.01, 0.02, 0.03, 0.04, 0.05}
	}
	if len(c.Noises) == 0 {
		c.Noises = AllNoises
	}
	if len(c.Settings) == 0 {
		c.Settings = DefaultSettings()
	}
	if len(c.Designs) == 0 {
		c.Designs = AllDesigns
	}
	c.PreMin = cmp.Or(c.PreMin, 20)
	c.PreMax = max(cmp.Or(c.PreMax, 40), c.PreMin)
	c.After = cmp.Or(c.After, 8)
	c.Tolerance = cmp.Or(c.Tolerance, 2)
	c.MergeWindow = cmp.Or(c.MergeWindow, 4)
	c.Workers = cmp.Or(c.Workers, runtime.GOMAXPROCS(0))
	return c
}

// Cell is the outcome of one (setting, noise, step, CV) cell. Step 0 is
// the null cell: histories without any change, where every alert is false.
type Cell struct {
	Setting     string  `json:"setting"`
	Design      string  `json:"design"`
	Noise       Noise   `json:"noise"`
	Step        float64 `json:"step"`
	CV          float64 `json:"cv"`
	Histories   int     `json:"histories"`
	HitsAt2     int     `json:"hits_at_2"` // step detected with ≤ 2 runs after it
	HitsAt4     int     `json:"hits_at_4"`
	Hits        int     `json:"hits"` // detected with ≤ After runs
	DelaySum    int     `json:"delay_sum"`
	TrueAlerts  int     `json:"true_alerts"`
	FalseAlerts int     `json:"false_alerts"` // wrong place, wrong direction or duplicate
}

// Recall returns hits/histories for hits = HitsAt2, HitsAt4 or Hits.
func (c Cell) Recall(hits int) float64 { return ratio(hits, c.Histories) }

// MeanDelay is the mean number of runs after the step until detection,
// over detected histories.
func (c Cell) MeanDelay() float64 { return ratio(c.DelaySum, c.Hits) }

// Summary aggregates cells of one setting over a region of the grid. The
// precision counts one null history per step history of the region, so
// it reflects a farm where a real change happens about once every
// (PreMax+PreMin)/2+After runs of a series.
type Summary struct {
	Setting         string  `json:"setting"`
	Design          string  `json:"design"`
	Region          string  `json:"region"`
	Histories       int     `json:"histories"`
	RecallAt2       float64 `json:"recall_at_2"`
	RecallAt4       float64 `json:"recall_at_4"`
	Recall          float64 `json:"recall"`
	MeanDelay       float64 `json:"mean_delay"`
	TrueAlerts      int     `json:"true_alerts"`
	FalseAlerts     int     `json:"false_alerts"`
	FalseAlertShare float64 `json:"false_alert_share"` // false / all alerts
	NullFalsePer100 float64 `json:"null_false_per_100_histories"`
}

// EvalResult is the whole evaluation grid.
type EvalResult struct {
	Config    EvalConfig `json:"-"`
	Histories int        `json:"histories_per_cell"`
	Seed      uint64     `json:"seed"`
	After     int        `json:"runs_after_step"`
	Settings  []Setting  `json:"settings"`
	Designs   []Design   `json:"designs"`
	Cells     []Cell     `json:"cells"`
	Summaries []Summary  `json:"summaries"`
}

// history is one synthetic series with at most one planted step.
type history struct {
	points   []Point
	levels   []float64 // true level of each point
	noise    Noise
	design   Design
	cv       float64
	stepIdx  int // index in points of the first point after the step; -1 if none
	stepDir  Direction
	stepSeen int // points present after the step
}

// Design says how the harness draws a result's repetitions and what the
// grid's "CV" means. A run measures Reps repetitions; each repetition is
// level·(1 + b + w), with b the run-to-run (between-run) noise shared by
// the run's repetitions and w the within-run noise of each repetition.
// BetweenShare of a single repetition's variance is run-to-run noise (a
// device's thermal state, background load, clocks), the rest within-run.
// The detector gets the repetitions' mean, standard deviation and count
// (with Reps 1: the value only, no standard deviation).
type Design struct {
	Name string `json:"name"`
	Reps int    `json:"reps"`
	// CVPerRep: the grid's CV is the spread of a single repetition, so a
	// result (the mean of Reps repetitions) has the smaller CV
	// CV·√(BetweenShare + (1−BetweenShare)/Reps). Otherwise the CV is
	// that of a result (the mean), whatever Reps is: the harder reading.
	CVPerRep     bool    `json:"cv_per_repetition"`
	BetweenShare float64 `json:"between_share"`
}

// resultCV returns the CV of a result (the mean of the repetitions) and
// the between-run and within-run standard deviations of one repetition,
// all relative to the level.
func (d Design) resultCV(cv float64) (result, between, within float64) {
	reps := float64(max(d.Reps, 1))
	k := d.BetweenShare + (1-d.BetweenShare)/reps
	c := cv // per-repetition CV
	if !d.CVPerRep {
		c = cv / math.Sqrt(k)
	}
	return c * math.Sqrt(k), c * math.Sqrt(d.BetweenShare), c * math.Sqrt(1-d.BetweenShare)
}

// Designs of the harness. With one repetition both readings of the CV
// agree. DesignN5PerResult is the model of the first version of the
// harness (CV of the mean of 5 repetitions, about 70% of it run-to-run).
var (
	DesignN1          = Design{Name: "n1", Reps: 1, BetweenShare: 0.3}
	DesignN5PerRep    = Design{Name: "n5-cv-per-rep", Reps: 5, CVPerRep: true, BetweenShare: 0.3}
	DesignN5PerResult = Design{Name: "n5-cv-per-result", Reps: 5, BetweenShare: 0.3}
)

// AllDesigns lists the designs the harness knows, in report order.
var AllDesigns = []Design{DesignN1, DesignN5PerRep, DesignN5PerResult}

// sample draws one result at level with the history's noise and design:
// the mean of the design's repetitions and, with two or more, their
// standard deviation and count. Outliers (a throttled or disturbed run)
// scale the whole run; the bimodal noise is run-to-run (two device
// states: modes ±0.9 of the between-run deviation apart, plus 0.45 of it
// as normal noise).
func sample(rng *rand.Rand, d Design, noise Noise, level, cv float64) Point {
	_, sb, sw := d.resultCV(cv)
	var b float64
	switch noise {
	case NoiseBimodal:
		mode := float64(0.9 * sb)
		if rng.IntN(2) == 0 {
			mode = -mode
		}
		b = mode + float64(0.45*sb*rng.NormFloat64())
	case NoiseHeavy:
		// Student's t, 3 degrees of freedom (variance 3), scaled to sb.
		c := 0.0
		for range 3 {
			z := rng.NormFloat64()
			c += float64(z * z)
		}
		b = sb * rng.NormFloat64() / math.Sqrt(c)
	default:
		b = float64(sb * rng.NormFloat64())
	}
	scale := 1.0
	if noise == NoiseOutliers && rng.Float64() < 0.05 {
		o := 0.15 + float64(0.25*rng.Float64())
		if rng.Float64() < 0.25 {
			scale = 1 + o
		} else {
			scale = 1 - o
		}
	}
	reps := max(d.Reps, 1)
	var s1, s2 float64
	for range reps {
		x := float64(level * scale * (1 + b + float64(sw*rng.NormFloat64())))
		s1 += x
		s2 += float64(x * x)
	}
	mean := s1 / float64(reps)
	p := Point{Value: mean}
	if reps >= 2 {
		v := (s2 - float64(s1*mean)) / float64(reps-1)
		p.Stddev, p.N = math.Sqrt(max(v, 0)), reps
	}
	return p
}

// genHistory generates one history deterministically from its seeds.
func genHistory(seed1, seed2 uint64, d Design, noise Noise, step, cv float64, cfg EvalConfig) history {
	rng := rand.New(rand.NewPCG(seed1, seed2))
	pre := cfg.PreMin + rng.IntN(cfg.PreMax-cfg.PreMin+1)
	total := pre + cfg.After
	sign := 1.0
	if rng.IntN(2) == 0 {
		sign = -1
	}
	drift := 0.0
	if noise == NoiseDrift {
		drift = 0.0005
		if rng.IntN(2) == 0 {
			drift = -drift
		}
	}
	const base = 100.0
	h := history{stepIdx: -1, noise: noise, cv: cv, design: d}
	if step > 0 {
		h.stepDir = direction(sign, true)
	}
	for i := 0; i < total; i++ {
		level := base * (1 + float64(drift*float64(i)))
		if step > 0 && i >= pre {
			level *= 1 + float64(sign*step)
		}
		p := sample(rng, d, noise, level, cv)
		if noise == NoiseGaps && rng.Float64() < 0.25 {
			continue
		}
		if step > 0 && i >= pre && h.stepIdx < 0 {
			h.stepIdx = len(h.points)
		}
		p.Seq = int64(i + 1)
		h.points = append(h.points, p)
		h.levels = append(h.levels, level)
	}
	if h.stepIdx >= 0 {
		h.stepSeen = len(h.points) - h.stepIdx
	}
	return h
}

// online replays h night by night: after each new point the detector runs
// on all points so far. A change point within MergeWindow runs of an
// existing alert of the same direction is that alert (its location is
// refined to the newest estimate, as the coordinator does); any other is
// a new alert. With set.ConfirmRerun, a new change point first triggers
// one rerun at the newest point's level (a fresh sample, not kept in the
// history) and becomes an alert only if the detector still confirms it
// with the rerun added.
//
// An alert is true if, at any time, it sits within Tolerance runs of the
// step with the step's direction and it was raised after the step (the
// first such alert only); its delay is the number of runs after the step
// when it was raised. Every other alert is false. online returns the
// delay (-1 if the step was missed) and the counts of true and false
// alerts.
func online(h history, set Setting, cfg EvalConfig, rng *rand.Rand) (delay, trueAlerts, falseAlerts int) {
	type alert struct {
		idx    int
		dir    Direction
		raised int // points seen when raised
		hit    bool
	}
	var alerts []*alert
	find := func(idx int, dir Direction) *alert {
		for _, a := range alerts {
			if a.dir == dir && abs(a.idx-idx) <= cfg.MergeWindow {
				return a
			}
		}
		return nil
	}
	matches := func(a *alert) bool {
		return h.stepIdx >= 0 && a.dir == h.stepDir && abs(a.idx-h.stepIdx) <= cfg.Tolerance && a.raised > h.stepIdx
	}
	minLen := 2 * max(set.Config.withDefaults().MinSegment, 2)
	for n := minLen; n <= len(h.points); n++ {
		cps, err := Detect(h.points[:n], true, set.Config)
		if err != nil {
			panic(err) // settings are validated before evaluation
		}
		var confirmed []ChangePoint
		for _, cp := range cps {
			if a := find(cp.Index, cp.Direction); a != nil {
				a.idx = cp.Index
				a.hit = a.hit || matches(a)
				continue
			}
			if set.ConfirmRerun {
				if confirmed == nil {
					rerun := sample(rng, h.design, h.noise, h.levels[n-1], h.cv)
					rerun.Seq = h.points[n-1].Seq
					withRerun := append(slices.Clone(h.points[:n]), rerun)
					confirmed, _ = Detect(withRerun, true, set.Config)
					confirmed = append(confirmed, ChangePoint{Index: -1 << 30}) // non-nil marker
				}
				ok := false
				for _, c := range confirmed {
					ok = ok || (c.Direction == cp.Direction && abs(c.Index-cp.Index) <= 1)
				}
				if !ok {
					continue
				}
			}
			a := &alert{idx: cp.Index, dir: cp.Direction, raised: n}
			a.hit = matches(a)
			alerts = append(alerts, a)
		}
	}
	delay = -1
	for _, a := range alerts {
		if a.hit && delay < 0 {
			delay = a.raised - h.stepIdx
			trueAlerts++
		} else {
			falseAlerts++
		}
	}
	return delay, trueAlerts, falseAlerts
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// ratio returns a/b, or 0 when b is 0 (no histories or no hits).
func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Evaluate runs the harness: for every setting, noise kind, CV and step
// (plus step 0, the null cell) it generates Histories histories and
// replays them online. It is deterministic for a given config and stops
// early with ctx's error when ctx is cancelled.
func Evaluate(ctx context.Context, cfg EvalConfig) (*EvalResult, error) {
	cfg = cfg.withDefaults()
	for _, s := range cfg.Settings {
		if err := s.Config.Validate(); err != nil {
			return nil, fmt.Errorf("setting %s: %w", s.Name, err)
		}
	}
	steps := append([]float64{0}, cfg.Steps...)
	type job struct {
		cell int
		h    int
		c    Cell // the cell's parameters, copied so workers never read cells
	}
	var cells []Cell
	designOf := map[string]Design{}
	for _, set := range cfg.Settings {
		for _, d := range cfg.Designs {
			designOf[d.Name] = d
			for _, nz := range cfg.Noises {
				for _, step := range steps {
					for _, cv := range cfg.CVs {
						cells = append(cells, Cell{Setting: set.Name, Design: d.Name, Noise: nz, Step: step, CV: cv})
					}
				}
			}
		}
	}
	params := slices.Clone(cells) // read-only copy for the feeder and workers
	settingOf := map[string]Setting{}
	for _, s := range cfg.Settings {
		settingOf[s.Name] = s
	}
	var mu sync.Mutex
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Go(func() {
			for j := range jobs {
				c := j.c
				// Histories depend on (noise, step, cv, h), not on the
				// setting, so every setting sees the same data.
				s1 := cfg.Seed ^ hashString(fmt.Sprintf("%s/%g/%g", c.Noise, c.Step, c.CV))
				h := genHistory(s1, uint64(j.h), designOf[c.Design], c.Noise, c.Step, c.CV, cfg)
				rr := rand.New(rand.NewPCG(s1^0x9e3779b97f4a7c15, uint64(j.h)))
				d, ta, fa := online(h, settingOf[c.Setting], cfg, rr)
				mu.Lock()
				cc := &cells[j.cell]
				cc.Histories++
				cc.TrueAlerts += ta
				cc.FalseAlerts += fa
				if d >= 0 {
					cc.Hits++
					cc.DelaySum += d
					if d <= 2 {
						cc.HitsAt2++
					}
					if d <= 4 {
						cc.HitsAt4++
					}
				}
				mu.Unlock()
			}
		})
	}
	var err error
feed:
	for i := range cells {
		for h := range cfg.Histories {
			select {
			case jobs <- job{i, h, params[i]}:
			case <-ctx.Done():
				err = ctx.Err()
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	res := &EvalResult{Config: cfg, Histories: cfg.Histories, Seed: cfg.Seed, After: cfg.After, Settings: cfg.Settings, Designs: cfg.Designs, Cells: cells}
	for _, set := range cfg.Settings {
		for _, d := range cfg.Designs {
			res.Summaries = append(res.Summaries,
				res.summarize(set.Name, d.Name, "goal: step>=5% cv<=3% gaussian", func(c Cell) bool { return c.Noise == NoiseGaussian && c.Step >= 0.05 && c.CV <= 0.03+1e-9 }),
				res.summarize(set.Name, d.Name, "goal: step>=5% cv<=3% all noise", func(c Cell) bool { return c.Step >= 0.05 && c.CV <= 0.03+1e-9 }),
				res.summarize(set.Name, d.Name, "whole grid", func(Cell) bool { return true }),
			)
		}
	}
	return res, nil
}

// summarize aggregates the step cells selected by in, with the null
// cells of the same noise and CV counted once per step cell.
func (r *EvalResult) summarize(setting, design, region string, in func(Cell) bool) Summary {
	s := Summary{Setting: setting, Design: design, Region: region}
	null := map[[2]string]Cell{}
	for _, c := range r.Cells {
		if c.Setting == setting && c.Design == design && c.Step == 0 {
			null[[2]string{string(c.Noise), fmt.Sprint(c.CV)}] = c
		}
	}
	var at2, at4, hits, delay, nullHist, nullFalse int
	for _, c := range r.Cells {
		if c.Setting != setting || c.Design != design || c.Step == 0 || !in(c) {
			continue
		}
		s.Histories += c.Histories
		at2 += c.HitsAt2
		at4 += c.HitsAt4
		hits += c.Hits
		delay += c.DelaySum
		s.TrueAlerts += c.TrueAlerts
		s.FalseAlerts += c.FalseAlerts
		n := null[[2]string{string(c.Noise), fmt.Sprint(c.CV)}]
		s.FalseAlerts += n.FalseAlerts
		nullHist += n.Histories
		nullFalse += n.FalseAlerts
	}
	s.RecallAt2, s.RecallAt4, s.Recall = ratio(at2, s.Histories), ratio(at4, s.Histories), ratio(hits, s.Histories)
	s.MeanDelay = ratio(delay, hits)
	s.FalseAlertShare = ratio(s.FalseAlerts, s.TrueAlerts+s.FalseAlerts)
	s.NullFalsePer100 = 100 * ratio(nullFalse, nullHist)
	return s
}

func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
