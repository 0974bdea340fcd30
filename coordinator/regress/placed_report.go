package regress

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// PlacedSummary aggregates a region of the placed-step evaluation. Every
// rate comes with its Wilson 95% bound on the unfavourable side: the
// lower bound of a recall, the upper bound of a false-alert rate.
type PlacedSummary struct {
	Region        string  `json:"region"`
	Series        int     `json:"series"` // step series per kind (settled, fresh)
	SettledRecall float64 `json:"settled_recall"`
	SettledLow    float64 `json:"settled_recall_low"`
	FreshRecall   float64 `json:"fresh_recall"`
	FreshLow      float64 `json:"fresh_recall_low"`
	// Placed is the share of detected steps (a change of the step's
	// direction anywhere) found within Tolerance.
	Placed    float64 `json:"placed"`
	PlacedLow float64 `json:"placed_low"`
	// Coverage: share of detected steps whose location range holds the
	// step; MeanRange: the range's mean width in points.
	Coverage  float64 `json:"range_coverage"`
	MeanRange float64 `json:"mean_range"`
	// FalseShare is false alerts over all alerts: the region's step
	// series (misplaced, wrong direction, extra changes) plus, for a
	// region with steps, null series counted once per step series at
	// the null families' average rate (NullFalse).
	FalseShare float64 `json:"false_share"`
	FalseHigh  float64 `json:"false_share_high"`
	// SettledUnfound and SettledMisplaced split the settled misses:
	// shares of the step series with no change of the step's direction,
	// and with the nearest one placed further than Tolerance off.
	SettledUnfound   float64 `json:"settled_unfound"`
	SettledMisplaced float64 `json:"settled_misplaced"`
	// SettledCeiling is the settled recall of the best rule knowing all
	// but the step's place (an upper bound, no significance needed) with
	// its upper Wilson bound; SettledOracle that of a detector knowing
	// the noise's standard deviation at this setting's level (see
	// placed_ceiling.go).
	SettledCeiling     float64 `json:"settled_ceiling"`
	SettledCeilingHigh float64 `json:"settled_ceiling_high"`
	SettledOracle      float64 `json:"settled_oracle"`
	// SettledInsignificant is the share of settled steps whose own test
	// fails its level at the true place; SettledReachable the share
	// significant there that the best rule knowing all but the place
	// also places right, with its upper Wilson bound: about the most a
	// detector testing at this level can find (see placed_ceiling.go).
	SettledInsignificant float64 `json:"settled_insignificant"`
	SettledReachable     float64 `json:"settled_reachable"`
	SettledReachableHigh float64 `json:"settled_reachable_high"`
	NullSeries           int     `json:"null_series"`
	NullFalse            float64 `json:"null_false_rate"` // null series with any change
	NullHigh             float64 `json:"null_false_rate_high"`
}

// PlacedResult is the outcome of EvaluatePlaced.
type PlacedResult struct {
	Config    PlacedConfig    `json:"-"`
	Setting   string          `json:"setting"`
	Seed      uint64          `json:"seed"`
	Cells     []PlacedCell    `json:"cells"`
	Summaries []PlacedSummary `json:"summaries"` // the goal region, the whole grid, then each family
}

// GoalRegion reports whether a step cell is in the goal region: steps of
// at least 5% at a CV of at most 3% (issue 16's region; the whole grid
// goes to CV 5%).
func GoalRegion(step, cv float64) bool {
	return step >= 0.05-1e-9 && cv <= 0.03+1e-9
}

func (r *PlacedResult) summarizeAll() {
	r.Seed = r.Config.Seed
	// Null families count in the goal region at every CV (phones show
	// 1–5%).
	r.Summaries = append(r.Summaries,
		r.summarize("goal region, all families", func(c PlacedCell) bool { return c.Step == 0 || GoalRegion(c.Step, c.CV) }),
		r.summarize("whole grid", func(PlacedCell) bool { return true }))
	for _, f := range r.Config.Families {
		name := f.Name
		region := name + " (goal region)"
		if !f.Step {
			region = name
		}
		r.Summaries = append(r.Summaries, r.summarize(region, func(c PlacedCell) bool {
			return c.Family == name && (c.Step == 0 || GoalRegion(c.Step, c.CV))
		}))
	}
}

