package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/coordinator/api/client"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

func init() { register("run", newRunCmd) }

func newRunCmd(env *Env) *cobra.Command {
	var sf serverFlags
	var suite, devices, build, gitSHA, lineage, override, baseline string
	var minEffect float64
	var maxRounds int
	var wait, fanout, jsonOut bool
	var junitPath, summaryPath, format, modelFile string
	var timeout, alertGrace time.Duration
	cmd := &cobra.Command{
		Use:   "run --suite S --build B [--devices SELECTOR] [--fanout] [--lineage L] [--baseline A|auto] [--wait]",
		Short: "Trigger a benchmark run through the REST API (for CI)",
		Long: `run asks a coordinator to run suite S for build B on the devices matching
SELECTOR, and prints the trigger and run ids.

SELECTOR is comma-separated key=value pairs: platform, model, min_ram and
emulated select devices; any other key is a label to match, e.g.
  --devices 'platform=android,model=Pixel 8,pool=ci'
Use --devices all (or omit it) to keep the suite's own selector. With
--fanout, one run goes to every matching online device; otherwise one run
goes to the first free matching device.

--lineage names the branch the build belongs to (default main). The
regression detector keeps one series per lineage, so builds of a release
branch are compared with that branch's earlier builds, never with main's:
  --lineage release-3
A lineage is letters, digits, '.', '_' and '-' (write release/3 as
release-3). With --wait, only regression alerts of this lineage count.

With --wait it streams progress until every run finishes, then waits up to
--alert-grace for the regression detector, and exits non-zero when a run
did not succeed or a regression alert was raised for this build:
  exit 0  all runs succeeded, no regression alert
  exit 1  a run failed (or was cancelled, or timed out), a regression alert
          fired, or the coordinator could not be reached
  exit 2  bad flags, or the build is not registered (push it first:
          lesfarm build push)

While it waits it also reports regression alerts raised meanwhile on
other builds of the lineage (the detector places a change at the build
where it happened, usually an earlier one); those are printed and put in
the reports but do not change the exit code.

A/B gate: --baseline A compares build B with build A of the same lineage
(docs/ab.md). Both run the suite's configs on every matching online
device that can run both, interleaved in rounds (one run of each per
device per round, ABBA order, so drift hits both sides), and each device
× config × metric (decode_tps, prefill_tps, ttft_ms) is decided like
Pinpoint: p = min(Kolmogorov–Smirnov p, Mann–Whitney p); p ≤ 0.01 and a
change of at least --min-effect is a change; p above a threshold set by
the effect size and the sample count is the same; in between, rounds are
added up to --max-rounds. --baseline auto takes the newest earlier build
of the lineage with results in the suite. With --wait:
  exit 0  same, improvement, or undecided when the budget ran out
  exit 1  a regression (config, metric, change and its interval are
          printed), or a build failed
  exit 2  the baseline is unknown or of another lineage

Reports for CI (with --wait; FILE - means standard output):
  --junit FILE    JUnit XML: one test case per run × config (a failure for
                  a run that did not succeed or an invalid result) and one
                  failing case per regression alert
  --format json   the report as JSON on standard output (progress lines go
                  to standard error): runs, results, the previous build's
                  results on each device, alerts, ok (--json before)
  --summary FILE  markdown for a pull-request comment: the ladder per
                  device with deltas against the previous build of the
                  lineage on that device, and the alerts` + runModelHelp,
		Example: `  lesfarm run --suite smoke --devices platform=android --build ci-4812 --wait
  lesfarm run --suite les-ladder --devices 'model=Pixel 8' --fanout --build $(git rev-parse --short HEAD) \
      --git-sha $(git rev-parse HEAD) --override '{"repetitions": 5}' --wait --server https://farm:8080
  lesfarm run --suite smoke --fanout --build rc-17 --lineage release-3 --wait
  lesfarm run --suite les-ladder --build ci-4812 --baseline auto --wait --junit report.xml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if suite == "" {
				return usagef("run: --suite is required")
			}
			if build == "" {
				return usagef("run: --build is required")
			}
			if jsonOut {
				format = "json" // the deprecated --json
			}
			if format != "text" && format != "json" {
				return usagef("run: --format %q: use text or json", format)
			}
			jsonOut = format == "json"
			if !wait && (jsonOut || junitPath != "" || summaryPath != "") {
				return usagef("run: --format json, --junit and --summary need --wait")
			}
			if baseline == "" && (minEffect != 0 || maxRounds != 0) {
				return usagef("run: --min-effect and --max-rounds need --baseline")
			}
			if minEffect < 0 || minEffect >= 1 || maxRounds < 0 {
				return usagef("run: --min-effect must be in [0, 1) and --max-rounds ≥ 0")
			}
			out := env.Stdout
			if jsonOut {
				out = env.Stderr // stdout carries the JSON report
			}
			if lineage == "" {
				lineage = store.DefaultLineage
			}
			if err := store.ValidateLineage(lineage); err != nil {
				return usagef("run: --lineage: %s", strings.TrimPrefix(err.Error(), "store: "))
			}
			sel, err := client.ParseSelector(devices)
			if err != nil {
				return usagef("run: %v", err)
			}
			req := &client.TriggerRequest{Suite: suite, Build: build, GitSHA: gitSHA, Lineage: lineage, Devices: sel, Fanout: fanout}
			if override != "" {
				raw := []byte(override)
				if path, ok := strings.CutPrefix(override, "@"); ok {
					if raw, err = os.ReadFile(path); err != nil {
						return usagef("run: --override: %v", err)
					}
				}
				if !json.Valid(raw) {
					return usagef("run: --override is not valid JSON")
				}
				req.Override = raw
			}
			c, err := sf.client()
			if err != nil {
				return err
			}
			ctx := env.Ctx
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			if modelFile != "" {
				if req.Override, err = modelOverride(ctx, env, c, modelFile, req.Override); err != nil {
					return err
				}
			}
			if baseline != "" {
				return runAB(ctx, env, c, req, &abOptions{baseline: baseline, minEffect: minEffect, maxRounds: maxRounds, wait: wait,
					poll: time.Second, junit: junitPath, summary: summaryPath, json: jsonOut}, out) // run_ab.go
			}
			start := time.Now()
			set, err := c.TriggerRuns(ctx, req)
			if err != nil {
				if why, ok := unregisteredBuild(err); ok {
					return &ExitError{Code: 2, Msg: "run: " + why}
				}
				return fmt.Errorf("run: %w", err)
			}
			fmt.Fprintf(out, "trigger %d: %d run(s) of %s for build %s (lineage %s):", set.Trigger.ID, len(set.Runs), set.Trigger.Suite, set.Trigger.Build, cmp.Or(set.Trigger.Lineage, lineage))
			for _, r := range set.Runs {
				fmt.Fprintf(out, " %d", r.ID)
			}
			fmt.Fprintln(out)
			if !wait {
				return nil
			}
			// The report after the wait (runs, results, alerts) rides out
			// a coordinator restart as the wait itself does.
			c.ReadOutage = 2 * time.Minute
			done, err := c.FollowTrigger(ctx, set.Trigger.ID, func(ev client.RunEvent) {
				line := fmt.Sprintf("run %d: %s", ev.RunID, ev.State)
				if ev.DeviceID != "" {
					line += " on " + ev.DeviceID
				}
				if ev.Progress > 0 && ev.State == "running" {
					line += fmt.Sprintf(" %.0f%%", ev.Progress*100)
				}
				if ev.ProgressMessage != "" {
					line += " " + ev.ProgressMessage
				}
				if ev.Attempts > 1 {
					line += fmt.Sprintf(" (attempt %d)", ev.Attempts)
				}
				if ev.State == "queued" && ev.WaitingReason != "" {
					line += " — " + ev.WaitingReason // why it waits: no device online, none can run it, all busy
				}
				if ev.Error != "" {
					line += ": " + ev.Error
				}
				fmt.Fprintf(out, "%s %s\n", time.Now().UTC().Format("15:04:05"), line)
			})
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("run: runs not finished after --timeout %v", timeout)
				}
				return fmt.Errorf("run: %w", err)
			}
			fmt.Fprintf(out, "finished: %s\n", stateSummary(done.States))
			rep := &runReport{Trigger: set.Trigger.ID, Suite: set.Trigger.Suite, Build: build, Lineage: cmp.Or(set.Trigger.Lineage, lineage)}
			if err := collectReport(ctx, c, rep, set.Trigger.RunIDs); err != nil {
				return fmt.Errorf("run: %w", err)
			}
			for _, r := range rep.Runs {
				for _, res := range r.Results {
					line := fmt.Sprintf("  run %d %s %s: %.2f ± %.2f decode tok/s, TTFT %.1f ms, hit rate %.3f, stall %.3f",
						r.ID, r.Device, res.ConfigKey, res.DecodeTPS.Mean, res.DecodeTPS.Stddev, res.TTFTms.Mean, res.HitRate, res.StallFraction)
					if !res.Valid {
						line += " (invalid: " + res.InvalidReason + res.Error + ")"
					}
					fmt.Fprintln(out, line)
				}
			}
			if !done.Succeeded {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%d of %d run(s) did not succeed", done.Runs-done.States["succeeded"], done.Runs))
				rep.Problems = append(rep.Problems, runFailures(rep.Runs, 3)...)
			}
			alerts, err := waitAlerts(ctx, c, suite, build, lineage, alertGrace)
			if err != nil {
				return fmt.Errorf("run: checking regression alerts: %w", err)
			}
			rep.Alerts = alerts
			for _, a := range alerts {
				fmt.Fprintf(out, "regression alert %d (%s): %s\n", a.ID, a.Scope, a.Summary)
			}
			if len(alerts) > 0 {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%d regression alert(s) for build %s", len(alerts), build))
			}
			others, err := lineageAlerts(ctx, c, suite, rep.Lineage, build, start) // run_ab.go
			if err != nil {
				return fmt.Errorf("run: checking regression alerts: %w", err)
			}
			rep.LineageAlerts = others
			for _, a := range others {
				fmt.Fprintf(out, "new regression alert %d on earlier build %s of lineage %s (%s): %s\n", a.ID, a.Build, a.Lineage, a.Scope, a.Summary)
			}
			rep.OK = len(rep.Problems) == 0
			if err := rep.write(env, junitPath, summaryPath, jsonOut); err != nil {
				return err
			}
			if !rep.OK {
				return errors.New(strings.Join(rep.Problems, "; "))
			}
			fmt.Fprintln(out, "ok: all runs succeeded, no regression alert")
			return nil
		},
	}
	cmd.Flags().StringVar(&suite, "suite", "", "suite to run, e.g. smoke or les-ladder (required)")
	cmd.Flags().StringVar(&devices, "devices", "", "device selector, e.g. 'platform=android,model=Pixel 8,pool=ci' (default: the suite's)")
	cmd.Flags().StringVar(&build, "build", "", "build id of the runtime under test (required)")
	cmd.Flags().StringVar(&gitSHA, "git-sha", "", "git commit of the build")
	cmd.Flags().StringVar(&lineage, "lineage", store.DefaultLineage, "build lineage: the branch the build belongs to, e.g. release-3; regressions are tracked per lineage")
	cmd.Flags().StringVar(&override, "override", "", "config override as JSON, or @FILE (e.g. '{\"repetitions\":5,\"modes\":[\"lookahead\"]}')")
	cmd.Flags().StringVar(&modelFile, "model", "", "run the suite on this GGUF file instead of its own model (uploaded first), e.g. one lesfarm synth wrote")
	cmd.Flags().BoolVar(&fanout, "fanout", false, "one run per matching online device")
	cmd.Flags().StringVar(&baseline, "baseline", "", "A/B gate: compare --build with this build of its lineage ('auto': the newest earlier build with results in the suite); see docs/ab.md")
	cmd.Flags().Float64Var(&minEffect, "min-effect", 0, "with --baseline, the smallest relative change reported, e.g. 0.02 (default: the suite's A/B policy, else 2%)")
	cmd.Flags().IntVar(&maxRounds, "max-rounds", 0, "with --baseline, the most rounds (one run of each build per device) before the verdict is unknown (default: the suite's policy, else 30)")
	cmd.Flags().BoolVar(&wait, "wait", false, "stream progress and exit non-zero if a run fails or a regression alert fires")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (0: no limit)")
	cmd.Flags().StringVar(&junitPath, "junit", "", "with --wait, write a JUnit XML report to FILE (- for stdout)")
	cmd.Flags().StringVar(&summaryPath, "summary", "", "with --wait, write a markdown summary (ladder per device, deltas vs the previous build, alerts) to FILE (- for stdout)")
	cmd.Flags().StringVar(&format, "format", "text", "with --wait, json prints the report as JSON on stdout (progress goes to stderr); text: progress and results on stdout")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "with --wait, print the report as JSON on stdout")
	deprecateFlag(cmd.Flags(), "json", "use --format json")
	cmd.Flags().DurationVar(&alertGrace, "alert-grace", 30*time.Second, "with --wait, how long to wait for regression alerts after the runs finish")
	addServerFlags(cmd, &sf)
	return cmd
}

// waitAlerts polls for regression alert groups of the build on lineage for
// up to grace (the detector runs after results land) and returns them.
// Groups of other lineages are ignored even when their build id matches.
func waitAlerts(ctx context.Context, c *client.Client, suite, build, lineage string, grace time.Duration) ([]client.AlertGroup, error) {
	deadline := time.Now().Add(grace)
	for {
		groups, err := c.AlertsForBuild(ctx, suite, build)
		if err != nil {
			return nil, err
		}
		var regs []client.AlertGroup
		for _, g := range groups {
			if g.Regression && g.Status != "invalid" && (g.Lineage == "" || g.Lineage == lineage) {
				regs = append(regs, g)
			}
		}
		if len(regs) > 0 || !time.Now().Before(deadline) {
			return regs, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(time.Second, time.Until(deadline))):
		}
	}
}

func stateSummary(states map[string]int) string {
	var parts []string
	for _, s := range []string{"succeeded", "failed", "build_failed", "infra_failed", "cancelled"} {
		if n := states[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	return strings.Join(parts, ", ")
}

// unregisteredBuild returns the API's one-line detail when err is the
// trigger's refusal of a build that is not registered (422, "build "x" is
// not registered; nearest: a, b"): a usage error of the command, not a
// failure of the farm.
func unregisteredBuild(err error) (string, bool) {
	var p *client.Problem
	if !errors.As(err, &p) || p.Status != http.StatusUnprocessableEntity || !strings.Contains(p.Detail, "is not registered") {
		return "", false
	}
	return strings.Join(strings.Fields(p.Detail), " "), true
}

// runFailures says why runs did not succeed, one problem per run (at most
// limit, then how many more), from each run's error: the report's verdict,
// --summary and the exit message then name the cause ("no valid
// measurement: ...", "result rejected at ingest: ...").
func runFailures(runs []reportRun, limit int) []string {
	var out []string
	more := 0
	for _, r := range runs {
		if r.State == "succeeded" {
			continue
		}
		if len(out) == limit {
			more++
			continue
		}
		line := fmt.Sprintf("run %d %s", r.ID, r.State)
		if r.State == store.RunBuildFailed {
			line = fmt.Sprintf("run %d: build failed", r.ID) // the build's own code crashed, hung or broke the runner protocol
			if r.Device != "" {
				line += " on " + r.Device
			}
		}
		if r.Error != "" {
			line += ": " + strings.Join(strings.Fields(r.Error), " ")
		}
		out = append(out, line)
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("%d more run(s) did not succeed", more))
	}
	return out
}
