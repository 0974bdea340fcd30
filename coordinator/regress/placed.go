package regress

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
)

// DesignSeries is the design of the placed-step evaluation: each point is
// one result whose own noise is the CV (no repetitions, all of it
// run-to-run, so the bimodal noise's two modes are ±0.9·CV apart).
var DesignSeries = Design{Name: "series", Reps: 1, BetweenShare: 1}

// PlacedConfig sets up EvaluatePlaced. Zero fields take the defaults noted.
type PlacedConfig struct {
	Series int       // series per cell (default 400)
	Seed   uint64    // generator seed (default 1)
	Steps  []float64 // planted relative steps (default 3, 5, 7, 10%)
	CVs    []float64 // noise CVs (default 1, 2, 3%)
	// Nulls are the noise kinds of the null series (default gaussian,
	// outliers, bimodal, drift); step series use gaussian noise.
	Nulls     []Noise
	MinLen    int     // shortest series (default 30)
	MaxLen    int     // longest series (default 60)
	MinBefore int     // fewest points before a settled step (default 8)
	Tolerance int     // a change point within this many points of the step is a hit (default 2)
	Setting   Setting // detector setting (default: the default Config)
	Workers   int     // parallel workers (default GOMAXPROCS)
}

func (c PlacedConfig) withDefaults() PlacedConfig {
	c.Series = cmp.Or(c.Series, 400)
	c.Seed = cmp.Or(c.Seed, 1)
	if len(c.Steps) == 0 {
		c.Steps = []float64{0.03, 0.05, 0.07, 0.10}
	}
	if len(c.CVs) == 0 {
		c.CVs = []float64{0.01, 0.02, 0.03}
	}
	if len(c.Nulls) == 0 {
		c.Nulls = []Noise{NoiseGaussian, NoiseOutliers, NoiseBimodal, NoiseDrift}
	}
	c.MinLen = cmp.Or(c.MinLen, 30)
	c.MaxLen = max(cmp.Or(c.MaxLen, 60), c.MinLen)
	c.MinBefore = cmp.Or(c.MinBefore, 8)
	c.Tolerance = cmp.Or(c.Tolerance, 2)
	c.Setting.Name = cmp.Or(c.Setting.Name, "pelt-default")
	c.Workers = cmp.Or(c.Workers, runtime.GOMAXPROCS(0))
	return c
}

// PlacedCell is one cell of the placed-step evaluation. For a step cell
// (Step > 0) Settled and Fresh count the series caught with at least 4
// and with exactly 2 points after the step; for a null cell (Step 0)
// FalseSeries counts series where Detect on the whole series reports any
// change, and OnlineFalseSeries those where any prefix does (the
// coordinator runs the detector after every result).
type PlacedCell struct {
	Noise             Noise   `json:"noise"`
	Step              float64 `json:"step"`
	CV                float64 `json:"cv"`
	Series            int     `json:"series"`
	Settled           int     `json:"settled_hits"`
	OnlineSettled     int     `json:"online_settled_hits"` // raised on some night of the replay
	Fresh             int     `json:"fresh_hits"`
	ExtraChanges      int     `json:"extra_changes"` // change points away from the step
	FalseSeries       int     `json:"false_series"`
	OnlineFalseSeries int     `json:"online_false_series"`
}

// PlacedSummary aggregates a region of the placed-step grid.
type PlacedSummary struct {
	Region         string  `json:"region"`
	Series         int     `json:"series"`
	SettledRecall  float64 `json:"settled_recall"`
	OnlineSettled  float64 `json:"online_settled_recall"` // the monitor's replay
	FreshRecall    float64 `json:"fresh_recall"`
	NullSeries     int     `json:"null_series"`
	FalseRate      float64 `json:"false_rate"`        // null series with a change, whole series
	OnlineFalse    float64 `json:"online_false_rate"` // null series with a change in any prefix
	ExtraPerSeries float64 `json:"extra_changes_per_series"`
}

// PlacedResult is the outcome of EvaluatePlaced.
type PlacedResult struct {
	Config    PlacedConfig    `json:"-"`
	Setting   string          `json:"setting"`
	Cells     []PlacedCell    `json:"cells"`
	Summaries []PlacedSummary `json:"summaries"`
}

