package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/regress"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/spf13/cobra"
)

func init() { register("regress", newRegressCmd) }

func newRegressCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "regress",
		Short: "Detect performance regressions offline and evaluate the detector",
		Long: `regress runs lesfarm's regression detector outside the coordinator:
on your own CSV data (detect) or on synthetic histories with planted steps
(eval), which is how the detector's settings were chosen.

The coordinator runs the same detector on every new result. 'policy' sets a
suite's webhook and confirmation rerun; 'alerts' and 'triage' list and
triage the alert groups in its database. See docs/regressions.md.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newRegressDetectCmd(env), newRegressEvalCmd(env), newRegressPolicyCmd(env), newRegressAlertsCmd(env), newRegressTriageCmd(env))
	return cmd
}

// regressionExit returns an ExitError with ExitRegression when rep holds a
// regression, naming how many and in which series.
func regressionExit(rep *regress.Report) error {
	var names []string
	for _, cp := range rep.ChangePoints {
		if cp.Direction == regress.Regression && !slices.Contains(names, cp.Series) {
			names = append(names, cp.Series)
		}
	}
	if len(names) == 0 {
		return nil
	}
	return &ExitError{Code: ExitRegression, Msg: fmt.Sprintf("regression found in %d series: %s", len(names), strings.Join(names, ", "))}
}

// detectorFlags registers the detector's tuning flags on cmd.
func detectorFlags(cmd *cobra.Command, cfg *regress.Config) {
	f := cmd.Flags()
	f.StringVar((*string)(&cfg.Method), "method", "pelt", "change-point search: pelt or edivisive")
	f.Float64Var(&cfg.Alpha, "alpha", regress.DefaultAlpha, "significance level of the t-test between segments")
	f.Float64Var(&cfg.MWAlpha, "mw-alpha", 0.05, "significance level of the Mann-Whitney guard (negative disables it)")
	f.Float64Var(&cfg.MinEffect, "min-effect", 0.02, "minimum relative change to report (0.02 = 2%)")
	f.IntVar(&cfg.MinSegment, "min-segment", 2, "minimum points on each side of a change")
	f.Float64Var(&cfg.Penalty, "penalty", 1, "PELT penalty factor (times noise variance times ln n)")
	f.IntVar(&cfg.Window, "window", 120, "only the most recent N points of each series are analysed")
	f.Float64Var(&cfg.OutlierSigmas, "outlier-sigmas", regress.DefaultOutlierSigmas, "ignore isolated points this many robust sigmas from both neighbours (negative disables)")
	f.Float64Var(&cfg.DriftAlpha, "drift-alpha", 0.01, "keep a change only if it is significant at this level as a step on top of a linear trend (negative disables the drift check)")
	f.Float64Var(&cfg.RecentShiftAlpha, "recent-shift-alpha", 0, "when positive, judge changes with at most 4 results after them by a one-sided test against the minimum effect at this level")
	f.Float64Var(&cfg.MinLocationMass, "min-location-mass", 0, "when positive, withhold a change unless this much of its location's posterior lies within one point of it (0 disables)")
	f.BoolVar(&cfg.FixedAlpha, "fixed-alpha", false, "test old change points at --alpha too (default: stricter as more points follow them)")
	f.IntVar(&cfg.PoolDF, "pool-df", regress.DefaultPoolDF, "most degrees of freedom a noise level pooled from sibling series weighs (negative: judge each series on its own noise)")
}

func newRegressDetectCmd(env *Env) *cobra.Command {
	var (
		cfg          regress.Config
		input        string
		format       string
		metric       string
		higherBetter string
		sequential   bool
		databaseURL  string
		poolSiblings int
	)
	cmd := &cobra.Command{
		Use:   "detect --input FILE.csv [--format json|md] [--metric NAME | --higher-is-better=false]",
		Short: "Find change points in series from a CSV file",
		Long: `detect reads series from a CSV file and prints their confirmed change points.

Input columns: series,seq,value and optionally stddev,n (the standard
deviation and count of the repetitions behind each value). A header row is
optional; without one the columns are taken in that order. Points are
ordered by seq within each series. Use --input - for standard input.

A change point is found by PELT (or E-divisive), then confirmed by a t-test
between the segments that weights each point by its repetitions, a
Mann-Whitney test, a minimum relative effect and a minimum segment length.
The detector is the coordinator's: a series named by its key
(suite/config/metric/device/os/lineage[/emulated]) is judged with the noise
level pooled from its siblings — the other series of the same metric,
device model, OS and emulation — as the monitor does: the input's own
siblings first, then, with --database-url, those stored in the
coordinator's database (the most recently created, up to --pool-siblings
in all). A series named otherwise is judged on its own noise.

