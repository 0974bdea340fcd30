package regress

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
)

// DesignSeries is the design of the placed-step evaluation: each point is
// one result whose own noise is the CV (no repetitions, all of it
// run-to-run, so the bimodal noise's two modes are ±0.9·CV apart).
var DesignSeries = Design{Name: "series", Reps: 1, BetweenShare: 1}

// NoiseHeavy is heavy-tailed noise: Student's t with 3 degrees of freedom
// scaled to the CV (rare runs 3–5 CVs off, without a separate outlier
// process). It is a placed-evaluation family only (not in AllNoises).
const NoiseHeavy Noise = "heavy-tail"

// Family is one kind of series in the placed-step evaluation.
type Family struct {
	Name  string `json:"name"`
	Noise Noise  `json:"noise"`
	// Step: the series has one planted step (Steps × CVs cells); otherwise
	// it is a null series (CVs cells) and every change found is false.
	Step bool `json:"step"`
	// Drift: "linear" (±0.03–0.08% per point), "exp" (an accelerating
	// degradation of 2–4% over the series) or "" (none). A drift has no
	// change point: a drift family without Step is a null family.
	Drift string `json:"drift,omitempty"`
	// Length: "short" or "long" series (PlacedConfig.ShortLen, LongLen)
	// instead of the usual MinLen–MaxLen.
	Length string `json:"length,omitempty"`
}

// PlacedFamilies are the families of the placed-step evaluation, in
// report order.
var PlacedFamilies = []Family{
	{Name: "step", Noise: NoiseGaussian, Step: true},
	{Name: "step-outliers", Noise: NoiseOutliers, Step: true},
	{Name: "step-heavy-tail", Noise: NoiseHeavy, Step: true},
	{Name: "step-bimodal", Noise: NoiseBimodal, Step: true},
	{Name: "step-on-drift", Noise: NoiseGaussian, Step: true, Drift: "linear"},
	{Name: "step-short", Noise: NoiseGaussian, Step: true, Length: "short"},
	{Name: "step-long", Noise: NoiseGaussian, Step: true, Length: "long"},
	{Name: "null", Noise: NoiseGaussian},
	{Name: "null-outliers", Noise: NoiseOutliers},
	{Name: "null-heavy-tail", Noise: NoiseHeavy},
	{Name: "null-bimodal", Noise: NoiseBimodal},
	{Name: "null-short", Noise: NoiseGaussian, Length: "short"},
	{Name: "null-long", Noise: NoiseGaussian, Length: "long"},
	{Name: "drift-linear", Noise: NoiseGaussian, Drift: "linear"},
	{Name: "drift-exp", Noise: NoiseGaussian, Drift: "exp"},
}

// PlacedConfig sets up EvaluatePlaced. Zero fields take the defaults noted.
type PlacedConfig struct {
	Series   int       // series per cell (default 400)
	Seed     uint64    // generator seed (default 1)
	Steps    []float64 // planted relative steps (default 3, 5, 7, 10%)
	CVs      []float64 // noise CVs (default 1–5%)
	Families []Family  // default PlacedFamilies
	MinLen   int       // shortest usual series (default 30)
	MaxLen   int       // longest usual series (default 60)
	ShortLen [2]int    // short series lengths (default 12–20)
	LongLen  [2]int    // long series lengths (default 100–120)
	// MinBefore: fewest points before a step (default 8, at most half a
	// short series).
	MinBefore int
	MaxAfter  int // most points after a settled step (default 40)
	// Tolerance: a change within this many points of the step, in the
	// step's direction, is a hit (default 1). Any other change is a false
	// alert, so a change placed further off is a false alert and a miss.
	Tolerance int
	// Siblings: sibling series drawn beside each scored one, whose noise
	// the detector pools (see placed_siblings.go; default 4, negative:
	// none, the series is judged on its own noise).
	Siblings int
	// SiblingSpread: the log-normal spread of a sibling's CV around the
	// scored series' (default 0.15; negative: the same CV).
	SiblingSpread float64
	Setting       Setting // detector setting (default: the default Config)
	Workers       int     // parallel workers (default GOMAXPROCS)
}

