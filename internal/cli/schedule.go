package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/coordinator/api/client"
)

func init() { register("schedule", newScheduleCmd) }

func newScheduleCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule list|create|delete",
		Short: "Manage nightly schedules: suites the coordinator triggers by cron",
		Long: `schedule manages the coordinator's schedules (/v1/schedules): each one
triggers a suite's jobs at the times of a cron expression, in a time zone,
on a build lineage, optionally narrowed to some devices and with a config
override. A schedule whose runs raise a regression alert group can bisect
it by itself (--bisect auto). After downtime the most recent missed
occurrence fires if it is at most --catchup old.

Every subcommand talks to the coordinator named by --server (or
$LESFARM_SERVER) with --token (or $LESFARM_TOKEN).`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newScheduleListCmd(env), newScheduleCreateCmd(env), newScheduleDeleteCmd(env))
	return cmd
}

func newScheduleListCmd(env *Env) *cobra.Command {
	var sf serverFlags
	var format string
	cmd := &cobra.Command{
		Use:   "list [--format table|json]",
		Short: "List schedules with their next occurrence",
		Long: `list prints every schedule, ordered by id: its name, cron expression and
time zone, suite, lineage, build, whether it is enabled, its bisect
policy, and when it fires next and last fired. --format json prints the
API's objects.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat("schedule list", format); err != nil {
				return err
			}
			c, err := sf.client()
			if err != nil {
				return err
			}
			ss, err := c.ListSchedules(env.Ctx)
			if err != nil {
				return fmt.Errorf("schedule list: %w", err)
			}
			if format == "json" {
				if ss == nil {
					ss = []client.Schedule{}
				}
				return writeJSON(env.Stdout, ss)
			}
			return printSchedules(env.Stdout, ss)
		},
	}
	cmd.Flags().StringVar(&format, "format", "table", "output format: table or json")
	addServerFlags(cmd, &sf)
	return cmd
}

// printSchedules writes schedules as a table.
func printSchedules(w io.Writer, ss []client.Schedule) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tCRON\tTZ\tSUITE\tLINEAGE\tBUILD\tENABLED\tBISECT\tNEXT\tLAST")
	for _, s := range ss {
		last := "-"
		if s.LastFiredAt != nil {
			last = s.LastFiredAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Name, s.Cron, s.Timezone, s.Suite, s.Lineage, dash(s.Build),
			yesNo(s.Enabled), s.Bisect, s.NextFireAt.UTC().Format(time.RFC3339), last)
	}
	return tw.Flush()
}

func newScheduleCreateCmd(env *Env) *cobra.Command {
	var sf serverFlags
	var req client.ScheduleRequest
	var devices, override, format string
	var disabled bool
	var catchup time.Duration
	cmd := &cobra.Command{
		Use:   "create --name NAME --cron EXPR --suite SUITE [flags]",
		Short: "Create a schedule that triggers a suite by cron",
		Long: `create adds a schedule: at each time of --cron (5 fields, minute hour
day-of-month month day-of-week, or a descriptor such as @daily or
"@every 6h"), evaluated in --timezone (default UTC), the coordinator
triggers --suite's jobs as 'lesfarm run' would, with build id --build
({date} becomes the occurrence's UTC date, YYYYMMDD) on lineage
--lineage (default main: a release branch's nightly gets its own
regression series). The coordinator checks the cron expression, the
suite and the override now, so a schedule never fails at 2 a.m. for a
reason known today; a refusal exits 2 with its reason.

--bisect auto starts a bisection of each regression alert group the
schedule's runs raise, below nightly work (docs/bisect.md).`,
		Example: `  lesfarm schedule create --name nightly-ladder --cron '0 2 * * *' --suite les-ladder --build 'nightly-{date}'
  lesfarm schedule create --name release-3 --cron @daily --timezone Europe/Paris --suite les-demo \
      --lineage release-3 --devices platform=android --override '{"repetitions":5}' --bisect auto`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat("schedule create", format); err != nil {
				return err
			}
			for _, f := range []struct{ flag, v string }{{"--name", req.Name}, {"--cron", req.Cron}, {"--suite", req.Suite}} {
				if strings.TrimSpace(f.v) == "" {
					return usagef("schedule create: %s is required", f.flag)
				}
			}
			if req.Bisect != "" && req.Bisect != "off" && req.Bisect != "auto" {
				return usagef("schedule create: --bisect %q: want off or auto", req.Bisect)
			}
			if catchup < 0 || catchup > 7*24*time.Hour {
				return usagef("schedule create: --catchup %s: want 0 to 168h", catchup)
			}
			if cmd.Flags().Changed("catchup") {
				req.Catchup = catchup.String()
			}
			if disabled {
				f := false
				req.Enabled = &f
			}
			sel, err := client.ParseSelector(devices)
			if err != nil {
				return usagef("schedule create: %v", err)
			}
			if sel != nil {
				req.Devices, _ = json.Marshal(sel)
			}
			if override != "" {
				raw := []byte(override)
				if path, ok := strings.CutPrefix(override, "@"); ok {
					if raw, err = os.ReadFile(path); err != nil {
						return usagef("schedule create: --override: %v", err)
					}
				}
				if !json.Valid(raw) {
					return usagef("schedule create: --override is not valid JSON")
				}
				req.Override = raw
			}
			c, err := sf.client()
			if err != nil {
				return err
			}
			s, err := c.CreateSchedule(env.Ctx, &req)
			if err != nil {
				return scheduleRefusal("schedule create", err)
			}
			if format == "json" {
				return writeJSON(env.Stdout, s)
			}
			fmt.Fprintf(env.Stdout, "created schedule %d %q: %s (%s) triggers suite %s on lineage %s; next at %s\n",
				s.ID, s.Name, s.Cron, s.Timezone, s.Suite, s.Lineage, s.NextFireAt.UTC().Format(time.RFC3339))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Name, "name", "", "unique schedule name (letters, digits, '.', '_', '-')")
	f.StringVar(&req.Cron, "cron", "", "cron expression (5 fields) or descriptor (@daily, \"@every 6h\")")
	f.StringVar(&req.Timezone, "timezone", "", "IANA time zone the cron expression is evaluated in (default UTC)")
	f.StringVar(&req.Suite, "suite", "", "suite whose jobs each occurrence triggers")
	f.StringVar(&req.Build, "build", "", "build id of the triggered runs; {date} becomes the occurrence's UTC date")
	f.StringVar(&req.GitSHA, "git-sha", "", "git commit given to the triggered runs")
	f.StringVar(&req.Lineage, "lineage", "", "build lineage of the triggered runs (default main)")
	f.StringVar(&devices, "devices", "", "device selector, e.g. 'platform=android,model=Pixel 8,pool=ci' (default: the suite's)")
	f.StringVar(&override, "override", "", "config override as JSON, or @FILE")
	f.IntVar(&req.Priority, "priority", 0, "priority of the triggered runs (-1000 to 1000; higher runs first)")
	f.BoolVar(&disabled, "disabled", false, "create it disabled (it does not fire until enabled)")
	f.StringVar(&req.Bisect, "bisect", "", "auto: bisect each regression alert group its runs raise; off (default): by hand")
	f.DurationVar(&catchup, "catchup", time.Hour, "after downtime, fire the most recent missed occurrence if it is at most this old (0 to 168h)")
	f.StringVar(&format, "format", "table", "output format: table (one line) or json")
	addServerFlags(cmd, &sf)
	return cmd
}

func newScheduleDeleteCmd(env *Env) *cobra.Command {
	var sf serverFlags
	cmd := &cobra.Command{
		Use:   "delete ID|NAME",
		Short: "Delete a schedule by id or name",
		Long: `delete removes a schedule, named by its id or its name; it no longer
fires. Runs it triggered, and their results and alerts, stay. An unknown
schedule exits 1 with a line that says so.`,
		Example: `  lesfarm schedule delete 3
  lesfarm schedule delete nightly-ladder`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := sf.client()
			if err != nil {
				return err
			}
			id, err := strconv.ParseInt(args[0], 10, 64)
			name := args[0]
			if err != nil || id < 1 {
				ss, err := c.ListSchedules(env.Ctx)
				if err != nil {
					return fmt.Errorf("schedule delete: %w", err)
				}
				id = 0
				for _, s := range ss {
					if s.Name == args[0] {
						id = s.ID
					}
				}
				if id == 0 {
					return &ExitError{Code: 1, Msg: fmt.Sprintf("schedule delete: no schedule named %q", args[0])}
				}
			} else {
				name = "#" + args[0]
			}
			if err := c.DeleteSchedule(env.Ctx, id); err != nil {
				return scheduleRefusal("schedule delete", err)
			}
			fmt.Fprintf(env.Stdout, "deleted schedule %d (%s)\n", id, strings.TrimPrefix(name, "#"))
			return nil
		},
	}
	addServerFlags(cmd, &sf)
	return cmd
}

// scheduleRefusal turns the coordinator's refusal into a one-line exit:
// 2 for a request it refused (bad cron, unknown suite, name taken), 1 for
// an unknown schedule; other errors pass through.
func scheduleRefusal(what string, err error) error {
	var p *client.Problem
	if !errors.As(err, &p) {
		return fmt.Errorf("%s: %w", what, err)
	}
	msg := strings.Join(strings.Fields(p.Detail), " ")
	for _, e := range p.Errors {
		msg += fmt.Sprintf("; %s: %s", strings.TrimPrefix(e.Location, "body."), e.Message)
	}
	switch p.Status {
	case http.StatusUnprocessableEntity, http.StatusConflict, http.StatusBadRequest:
		return &ExitError{Code: 2, Msg: what + ": " + msg}
	case http.StatusNotFound:
		return &ExitError{Code: 1, Msg: what + ": " + msg}
	}
	return fmt.Errorf("%s: %w", what, err)
}