Each series is judged once as a whole; --sequential uses the monitor's
schedule instead, which is stricter for old change points because the
monitor re-tests every position after every new result.

Direction: by default higher values are better (throughput), so a drop is a
"regression". Give --metric to use a known metric's direction, or
--higher-is-better=false for metrics where lower is better. Known metrics:
` + regress.KnownMetrics() + `
Exit status: 0 when no regression is found (improvements only, or no
change), 3 when at least one change point is a regression, so CI can fail
the build; 2 for bad flags and 1 for other errors.

Output (json): {"change_points":[{"series":..,"seq":..,"direction":"regression|improvement",
"relative_change":..,"p_value":..,"before_mean":..,"after_mean":..,...}]}`,
		Example: `  lesfarm regress detect --input decode.csv
  lesfarm regress detect --input ttft.csv --metric ttft_ms --format md`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if input == "" {
				return usagef("regress detect: --input FILE.csv is required (use - for stdin)")
			}
			if format != "json" && format != "md" {
				return usagef("regress detect: --format %q: want json or md", format)
			}
			if err := cfg.Validate(); err != nil {
				return usagef("regress detect: %v", err)
			}
			cfg.Once = !sequential
			higher := true
			if metric != "" {
				h, known := regress.HigherIsBetter(metric)
				if !known && higherBetter == "" {
					return usagef("regress detect: unknown metric %q: give --higher-is-better=true|false", metric)
				}
				higher = h
			}
			switch strings.ToLower(higherBetter) {
			case "":
			case "true", "1", "yes":
				higher = true
			case "false", "0", "no":
				higher = false
			default:
				return usagef("regress detect: --higher-is-better %q: want true or false", higherBetter)
			}
			var r io.Reader = env.Stdin
			if input != "-" {
				f, err := os.Open(input)
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			series, err := regress.ParseCSV(r)
			if err != nil {
				return fmt.Errorf("%s: %w", input, err)
			}
			pool := regress.Pool{Max: poolSiblings}
			if databaseURL != "" && poolSiblings >= 0 {
				st, err := store.Open(env.Ctx, databaseURL, store.Config{MaxConns: 2})
				if err != nil {
					return fmt.Errorf("regress detect: --database-url: %w", err)
				}
				defer st.Close()
				pool.Stored = storedSiblings(env.Ctx, st, cfg.Window)
			}
			rep, err := regress.DetectAll(series, higher, cfg, pool)
			if err != nil {
				return err
			}
			if format == "md" {
				err = rep.WriteMarkdown(env.Stdout)
			} else {
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				err = enc.Encode(rep)
			}
			if err != nil {
				return err
			}
			return regressionExit(rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&input, "input", "", "CSV file with columns series,seq,value[,stddev,n] (- for stdin)")
	f.StringVar(&format, "format", "json", "output format: json or md")
	f.StringVar(&metric, "metric", "", "metric name, which sets the direction (e.g. decode_tps, ttft_ms)")
	f.StringVar(&higherBetter, "higher-is-better", "", "true or false: overrides the direction (default true)")
	f.Lookup("higher-is-better").NoOptDefVal = "true"
	f.StringVar(&databaseURL, "database-url", "", "the coordinator's PostgreSQL URL: pool each series' noise with its sibling series stored there too (read only)")
	f.IntVar(&poolSiblings, "pool-siblings", regress.DefaultPoolSiblings, "most sibling series (same metric, device model, OS, emulation) whose noise a series named suite/config/metric/device/os/lineage pools, the input's first (negative: each series on its own noise)")
	f.BoolVar(&sequential, "sequential", false, "judge the series as the coordinator's monitor does, re-tested after every result (stricter for old change points); default: the whole series is judged once")
	detectorFlags(cmd, &cfg)
	return cmd
}

// storedSiblings returns a regress.Pool's Stored: the siblings of a key in
// the coordinator's database (store.RegressSiblingsOf), each with the
// detector's window of points.
func storedSiblings(ctx context.Context, st *store.Store, window int) func(regress.SeriesKey, []regress.SeriesKey, int) ([][]regress.Point, error) {
	return func(key regress.SeriesKey, skip []regress.SeriesKey, n int) ([][]regress.Point, error) {
		p := &store.RegressSiblingsParams{Of: storeSeries(key), MaxSeries: n, Limit: cmp.Or(window, 120)}
		for _, k := range skip {
			p.Skip = append(p.Skip, storeSeries(k))
		}
		sib, err := st.RegressSiblingsOf(ctx, p)
		if err != nil {
			return nil, err
		}
		out := make([][]regress.Point, 0, len(sib))
		for _, s := range sib {
			pts := make([]regress.Point, len(s.Points))
			for i, q := range s.Points {
				pts[i] = regress.Point{Seq: q.Seq, Value: q.Value, Stddev: q.Stddev, N: q.N}
			}
			out = append(out, pts)
		}
		return out, nil
	}
}

func storeSeries(k regress.SeriesKey) store.RegressSeries {
	return store.RegressSeries{Suite: k.Suite, Config: k.Config, Metric: k.Metric, DeviceModel: k.DeviceModel,
		OSMajor: k.OSMajor, Lineage: k.Lineage, Emulated: k.Emulated}
}

func newRegressEvalCmd(env *Env) *cobra.Command {
	var (
		format    string
		histories int
		seed      uint64
		settings  []string
		noises    []string
		designs   []string
		custom    regress.Config
		confirm   bool
		heldOut   bool
		siblings  int
		spread    float64
	)
	cmd := &cobra.Command{
		Use:   "eval [--format md|json] [--histories N] [--setting NAME...]",
		Short: "Evaluate detector settings on synthetic histories with planted steps",
		Long: `eval generates many synthetic result histories, deterministic for a seed,