// HeldOut returns the held-out variant of c: other seeds and other series
// lengths than the tuning run (c's defaults), the same families and grid.
// Figures are reported on it; settings are chosen on the tuning run.
func (c PlacedConfig) HeldOut() PlacedConfig {
	c = c.withDefaults()
	c.Seed = c.Seed*7919 + 104729
	c.MinLen, c.MaxLen = 24, 72
	c.ShortLen, c.LongLen = [2]int{10, 24}, [2]int{80, 120}
	return c
}

func (c PlacedConfig) withDefaults() PlacedConfig {
	c.Series = cmp.Or(c.Series, 400)
	c.Seed = cmp.Or(c.Seed, 1)
	if len(c.Steps) == 0 {
		c.Steps = []float64{0.03, 0.05, 0.07, 0.10}
	}
	if len(c.CVs) == 0 {
		c.CVs = []float64{0.01, 0.02, 0.03, 0.04, 0.05}
	}
	if len(c.Families) == 0 {
		c.Families = PlacedFamilies
	}
	c.MinLen = cmp.Or(c.MinLen, 30)
	c.MaxLen = max(cmp.Or(c.MaxLen, 60), c.MinLen)
	c.ShortLen = cmp.Or(c.ShortLen, [2]int{12, 20})
	c.LongLen = cmp.Or(c.LongLen, [2]int{100, 120})
	c.MinBefore = cmp.Or(c.MinBefore, 8)
	c.MaxAfter = cmp.Or(c.MaxAfter, 40)
	c.Tolerance = cmp.Or(c.Tolerance, 1)
	c.Siblings = cmp.Or(c.Siblings, 8)
	c.SiblingSpread = max(cmp.Or(c.SiblingSpread, 0.15), 0)
	c.Setting.Name = cmp.Or(c.Setting.Name, "pelt-default")
	c.Workers = cmp.Or(c.Workers, runtime.GOMAXPROCS(0))
	return c
}

func (c PlacedConfig) validate() error {
	for _, r := range [][2]int{{c.MinLen, c.MaxLen}, c.ShortLen, c.LongLen} {
		if r[0] < 8 || r[1] < r[0] {
			return fmt.Errorf("placed evaluation: series lengths %d–%d: want 8 <= min <= max", r[0], r[1])
		}
	}
	if c.MaxAfter < 4 {
		return fmt.Errorf("placed evaluation: max after %d: want >= 4", c.MaxAfter)
	}
	return nil
}

// PlacedCell is one cell of the placed-step evaluation: a family at one
// step (0 for null families) and CV. Step series are drawn twice, settled
// (4 to MaxAfter points after the step) and fresh (exactly 2 after).
type PlacedCell struct {
	Family  string  `json:"family"`
	Step    float64 `json:"step"`
	CV      float64 `json:"cv"`
	Series  int     `json:"series"`
	Settled int     `json:"settled_hits"` // settled steps found within Tolerance
	Fresh   int     `json:"fresh_hits"`
	// Detected: step series (settled and fresh) with a change of the
	// step's direction anywhere; Placed: those found within Tolerance.
	Detected int `json:"detected"`
	Placed   int `json:"placed"`
	// Covered: detected series whose nearest change's location range
	// holds the step; RangeSum sums those ranges' widths in points.
	Covered  int `json:"covered"`
	RangeSum int `json:"range_sum"`
	// SettledUnfound: settled steps missed with no change of the step's
	// direction anywhere; SettledMisplaced: missed with the nearest such
	// change further than Tolerance off.
	SettledUnfound   int `json:"settled_unfound"`
	SettledMisplaced int `json:"settled_misplaced"`
	// Ceiling: settled steps the best rule knowing everything but the
	// step's place puts within Tolerance (no significance needed: an
	// upper bound on Settled); Oracle: those a detector knowing the
	// noise's standard deviation finds at this setting's level (see
	// placed_ceiling.go).
	// Insignificant: settled steps the detector's own test does not
	// pass at its level at the true place (or within Tolerance of it).
	// Reachable: settled steps significant there that the best rule
	// knowing everything but the place also puts within Tolerance.
	Insignificant int `json:"settled_insignificant"`
	Reachable     int `json:"settled_reachable"`
	Ceiling       int `json:"settled_ceiling"`
	Oracle        int `json:"settled_oracle"`
	StepFalse     int `json:"step_false_alerts"` // misplaced, wrong direction or extra changes
	NullSeries    int `json:"null_series_alerting"`
	NullAlerts    int `json:"null_alerts"`
	TotalAlerts   int `json:"alerts"`
}