func (r *PlacedResult) summarize(region string, in func(PlacedCell) bool) PlacedSummary {
	s := PlacedSummary{Region: region}
	var settled, fresh, detected, placed, covered, rangeSum, stepFalse, stepAlerts, nullSeries, nullAlerts, nullTotal int
	var unfound, misplaced, ceiling, oracle, insignificant, reachable int
	for _, c := range r.Cells {
		if !in(c) {
			continue
		}
		if c.Step == 0 {
			s.NullSeries += c.Series
			nullSeries += c.NullSeries
			nullAlerts += c.NullAlerts
			nullTotal += c.TotalAlerts
			continue
		}
		s.Series += c.Series
		settled += c.Settled
		fresh += c.Fresh
		detected += c.Detected
		placed += c.Placed
		covered += c.Covered
		rangeSum += c.RangeSum
		stepFalse += c.StepFalse
		unfound += c.SettledUnfound
		misplaced += c.SettledMisplaced
		ceiling += c.Ceiling
		oracle += c.Oracle
		insignificant += c.Insignificant
		reachable += c.Reachable
		stepAlerts += c.TotalAlerts
	}
	s.SettledRecall, s.SettledLow = ratio(settled, s.Series), wilson(settled, s.Series, false)
	s.FreshRecall, s.FreshLow = ratio(fresh, s.Series), wilson(fresh, s.Series, false)
	s.SettledUnfound, s.SettledMisplaced = ratio(unfound, s.Series), ratio(misplaced, s.Series)
	s.SettledCeiling, s.SettledCeilingHigh = ratio(ceiling, s.Series), wilson(ceiling, s.Series, true)
	s.SettledOracle = ratio(oracle, s.Series)
	s.SettledInsignificant = ratio(insignificant, s.Series)
	s.SettledReachable, s.SettledReachableHigh = ratio(reachable, s.Series), wilson(reachable, s.Series, true)
	s.Placed, s.PlacedLow = ratio(placed, detected), wilson(placed, detected, false)
	s.Coverage, s.MeanRange = ratio(covered, detected), ratio(rangeSum, detected)
	s.NullFalse, s.NullHigh = ratio(nullSeries, s.NullSeries), wilson(nullSeries, s.NullSeries, true)
	// One null series per step series (settled and fresh), at the null
	// families' average number of alerts per series.
	falseN, all := float64(stepFalse), float64(stepAlerts)
	if s.NullSeries > 0 {
		k := float64(2*s.Series) / float64(s.NullSeries)
		if s.Series == 0 {
			k = 1
		}
		falseN += float64(k * float64(nullAlerts))
		all += float64(k * float64(nullTotal))
	}
	if all > 0 {
		s.FalseShare = falseN / all
		s.FalseHigh = wilsonF(falseN, all, true)
	}
	return s
}

// wilson returns the Wilson score 95% bound of k successes in n trials:
// the upper bound with upper, else the lower (0 and 1 for no trials).
func wilson(k, n int, upper bool) float64 {
	return wilsonF(float64(k), float64(n), upper)
}

func wilsonF(k, n float64, upper bool) float64 {
	if n <= 0 {
		if upper {
			return 1
		}
		return 0
	}
	const z = 1.959964
	p := k / n
	mid := p + z*z/(2*n)
	half := float64(z * math.Sqrt(p*(1-p)/n+z*z/(4*n*n)))
	den := 1 + z*z/n
	if upper {
		return math.Min(1, (mid+half)/den)
	}
	return math.Max(0, (mid-half)/den)
}