with planted steps of 2, 3, 5 and 10% at noise CV 1–5% and with five noise
kinds (gaussian, outliers, bimodal, slow drift, gaps), plus null histories
without a step. Each history is replayed night by night as the coordinator
would: after every new result the detector runs on the history so far, and
each new change point becomes an alert.

It reports, per detector setting: recall once 2, 4 and 8 results exist after
the step, mean detection delay (in runs), and false alerts (alerts at the
wrong place, direction, or duplicates, and every alert on a null history)
as a share of all alerts. The goal region is steps >= 5% at CV <= 3%.

Designs say how each result is drawn: n1 (one repetition, no stddev),
n5-cv-per-rep (5 repetitions, the grid's CV is one repetition's) and
n5-cv-per-result (5 repetitions, the CV is that of their mean: the harder
reading). Every design is evaluated unless --design picks some.

--design series is a different evaluation: each point is one result whose
own noise is the CV (1–5%), steps of 3–10% placed anywhere (>= 8 points
before), in families: plain, outliers, heavy tails, bimodal, a step on a
drift, short (12–20 points) and long (100–120) series, and null families
(the same noises and lengths without a step, slow linear and accelerating
drifts). Detect runs on the whole series. A change counts only within one
point of the step; further off it is a false alert and a miss. It reports
recall for settled steps (4–40 points after) and fresh ones (exactly 2
after), the share of detected steps placed within one point, how often
the alert's location range holds the step, and false alerts, each rate
with its Wilson 95% bound. --held-out draws other seeds and series
lengths (24–72, short 10–24, long 80–120): report figures on it, tune on
the default run. --histories is the number of series per cell.