// placedSeries draws one series of n points at base 100 of family f: a
// step of relative size step (sign random) before the last after points
// (after 0: none), with the family's noise and drift. It also returns
// how the series was drawn (the ceiling of placed_ceiling.go needs it).
func placedSeries(rng *rand.Rand, f Family, n, after int, step, cv float64) ([]Point, Direction, placedTruth) {
	sign := 1.0
	if rng.IntN(2) == 0 {
		sign = -1
	}
	dsign := 1.0
	if rng.IntN(2) == 0 {
		dsign = -1
	}
	var drift func(i int) float64
	switch f.Drift {
	case "linear":
		rate := (0.0003 + float64(0.0005*rng.Float64())) * dsign
		drift = func(i int) float64 { return 1 + float64(rate*float64(i)) }
	case "exp":
		total := 0.02 + float64(0.02*rng.Float64())
		k := 3.0 // e-folds over the series: most of it in the last third
		drift = func(i int) float64 {
			return 1 - total*math.Expm1(k*float64(i)/float64(n-1))/math.Expm1(k)
		}
	default:
		drift = func(int) float64 { return 1 }
	}
	pts := make([]Point, n)
	tr := placedTruth{base: make([]float64, n), rel: sign * step, noise: f.Noise, cv: cv}
	for i := range n {
		level := 100 * drift(i)
		tr.base[i] = level
		if after > 0 && i >= n-after {
			level *= 1 + float64(sign*step)
		}
		pts[i] = sample(rng, DesignSeries, f.Noise, level, cv)
		pts[i].Seq = int64(i + 1)
	}
	return pts, direction(sign, true), tr
}

// seriesLen draws the length of a series of family f.
func (c PlacedConfig) seriesLen(rng *rand.Rand, f Family) int {
	r := [2]int{c.MinLen, c.MaxLen}
	switch f.Length {
	case "short":
		r = c.ShortLen
	case "long":
		r = c.LongLen
	}
	return r[0] + rng.IntN(r[1]-r[0]+1)
}

