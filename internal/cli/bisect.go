package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/coordinator/api/client"
)

func init() { register("bisect", newBisectCmd) }

// runningBisection finds the running bisection's id in a 409's detail.
var runningBisection = regexp.MustCompile(`^bisection (\d+) of alert group \d+ is running`)

// bisectOptions are bisect's flags.
type bisectOptions struct {
	req     client.BisectRequest
	wait    bool
	poll    time.Duration
	timeout time.Duration
	json    bool
}

func newBisectCmd(env *Env) *cobra.Command {
	var sf serverFlags
	var o bisectOptions
	var budget time.Duration
	cmd := &cobra.Command{
		Use:   "bisect ALERT_ID [--wait] [--budget 4h] [--last-good B] [--first-bad B]",
		Short: "Find the build that caused a regression alert",
		Long: `bisect asks the coordinator to search the build that caused alert group
ALERT_ID (the id 'lesfarm regress alerts' and the dashboard show): between
the alert's last good and first bad build of its lineage, on the alerting
device (or another of its model), it compares builds with interleaved A/B
runs — the two ends first, then the midpoint against the newest good
build — at a priority below nightly work, until it names the first bad
build and the last good one with both git shas (culprit), finds the ends
the same (not reproduced), or noise exhausts its device-time budget
(ambiguous). See docs/bisect.md.

Without --wait it prints the bisection's id (follow it with GET
/v1/bisections/ID or the alert's page). With --wait it prints each step
as it is decided and, at the end, the culprit with the range to read:
  git log LAST_GOOD_SHA..FIRST_BAD_SHA
  exit 0  culprit found, or not reproduced (the ends are the same)
  exit 1  it could not conclude: ambiguous (noise, budget, more than one
          change), failed (a build deleted or failing at an end), cancelled,
          or not ended before --timeout
  exit 2  the request was refused: no good build before the alert, a range
          crossing lineages, a build missing for the device's platform, no
          device of the alert's model online, …

A bisection of the alert that is running already is followed (with
--wait) instead of started twice.`,
		Example: `  lesfarm bisect 21 --wait
  lesfarm bisect 21 --wait --budget 2h --last-good ci-4800 --first-bad ci-4816`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 1 {
				return usagef("bisect: ALERT_ID %q is not an alert group id", args[0])
			}
			if budget < 0 || o.req.MaxRounds < 0 {
				return usagef("bisect: --budget and --max-rounds must not be negative")
			}
			if budget > 0 {
				o.req.Budget = budget.String()
			}
			if o.json && !o.wait {
				return usagef("bisect: --json needs --wait")
			}
			c, err := sf.client()
			if err != nil {
				return err
			}
			ctx := env.Ctx
			if o.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, o.timeout)
				defer cancel()
			}
			out := env.Stdout
			if o.json {
				out = env.Stderr
			}
			b, err := runBisect(ctx, c, id, &o, out)
			if o.json && b != nil {
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				if e := enc.Encode(b); e != nil {
					return e
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.wait, "wait", false, "follow the bisection until it ends; exit non-zero when it cannot conclude")
	f.DurationVar(&budget, "budget", 0, "device-time budget, e.g. 4h (default the coordinator's, 12h)")
	f.Int64Var(&o.req.AlertID, "alert", 0, "the group's alert to decide on (default its largest decode, prefill or TTFT regression)")
	f.StringVar(&o.req.LastGood, "last-good", "", "build known good (default the alert's last good build)")
	f.StringVar(&o.req.FirstBad, "first-bad", "", "build known bad (default the alert's first bad build)")
	f.IntVar(&o.req.MaxRounds, "max-rounds", 0, "most rounds of one step (default 30; a round is one run of each build)")
	f.DurationVar(&o.poll, "poll", time.Second, "how often --wait reads the bisection")
	f.DurationVar(&o.timeout, "timeout", 0, "give up waiting after this long (0: never)")
	f.BoolVar(&o.json, "json", false, "with --wait, print the bisection as JSON on stdout (progress goes to stderr)")
	addServerFlags(cmd, &sf)
	return cmd
}