Settings: the built-in ones (` + settingNames() + `)
and "custom", built from the detector flags.`,
		Example: `  lesfarm regress eval --format md
  lesfarm regress eval --histories 400 --setting pelt-default --setting edivisive
  lesfarm regress eval --setting custom --alpha 0.02 --noise gaussian`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "json" && format != "md" {
				return usagef("regress eval: --format %q: want json or md", format)
			}
			if histories < 1 || histories > 100000 {
				return usagef("regress eval: --histories %d: want 1..100000", histories)
			}
			ec := regress.EvalConfig{Histories: histories, Seed: seed}
			all := map[string]regress.Setting{"custom": {Name: "custom", Config: custom, ConfirmRerun: confirm}}
			for _, s := range regress.DefaultSettings() {
				all[s.Name] = s
			}
			for _, name := range settings {
				s, ok := all[name]
				if !ok {
					return usagef("regress eval: unknown setting %q (want %s or custom)", name, settingNames())
				}
				ec.Settings = append(ec.Settings, s)
			}
			if slices.Contains(designs, regress.DesignSeries.Name) {
				if len(designs) > 1 {
					return usagef("regress eval: --design series is its own evaluation; give it alone")
				}
				return evalPlaced(env, format, regress.PlacedConfig{Series: histories, Seed: seed, Siblings: siblings, SiblingSpread: spread}, heldOut, ec.Settings)
			}
			for _, d := range designs {
				ok := false
				for _, k := range regress.AllDesigns {
					if k.Name == d {
						ec.Designs, ok = append(ec.Designs, k), true
					}
				}
				if !ok {
					return usagef("regress eval: unknown design %q (want %s)", d, designNames())
				}
			}
			for _, n := range noises {
				ok := false
				for _, k := range regress.AllNoises {
					ok = ok || string(k) == n
				}
				if !ok {
					return usagef("regress eval: unknown noise %q", n)
				}
				ec.Noises = append(ec.Noises, regress.Noise(n))
			}
			res, err := regress.Evaluate(env.Ctx, ec)
			if err != nil {
				return err
			}
			res.SortCells()
			if format == "md" {
				return res.WriteMarkdown(env.Stdout)
			}
			enc := json.NewEncoder(env.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&format, "format", "md", "output format: md or json")
	f.IntVar(&histories, "histories", 100, "synthetic histories per grid cell")
	f.Uint64Var(&seed, "seed", 1, "generator seed (same seed, same histories)")
	f.StringArrayVar(&settings, "setting", nil, "detector setting to evaluate (repeatable; default: all built-in)")
	f.StringArrayVar(&noises, "noise", nil, "noise kind to include (repeatable; default: all)")
	f.StringArrayVar(&designs, "design", nil, "how results and repetitions are drawn, repeatable ("+designNames()+"; default: all)")
	f.BoolVar(&confirm, "confirm-rerun", false, "custom setting: require a confirmation rerun before alerting")
	f.BoolVar(&heldOut, "held-out", false, "--design series: the held-out run (other seeds and series lengths than the tuning run)")
	f.Float64Var(&spread, "sibling-spread", 0.15, "--design series: log-normal spread of a sibling's CV around the scored series' (negative: the same CV)")
	f.IntVar(&siblings, "siblings", 8, "--design series: sibling series drawn beside each scored one, whose noise the detector pools (-1: none, each series judged on its own noise)")
	detectorFlags(cmd, &custom)
	return cmd
}

// evalPlaced runs the placed-step evaluation base (its held-out run with
// heldOut) for each setting (default: the default configuration) and
// prints it.
func evalPlaced(env *Env, format string, base regress.PlacedConfig, heldOut bool, settings []regress.Setting) error {
	if len(settings) == 0 {
		settings = []regress.Setting{{Name: "pelt-default"}}
	}
	var all []*regress.PlacedResult
	for _, set := range settings {
		pc := base
		pc.Setting = set
		if heldOut {
			pc = pc.HeldOut()
		}
		res, err := regress.EvaluatePlaced(env.Ctx, pc)
		if err != nil {
			return err
		}
		if format == "md" {
			if err := res.WriteMarkdown(env.Stdout); err != nil {
				return err
			}
			fmt.Fprintln(env.Stdout)
		}
		all = append(all, res)
	}
	if format == "md" {
		return nil
	}
	enc := json.NewEncoder(env.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(all)
}

func designNames() string {
	names := []string{regress.DesignSeries.Name}
	for _, d := range regress.AllDesigns {
		names = append(names, d.Name)
	}
	return strings.Join(names, ", ")
}

func settingNames() string {
	var names []string
	for _, s := range regress.DefaultSettings() {
		names = append(names, s.Name)
	}
	return strings.Join(names, ", ")
}

// alertRange formats where an alert's change happened, as a suffix for a
// line naming the alert: "; changed after ci-41, by ci-43" (the last
// surely-good build, and the newest build that may be the first bad one),
// with seqs where the builds are unknown, or "" without a range.
func alertRange(a *api.Alert) string {
	if a.FirstBadSeq == 0 {
		return ""
	}
	good, bad := a.LastGoodBuild, a.FirstBadBuild
	if good == "" && a.LastGoodSeq != 0 {
		good = fmt.Sprintf("seq %d", a.LastGoodSeq)
	}
	if bad == "" {
		bad = fmt.Sprintf("seq %d", a.FirstBadSeq)
	}
	if good == "" {
		return "; changed by " + bad
	}
	if good == bad {
		return ""
	}
	return fmt.Sprintf("; changed after %s, by %s", good, bad)
}
