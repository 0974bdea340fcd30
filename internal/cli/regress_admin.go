package cli

import (
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// Subcommands of "regress" that read or change the coordinator database:
// per-suite policies, alert listing and triage.

func newRegressPolicyCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy show|set",
		Short: "Show or set a suite's regression policy (webhook, confirmation rerun)",
		Long: `policy reads or changes how regressions of one suite are handled:
where their alert groups are POSTed (webhook URL and HMAC secret), whether a
confirmation rerun must agree before an alert goes out, and whether
improvements are notified too.

Without --database-url, a local PostgreSQL is started in DATA_DIR/pg (stop
'lesfarm serve' first, or point --database-url at its database).`,
	}
	cmd.AddCommand(newRegressPolicyShowCmd(env), newRegressPolicySetCmd(env))
	return cmd
}

func newRegressPolicyShowCmd(env *Env) *cobra.Command {
	var db dbFlags
	var suite string
	cmd := &cobra.Command{
		Use:   "show --suite NAME",
		Short: "Print a suite's regression policy",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if suite == "" {
				return usagef("regress policy show: --suite is required")
			}
			st, done, err := openTokenStore(env, &db)
			if err != nil {
				return err
			}
			defer done()
			p, err := st.GetRegressPolicy(env.Ctx, suite)
			if err != nil {
				return err
			}
			secret := "no"
			if p.WebhookSecret != "" {
				secret = "yes"
			}
			fmt.Fprintf(env.Stdout, "suite: %s\nwebhook: %s\nwebhook secret: %s\nconfirm rerun: %v\nnotify improvements: %v\n",
				p.Suite, orNone(p.WebhookURL), secret, p.ConfirmRerun, p.NotifyImprovements)
			return nil
		},
	}
	cmd.Flags().StringVar(&suite, "suite", "", "suite name")
	addDBFlags(cmd, &db)
	return cmd
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func newRegressPolicySetCmd(env *Env) *cobra.Command {
	var db dbFlags
	var p store.RegressPolicy
	cmd := &cobra.Command{
		Use:   "set --suite NAME [--webhook URL] [--webhook-secret S] [--confirm-rerun] [--notify-improvements]",
		Short: "Replace a suite's regression policy",
		Long: `set replaces the whole policy of a suite: flags not given take their
defaults (no webhook, no confirmation, regressions only).

Webhook requests are POSTs of {"event":"alert_group","delivery_id":N,"group":{...}}
with headers X-Lesfarm-Delivery (stable across retries) and, with a secret,
X-Lesfarm-Signature: sha256=<hex HMAC-SHA256 of the body>.`,
		Example: `  lesfarm regress policy set --suite nightly --webhook https://hooks.example.com/lesfarm --confirm-rerun`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if p.Suite == "" {
				return usagef("regress policy set: --suite is required")
			}
			st, done, err := openTokenStore(env, &db)
			if err != nil {
				return err
			}
			defer done()
			if err := st.SetRegressPolicy(env.Ctx, &p); err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "policy of suite %s updated\n", p.Suite)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Suite, "suite", "", "suite name")
	f.StringVar(&p.WebhookURL, "webhook", "", "http(s) URL that receives new alert groups")
	f.StringVar(&p.WebhookSecret, "webhook-secret", "", "HMAC-SHA256 key for the X-Lesfarm-Signature header")
	f.BoolVar(&p.ConfirmRerun, "confirm-rerun", false, "hold each new group until a rerun on the same device confirms it")
	f.BoolVar(&p.NotifyImprovements, "notify-improvements", false, "also notify groups that contain only improvements")
	addDBFlags(cmd, &db)
	return cmd
}

func newRegressAlertsCmd(env *Env) *cobra.Command {
	var db dbFlags
	var p store.ListAlertGroupsParams
	cmd := &cobra.Command{
		Use:   "alerts [--suite NAME] [--status new] [--device-model M] [--limit N]",
		Short: "List regression alert groups, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if p.Status != "" && !store.ValidAlertStatus(p.Status) {
				return usagef("regress alerts: --status %q: want new, acknowledged, invalid, fixed or reassigned", p.Status)
			}
			st, done, err := openTokenStore(env, &db)
			if err != nil {
				return err
			}
			defer done()
			gs, err := st.ListAlertGroups(env.Ctx, &p)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSUITE\tSEQ\tBUILD\tSCOPE\tSTATUS\tSUMMARY")
			for _, g := range gs {
				fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\n", g.ID, g.Suite, g.Seq, orNone(g.Build), g.Scope, g.Status, g.Summary)
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Suite, "suite", "", "only this suite")
	f.StringVar(&p.Status, "status", "", "only this status: new, acknowledged, invalid, fixed, reassigned")
	f.StringVar(&p.DeviceModel, "device-model", "", "only groups with an alert on this device model")
	f.IntVar(&p.Limit, "limit", 50, "at most this many groups")
	addDBFlags(cmd, &db)
	return cmd
}

func newRegressTriageCmd(env *Env) *cobra.Command {
	var db dbFlags
	var p store.TriageParams
	cmd := &cobra.Command{
		Use:   "triage GROUP_ID --status acknowledged|invalid|fixed|reassigned|new [--note TEXT] [--reassigned-to BUILD]",
		Short: "Set the lifecycle state and note of an alert group",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 1 {
				return usagef("regress triage: group id %q: want a positive integer", args[0])
			}
			p.ID = id
			if !store.ValidAlertStatus(p.Status) {
				return usagef("regress triage: --status %q: want new, acknowledged, invalid, fixed or reassigned", p.Status)
			}
			if p.Status == store.AlertReassigned && p.ReassignedTo == "" {
				return usagef("regress triage: --status reassigned needs --reassigned-to BUILD")
			}
			st, done, err := openTokenStore(env, &db)
			if err != nil {
				return err
			}
			defer done()
			g, err := st.TriageAlertGroup(env.Ctx, &p)
			if err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "group %d: %s\n", g.ID, g.Status)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Status, "status", "", "new state")
	f.StringVar(&p.Note, "note", "", "note shown with the group")
	f.StringVar(&p.ReassignedTo, "reassigned-to", "", "build the change really belongs to (with --status reassigned)")
	addDBFlags(cmd, &db)
	return cmd
}
