package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/api/client"
)

// abOptions are run's A/B flags and report outputs.
type abOptions struct {
	baseline  string
	minEffect float64
	maxRounds int
	wait      bool
	poll      time.Duration
	junit     string
	summary   string
	json      bool
}

// runAB is `lesfarm run --baseline A`: it creates the A/B comparison
// (POST /v1/runs with a baseline) and, with --wait, follows it (GET
// /v1/ab/{id}, which queues more rounds while undecided) until its
// verdict, printing each run's progress and why a queued run waits. It
// exits 1 on a regression (naming config, metric, change and interval) or
// a failed build, 2 on a refused baseline, 0 otherwise.
func runAB(ctx context.Context, env *Env, c *client.Client, req *client.TriggerRequest, o *abOptions, out io.Writer) error {
	start := time.Now()
	set, err := c.TriggerAB(ctx, &client.ABRequest{TriggerRequest: *req, Baseline: o.baseline, MinEffect: o.minEffect, MaxRounds: o.maxRounds})
	if err != nil {
		var p *client.Problem
		if errors.As(err, &p) && p.Status == http.StatusUnprocessableEntity {
			return &ExitError{Code: 2, Msg: "run: " + strings.Join(strings.Fields(p.Detail), " ")}
		}
		return fmt.Errorf("run: %w", err)
	}
	ab := set.AB
	fmt.Fprintf(out, "A/B comparison %d: build %s vs baseline %s (lineage %s), suite %s on %s: %d round(s) of one run per build and device (ABBA order), up to %d; minimum effect %.1f%%\n",
		ab.ID, ab.Build, ab.Baseline, ab.Lineage, ab.Suite, strings.Join(ab.Devices, ", "), ab.Rounds, ab.MaxRounds, 100*ab.MinEffect)
	if !o.wait {
		fmt.Fprintf(out, "follow it: GET /v1/ab/%d\n", ab.ID)
		return nil
	}
	c.ReadOutage = 2 * time.Minute
	seen := map[int64]string{}
	rounds := ab.Rounds
	for {
		if ab, err = c.GetAB(ctx, ab.ID); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("run: A/B comparison not decided before --timeout")
			}
			return fmt.Errorf("run: %w", err)
		}
		for _, r := range ab.Runs {
			line := abRunLine(r)
			if seen[r.RunID] != line {
				seen[r.RunID] = line
				fmt.Fprintf(out, "%s %s\n", time.Now().UTC().Format("15:04:05"), line)
			}
		}
		if ab.Rounds > rounds {
			fmt.Fprintf(out, "undecided after %d round(s) (%s): %d more round(s), up to %d\n", rounds, ab.Summary, ab.Rounds-rounds, ab.MaxRounds)
			rounds = ab.Rounds
		}
		if ab.State == "done" {
			break
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("run: A/B comparison %d not decided before --timeout", ab.ID)
			}
			return ctx.Err()
		case <-time.After(o.poll):
		}
	}
	rep := &runReport{Trigger: set.Trigger.ID, Suite: ab.Suite, Build: ab.Build, Lineage: ab.Lineage, AB: ab, Runs: []reportRun{}, Alerts: []client.AlertGroup{}}
	printABVerdict(out, ab)
	others, err := lineageAlerts(ctx, c, ab.Suite, ab.Lineage, "", start)
	if err != nil {
		return fmt.Errorf("run: checking regression alerts: %w", err)
	}
	rep.LineageAlerts = others
	for _, a := range others {
		fmt.Fprintf(out, "new regression alert %d on build %s of lineage %s (%s): %s\n", a.ID, a.Build, a.Lineage, a.Scope, a.Summary)
	}
	rep.Problems = abProblems(ab)
	rep.OK = len(rep.Problems) == 0
	if err := rep.write(env, o.junit, o.summary, o.json); err != nil {
		return err
	}
	if !rep.OK {
		return &ExitError{Code: 1, Msg: strings.Join(rep.Problems, "; ")}
	}
	fmt.Fprintf(out, "ok: %s\n", ab.Summary)
	return nil
}

// abRunLine is a progress line of one run of a comparison.
func abRunLine(r client.ABRun) string {
	side := "build"
	if r.Side == "a" {
		side = "baseline"
	}
	line := fmt.Sprintf("run %d (%s %s, round %d): %s on %s", r.RunID, side, r.Build, r.Round+1, r.State, r.DeviceID)
	if r.State == "running" && r.Progress > 0 {
		line += fmt.Sprintf(" %.0f%%", 100*r.Progress)
	}
	if r.State == "queued" && r.WaitingReason != "" {
		line += " — " + r.WaitingReason
	}
	if r.Error != "" {
		line += ": " + strings.Join(strings.Fields(r.Error), " ")
	}
	return line
}

// printABVerdict prints the verdict and, per device and config, the
// decode rate's comparison and every comparison that is not the same.
func printABVerdict(out io.Writer, ab *client.AB) {
	fmt.Fprintf(out, "A/B verdict after %d round(s): %s\n", ab.Rounds, ab.Summary)
	for _, d := range ab.Decisions {
		if d.Metric != "decode_tps" && d.Outcome == "same" {
			continue
		}
		fmt.Fprintf(out, "  %s\n", abDecisionLine(d))
	}
}

// abDecisionLine is one decision: where, what, by how much, how sure.
func abDecisionLine(d client.ABDecision) string {
	return fmt.Sprintf("%s %s %s: %s, %.4g → %.4g, change %+.1f%% [%+.1f%%, %+.1f%%] (%.0f%% interval), p %.2g (KS %.2g, MWU %.2g), %d+%d runs",
		d.DeviceID, d.ConfigKey, d.Metric, d.Outcome, d.MeanA, d.MeanB, 100*d.Change, 100*d.Low, 100*d.High, 100*d.Level, d.P, d.PKS, d.PMWU, d.NA, d.NB)
}

// abProblems are the reasons the gate fails: each regression, or the
// failure of a build (or of too many runs).
func abProblems(ab *client.AB) []string {
	var out []string
	switch ab.Verdict {
	case "regression":
		for _, d := range ab.Decisions {
			if d.Outcome == "regression" {
				out = append(out, "regression: "+abDecisionLine(d))
			}
		}
	case "failed":
		out = append(out, ab.Summary)
		for _, p := range ab.Problems {
			if len(out) == 4 {
				break
			}
			if !strings.HasSuffix(ab.Summary, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// lineageAlerts returns the regression alert groups of lineage raised
// since start on builds other than build (all builds when build is
// empty): a change the detector placed at an earlier build, which a gate
// that only looks at its own build would never report.
func lineageAlerts(ctx context.Context, c *client.Client, suite, lineage, build string, since time.Time) ([]client.AlertGroup, error) {
	groups, err := c.LineageAlertsSince(ctx, suite, lineage, since.Add(-time.Second))
	if err != nil {
		return nil, err
	}
	var out []client.AlertGroup
	for _, g := range groups {
		if g.Regression && g.Status != "invalid" && g.Build != build && (g.Lineage == "" || g.Lineage == lineage) {
			out = append(out, g)
		}
	}
	return out, nil
}