// runBisect starts the bisection and, with o.wait, follows it to its
// end, printing each step once it is decided. It returns the bisection as
// last read.
func runBisect(ctx context.Context, c *client.Client, groupID int64, o *bisectOptions, out io.Writer) (*client.Bisection, error) {
	b, err := c.StartBisection(ctx, groupID, &o.req)
	var p *client.Problem
	if errors.As(err, &p) && p.Status == http.StatusConflict && o.wait {
		// One is running already: follow it.
		if m := runningBisection.FindStringSubmatch(p.Detail); m != nil {
			id, _ := strconv.ParseInt(m[1], 10, 64)
			fmt.Fprintf(out, "bisection %d of alert group %d is running already: following it\n", id, groupID)
			b, err = c.GetBisection(ctx, id)
		}
	}
	if err != nil {
		if errors.As(err, &p) && (p.Status == http.StatusUnprocessableEntity || p.Status == http.StatusConflict || p.Status == http.StatusNotFound) {
			return nil, &ExitError{Code: 2, Msg: "bisect: " + strings.Join(strings.Fields(p.Detail), " ")}
		}
		return nil, fmt.Errorf("bisect: %w", err)
	}
	fmt.Fprintf(out, "bisection %d of alert group %d: %s %s on %s (device %s), %d builds of lineage %s from %s (good) to %s (bad), alert %+.1f%%; budget %s of device time\n",
		b.ID, b.GroupID, b.Config, b.Metric, b.DeviceModel, b.DeviceID, len(b.Builds), b.Lineage, b.LastGood.ID, b.FirstBad.ID,
		100*b.Expected, time.Duration(b.BudgetSeconds*float64(time.Second)))
	if n := skippedBuilds(b); n != "" {
		fmt.Fprintf(out, "left out: %s\n", n)
	}
	if !o.wait {
		fmt.Fprintf(out, "it runs on the coordinator: follow it with lesfarm bisect %d --wait, GET /v1/bisections/%d or the alert's page /alerts/%d\n", b.GroupID, b.ID, b.GroupID)
		return b, nil
	}
	c.ReadOutage = 2 * time.Minute
	printed := map[int]string{}
	for {
		for _, s := range b.Steps {
			line := bisectStepLine(s)
			if line != "" && printed[s.Step] != line {
				printed[s.Step] = line
				fmt.Fprintf(out, "%s %s\n", time.Now().UTC().Format("15:04:05"), line)
			}
		}
		if b.State != "running" {
			break
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return b, &ExitError{Code: 1, Msg: fmt.Sprintf("bisect: bisection %d not ended before --timeout (it goes on: GET /v1/bisections/%d)", b.ID, b.ID)}
			}
			return b, ctx.Err()
		case <-time.After(o.poll):
		}
		nb, err := c.GetBisection(ctx, b.ID)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				continue // the select above reports it
			}
			return b, fmt.Errorf("bisect: %w", err)
		}
		b = nb
	}
	return b, printBisectEnd(out, b)
}

// bisectStepLine is a step's progress line: its pair and rounds while it
// runs (printed again when rounds are added or it waits for a device),
// its conclusion once decided, why it was aborted.
func bisectStepLine(s client.BisectionStep) string {
	head := fmt.Sprintf("step %d (%s, %s vs %s on %s):", s.Step, s.Kind, s.BuildB, s.BuildA, s.DeviceID)
	switch s.State {
	case "done":
		return head + " " + s.Summary
	case "aborted":
		return head + " " + s.Note
	}
	line := fmt.Sprintf("%s %d round(s) of one run per build queued (ABBA order)", head, s.Rounds)
	if s.Note != "" {
		line += " — " + s.Note
	}
	return line
}

func shaText(sha string) string {
	if sha == "" {
		return "no git sha"
	}
	return sha
}

func skippedBuilds(b *client.Bisection) string {
	var out []string
	for _, x := range b.Builds {
		if x.Skipped != "" {
			out = append(out, x.ID+" ("+x.Skipped+")")
		}
	}
	return strings.Join(out, "; ")
}

// printBisectEnd prints how the bisection ended and returns the exit
// error for an end that is no conclusion.
func printBisectEnd(out io.Writer, b *client.Bisection) error {
	dev := time.Duration(b.DeviceSeconds * float64(time.Second)).Round(time.Second)
	budget := time.Duration(b.BudgetSeconds * float64(time.Second))
	steps := 0
	for _, s := range b.Steps {
		if s.State == "done" {
			steps++
		}
	}
	fmt.Fprintf(out, "device time %s over %d runs (budget %s), %d step(s) decided\n", dev, b.Runs, budget, steps)
	switch b.State {
	case "culprit":
		c := b.Culprit
		fmt.Fprintf(out, "culprit: first bad build %s (%s), last good build %s (%s): %s %+.1f%% on %s\n",
			c.FirstBad.ID, shaText(c.FirstBad.GitSHA), c.LastGood.ID, shaText(c.LastGood.GitSHA), b.Metric, 100*c.Change, b.DeviceModel)
		fmt.Fprintf(out, "  %s\n", c.GitLog)
		return nil
	case "not_reproduced":
		fmt.Fprintf(out, "not reproduced: %s\n", b.Reason)
		return nil
	}
	return &ExitError{Code: 1, Msg: fmt.Sprintf("bisect: %s: %s", strings.ReplaceAll(b.State, "_", " "), b.Reason)}
}