// WriteMarkdown writes the summaries and the per-cell table.
func (r *PlacedResult) WriteMarkdown(w io.Writer) error {
	c := r.Config
	var b strings.Builder
	fmt.Fprintf(&b, "# Placed-step evaluation (setting %s, seed %d)\n\n%d series per cell; usual series %d–%d points, short %d–%d, long %d–%d, single results with their own noise as the CV. "+
		"Settled steps have >= %d points before (half a short series at most) and 4–%d after, fresh steps exactly 2 after. Detect judges each series once (Config.Once). "+
		"A hit is a change of the step's direction within %d point(s) of it; every other change is a false alert, so a change placed further off is a false alert **and** a miss. "+
		"Rates in brackets are Wilson 95%% bounds: the lower bound of a recall, the upper bound of a false rate. "+
		"Goal region: steps >= 5%% at CV <= 3%%; null families at every CV (1–5%%).\n\n",
		r.Setting, r.Seed, c.Series, c.MinLen, c.MaxLen, c.ShortLen[0], c.ShortLen[1], c.LongLen[0], c.LongLen[1], c.MinBefore, c.MaxAfter, c.Tolerance)
	if c.Siblings > 0 {
		fmt.Fprintf(&b, "Each series has %d sibling series (same family and builds, CV spread %.2g, half with a step of their own) whose noise the detector pools (DetectPooled, at most %d degrees of freedom of it).\n\n",
			c.Siblings, c.SiblingSpread, c.Setting.Config.withDefaults().PoolDF)
	} else {
		b.WriteString("No sibling series: each series is judged on its own noise.\n\n")
	}
	b.WriteString("| region | step series | settled recall | fresh recall | placed within tolerance | range holds step | mean range | false alerts / alerts | null series | null series alerting |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Summaries {
		if s.Series == 0 {
			fmt.Fprintf(&b, "| %s | | | | | | | | %d | %s [%s] |\n", s.Region, s.NullSeries, pct(s.NullFalse), pct(s.NullHigh))
			continue
		}
		null := ""
		if s.NullSeries > 0 {
			null = fmt.Sprintf("%s [%s]", pct(s.NullFalse), pct(s.NullHigh))
		}
		fmt.Fprintf(&b, "| %s | %d | %s [%s] | %s [%s] | %s [%s] | %s | %.1f | %s [%s] | %d | %s |\n", s.Region, s.Series,
			pct(s.SettledRecall), pct(s.SettledLow), pct(s.FreshRecall), pct(s.FreshLow), pct(s.Placed), pct(s.PlacedLow),
			pct(s.Coverage), s.MeanRange, pct(s.FalseShare), pct(s.FalseHigh), s.NullSeries, null)
	}
	b.WriteString("\nSettled misses and their limits: the share of settled steps with no change of the step's direction (unfound) or with the nearest one further off (misplaced); " +
		"the share whose step the detector's own test does not pass at its level even at its true place, within the tolerance (insignificant); " +
		"the share significant there that the best rule knowing everything but the step's place also places right (reachable, with its upper bound: about the most a detector testing at this level finds); " +
		"the recall of a detector that knows the noise's standard deviation, places by the Bayes rule and tests the step near its true place at this setting's level (oracle, a reference for Gaussian noise); " +
		"and the recall of the Bayes rule knowing everything but the step's place, without any test (ceiling, with its upper bound: no detector exceeds it).\n\n" +
		"| region | settled recall | unfound | misplaced | insignificant at its place | reachable at this level | oracle, σ known | ceiling |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Summaries {
		if s.Series > 0 {
			fmt.Fprintf(&b, "| %s | %s [%s] | %s | %s | %s | %s [%s] | %s | %s [%s] |\n", s.Region, pct(s.SettledRecall), pct(s.SettledLow),
				pct(s.SettledUnfound), pct(s.SettledMisplaced), pct(s.SettledInsignificant), pct(s.SettledReachable), pct(s.SettledReachableHigh),
				pct(s.SettledOracle), pct(s.SettledCeiling), pct(s.SettledCeilingHigh))
		}
	}
	b.WriteString("\n| family | step | CV | series | settled | fresh | placed | false alerts (step series) / null series alerting |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.Cells {
		if x.Step == 0 {
			fmt.Fprintf(&b, "| %s | null | %g%% | %d | | | | %s |\n", x.Family, 100*x.CV, x.Series, pct(ratio(x.NullSeries, x.Series)))
			continue
		}
		fmt.Fprintf(&b, "| %s | %.3g%% | %g%% | %d | %s | %s | %s | %d |\n", x.Family, 100*x.Step, 100*x.CV, x.Series,
			pct(ratio(x.Settled, x.Series)), pct(ratio(x.Fresh, x.Series)), pct(ratio(x.Placed, x.Detected)), x.StepFalse)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