// placedSeries draws one series of n points at base 100 with a step of
// relative size step (sign random) before the last after points (after 0:
// no step), with the given noise; the drift noise drifts ±0.05% per point.
func placedSeries(rng *rand.Rand, noise Noise, n, after int, step, cv float64) ([]Point, Direction) {
	sign := 1.0
	if rng.IntN(2) == 0 {
		sign = -1
	}
	drift := 0.0
	if noise == NoiseDrift {
		drift = 0.0005 * sign
	}
	pts := make([]Point, n)
	for i := range n {
		level := 100 * (1 + drift*float64(i))
		if after > 0 && i >= n-after {
			level *= 1 + sign*step
		}
		pts[i] = sample(rng, DesignSeries, noise, level, cv)
		pts[i].Seq = int64(i + 1)
	}
	return pts, direction(sign, true)
}

// EvaluatePlaced runs the placed-step evaluation: series of MinLen–MaxLen
// single results, each with its own noise as the CV. A settled step sits
// anywhere with at least MinBefore points before and 4 or more after; a
// fresh step has exactly 2 points after. Detect judges the whole series
// once (Config.Once, as regress detect does); a hit is a change point of
// the step's direction within Tolerance points of it. Null series (no
// step) of every Nulls kind measure false alerts. Each settled and null
// series is also replayed result by result with the monitor's sequential
// schedule (Once false): was the step raised on some night, did a null
// series alert on some night. It is
// deterministic for a given config and stops with ctx's error when ctx is
// cancelled.
func EvaluatePlaced(ctx context.Context, cfg PlacedConfig) (*PlacedResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Setting.Config.Validate(); err != nil {
		return nil, fmt.Errorf("setting %s: %w", cfg.Setting.Name, err)
	}
	if cfg.MinLen < cfg.MinBefore+4 {
		return nil, fmt.Errorf("placed evaluation: series of %d points cannot hold %d before and 4 after a step", cfg.MinLen, cfg.MinBefore)
	}
	var cells []PlacedCell
	for _, nz := range cfg.Nulls {
		for _, cv := range cfg.CVs {
			cells = append(cells, PlacedCell{Noise: nz, CV: cv})
		}
	}
	for _, step := range cfg.Steps {
		for _, cv := range cfg.CVs {
			cells = append(cells, PlacedCell{Noise: NoiseGaussian, Step: step, CV: cv})
		}
	}
	type job struct{ cell, i int }
	jobs := make(chan job)
	var mu sync.Mutex
	var wg sync.WaitGroup
	// The whole series is judged once; the online replay uses the
	// monitor's sequential schedule.
	whole, seq := cfg.Setting.Config, cfg.Setting.Config
	whole.Once, seq.Once = true, false
	minLen := 2 * max(seq.withDefaults().MinSegment, 2)
	caught := func(pts []Point, after int, want Direction) (hit bool, extra int) {
		cps, _ := Detect(pts, true, whole)
		at := len(pts) - after
		for _, cp := range cps {
			if !hit && cp.Direction == want && abs(cp.Index-at) <= cfg.Tolerance {
				hit = true
				continue
			}
			extra++
		}
		return hit, extra
	}
	for range cfg.Workers {
		wg.Go(func() {
			for j := range jobs {
				c := cells[j.cell] // read-only after setup
				seed := cfg.Seed ^ hashString(fmt.Sprintf("placed/%s/%g/%g", c.Noise, c.Step, c.CV))
				rng := rand.New(rand.NewPCG(seed, uint64(j.i)))
				n := cfg.MinLen + rng.IntN(cfg.MaxLen-cfg.MinLen+1)
				var d PlacedCell
				if c.Step == 0 {
					pts, _ := placedSeries(rng, c.Noise, n, 0, 0, c.CV)
					if cps, _ := Detect(pts, true, whole); len(cps) > 0 {
						d.FalseSeries = 1
					}
					for k := minLen; k <= n; k++ {
						if cps, _ := Detect(pts[:k], true, seq); len(cps) > 0 {
							d.OnlineFalseSeries = 1
							break
						}
					}
				} else {
					after := 4 + rng.IntN(n-cfg.MinBefore-4+1)
					pts, want := placedSeries(rng, c.Noise, n, after, c.Step, c.CV)
					hit, extra := caught(pts, after, want)
					d.ExtraChanges += extra
					if hit {
						d.Settled = 1
					}
					// The monitor's view: replayed result by result, was
					// the step raised on some night?
					at := n - after
				replay:
					for k := max(at+2, minLen); k <= n; k++ {
						cps, _ := Detect(pts[:k], true, seq)
						for _, cp := range cps {
							if cp.Direction == want && abs(cp.Index-at) <= cfg.Tolerance {
								d.OnlineSettled = 1
								break replay
							}
						}
					}
					// Fresh: the same kind of series cut 2 points after a step.
					pts, want = placedSeries(rng, c.Noise, n, 2, c.Step, c.CV)
					hit, extra = caught(pts, 2, want)
					d.ExtraChanges += extra
					if hit {
						d.Fresh = 1
					}
				}
				mu.Lock()
				cc := &cells[j.cell]
				cc.Series++
				cc.Settled += d.Settled
				cc.OnlineSettled += d.OnlineSettled
				cc.Fresh += d.Fresh
				cc.ExtraChanges += d.ExtraChanges
				cc.FalseSeries += d.FalseSeries
				cc.OnlineFalseSeries += d.OnlineFalseSeries
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
	goal := func(c PlacedCell) bool { return c.CV <= 0.03+1e-9 && (c.Step == 0 || c.Step >= 0.05-1e-9) }
	res.Summaries = append(res.Summaries,
		res.summarize("goal: step>=5% cv<=3%", goal),
		res.summarize("whole grid", func(PlacedCell) bool { return true }))
	return res, nil
}

func (r *PlacedResult) summarize(region string, in func(PlacedCell) bool) PlacedSummary {
	s := PlacedSummary{Region: region}
	var settled, osettled, fresh, extra, fs, ofs int
	for _, c := range r.Cells {
		if !in(c) {
			continue
		}
		if c.Step == 0 {
			s.NullSeries += c.Series
			fs += c.FalseSeries
			ofs += c.OnlineFalseSeries
			continue
		}
		s.Series += c.Series
		settled += c.Settled
		osettled += c.OnlineSettled
		fresh += c.Fresh
		extra += c.ExtraChanges
	}
	s.SettledRecall, s.FreshRecall = ratio(settled, s.Series), ratio(fresh, s.Series)
	s.OnlineSettled = ratio(osettled, s.Series)
	s.FalseRate, s.OnlineFalse = ratio(fs, s.NullSeries), ratio(ofs, s.NullSeries)
	s.ExtraPerSeries = ratio(extra, 2*s.Series)
	return s
}

// WriteMarkdown writes the summaries and the per-cell table.
func (r *PlacedResult) WriteMarkdown(w io.Writer) error {
	c := r.Config
	var b strings.Builder
	fmt.Fprintf(&b, "# Placed-step evaluation (setting %s)\n\n%d series per cell of %d–%d single results, each with its own noise as the CV; "+
		"settled steps have >= %d points before and >= 4 after, fresh steps exactly 2 after. Detect judges the whole series once (Config.Once); a hit is a change of the right direction within %d points of the step. "+
		"Online columns replay each series result by result with the monitor's sequential schedule: a settled step counts if some night raised it, a null series is false if some night alerted.\n\n",
		r.Setting, c.Series, c.MinLen, c.MaxLen, c.MinBefore, c.Tolerance)
	b.WriteString("| region | step series | settled recall (>=4 after) | fresh recall (2 after) | extra changes / series | null series | false alerts | online settled recall | online false alerts |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Summaries {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %.3f | %d | %s | %s | %s |\n", s.Region, s.Series, pct(s.SettledRecall), pct(s.FreshRecall), s.ExtraPerSeries, s.NullSeries, pct(s.FalseRate), pct(s.OnlineSettled), pct(s.OnlineFalse))
	}
	b.WriteString("\n| noise | step | CV | series | settled | fresh | false | online settled | online false |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.Cells {
		if x.Step == 0 {
			fmt.Fprintf(&b, "| %s | null | %g%% | %d | | | %s | | %s |\n", x.Noise, 100*x.CV, x.Series, pct(ratio(x.FalseSeries, x.Series)), pct(ratio(x.OnlineFalseSeries, x.Series)))
			continue
		}
		fmt.Fprintf(&b, "| %s | %.3g%% | %g%% | %d | %s | %s | | %s | |\n", x.Noise, 100*x.Step, 100*x.CV, x.Series, pct(ratio(x.Settled, x.Series)), pct(ratio(x.Fresh, x.Series)), pct(ratio(x.OnlineSettled, x.Series)))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