// EvaluatePlaced runs the placed-step evaluation: series of single
// results, each with its own noise as the CV, of every family. A settled
// step sits anywhere with at least MinBefore points before (half a short
// series at most) and 4 to MaxAfter after; a fresh step has exactly 2
// after. Detect judges the whole series once (Config.Once, as regress
// detect does). A hit is a change of the step's direction within
// Tolerance points of it; every other change is a false alert, so a
// change placed further off counts as a false alert and a miss. Every
// change on a null family's series is false. It is deterministic for a
// given config and stops with ctx's error when ctx is cancelled.
func EvaluatePlaced(ctx context.Context, cfg PlacedConfig) (*PlacedResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Setting.Config.Validate(); err != nil {
		return nil, fmt.Errorf("setting %s: %w", cfg.Setting.Name, err)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var cells []PlacedCell
	fams := map[string]Family{}
	for _, f := range cfg.Families {
		fams[f.Name] = f
		steps := []float64{0}
		if f.Step {
			steps = cfg.Steps
		}
		for _, step := range steps {
			for _, cv := range cfg.CVs {
				cells = append(cells, PlacedCell{Family: f.Name, Step: step, CV: cv})
			}
		}
	}
	whole := cfg.Setting.Config
	whole.Once = true
	type job struct{ cell, i int }
	jobs := make(chan job)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Go(func() {
			for j := range jobs {
				c := cells[j.cell] // parameters are read-only after setup
				f := fams[c.Family]
				seed := cfg.Seed ^ hashString(fmt.Sprintf("placed/%s/%g/%g", c.Family, c.Step, c.CV))
				rng := rand.New(rand.NewPCG(seed, uint64(j.i)))
				sib := rand.New(rand.NewPCG(seed^0x5349424c494e4753, uint64(j.i))) // "SIBLINGS"
				d := scorePlaced(rng, sib, cfg, f, c.Step, c.CV, whole)
				mu.Lock()
				cc := &cells[j.cell]
				cc.Series++
				cc.Settled += d.Settled
				cc.Fresh += d.Fresh
				cc.Detected += d.Detected
				cc.Placed += d.Placed
				cc.Covered += d.Covered
				cc.RangeSum += d.RangeSum
				cc.SettledUnfound += d.SettledUnfound
				cc.SettledMisplaced += d.SettledMisplaced
				cc.Ceiling += d.Ceiling
				cc.Insignificant += d.Insignificant
				cc.Reachable += d.Reachable
				cc.Oracle += d.Oracle
				cc.StepFalse += d.StepFalse
				cc.NullSeries += d.NullSeries
				cc.NullAlerts += d.NullAlerts
				cc.TotalAlerts += d.TotalAlerts
				mu.Unlock()
			}
		})
	}
	var err error
feed:
	for i := range cells {
		for k := range cfg.Series {
			select {
			case jobs <- job{i, k}:
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
	res := &PlacedResult{Config: cfg, Setting: cfg.Setting.Name, Cells: cells}
	res.summarizeAll()
	return res, nil
}

// scorePlaced draws and scores one series (a null family) or one settled
// and one fresh series (a step family) into a one-series PlacedCell; sib
// draws their siblings.
func scorePlaced(rng, sib *rand.Rand, cfg PlacedConfig, f Family, step, cv float64, det Config) PlacedCell {
	var d PlacedCell
	n := cfg.seriesLen(rng, f)
	if !f.Step {
		pts, _, _ := placedSeries(rng, f, n, 0, 0, cv)
		cps, _ := DetectPooled(pts, true, det, siblingPrior(sib, cfg, f, n, cv, det))
		d.NullAlerts, d.TotalAlerts = len(cps), len(cps)
		d.NullSeries = min(len(cps), 1)
		return d
	}
	before := min(cfg.MinBefore, n/2)
	most := 4 + max(min(cfg.MaxAfter, n-before)-4, 0) // most points after a settled step
	after := 4 + rng.IntN(most-3)
	for _, a := range []int{after, 2} {
		pts, want, truth := placedSeries(rng, f, n, a, step, cv)
		prior := siblingPrior(sib, cfg, f, n, cv, det)
		cps, _ := DetectPooled(pts, true, det, prior)
		at := n - a
		hit, nearest := false, -1
		for i, cp := range cps {
			if cp.Direction != want {
				d.StepFalse++
				continue
			}
			if nearest < 0 || abs(cp.Index-at) < abs(cps[nearest].Index-at) {
				nearest = i
			}
		}
		for i, cp := range cps {
			if cp.Direction == want && i != nearest {
				d.StepFalse++
			}
		}
		if nearest >= 0 {
			cp := cps[nearest]
			d.Detected++
			if abs(cp.Index-at) <= cfg.Tolerance {
				hit = true
				d.Placed++
			} else {
				d.StepFalse++
			}
			if cp.LastGoodIndex < at && at <= cp.FirstBadIndex {
				d.Covered++
			}
			d.RangeSum += cp.FirstBadIndex - cp.LastGoodIndex
		}
		d.TotalAlerts += len(cps)
		switch {
		case hit && a == 2:
			d.Fresh++
		case hit:
			d.Settled++
		case a != 2 && nearest >= 0:
			d.SettledMisplaced++
		case a != 2:
			d.SettledUnfound++
		}
		if a != 2 {
			lim := settledLimits(pts, truth, at, n-most, n-4, cfg.Tolerance, det, prior)
			d.Ceiling += b2i(lim.Ceiling)
			d.Oracle += b2i(lim.Oracle)
			d.Insignificant += b2i(!lim.Significant)
			d.Reachable += b2i(lim.Significant && lim.Ceiling)
		}
	}
	return d
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
