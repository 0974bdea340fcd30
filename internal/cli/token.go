package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/migrations"
	"github.com/lesfarm/lesfarm/protocol"
)

func init() { register("token", newTokenCmd) }

func newTokenCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token create|list|revoke",
		Short: "Manage API tokens (REST mutations) and device credentials (NATS)",
		Long: `token manages two kinds of secrets.

API tokens (--name) are bearer tokens for the coordinator's REST API. Every
mutating call (trigger a run, upload an artifact, edit a suite or schedule)
needs 'Authorization: Bearer <token>'; reads are open unless the coordinator
is configured to require tokens for them too. Each token carries scopes
(--scope): read, trigger (runs, schedules), suites (what devices run, model
URLs), builds (executables devices run, artifact uploads) and admin
(devices, artifacts' lifetime, alert triage, the download allow-list). A
call outside the token's scopes is refused with 403 naming the scope. Live
token names are unique. See docs/security.md for what each scope allows.

Device credentials (--device ID) let one device's agent connect to the
embedded NATS server of 'lesfarm serve' (--nats-auth strict, the default, or devices).
A credential is bound to its device id: with it an agent may publish only
that device's hello, heartbeat, telemetry and results and receive only its
assignments and cancels. The agent passes it with --device-token:
  lesfarm agent --nats-url nats://coordinator:4222 --name ID --device-token SECRET
(or --user ID --password SECRET).

Only a sha256 of each secret is stored in PostgreSQL: 'token create' prints
it once and it cannot be shown again. To rotate a device credential, create
a new one, restart the agent with it, then revoke the old one.

Without --database-url, a local PostgreSQL is started in DATA_DIR/pg (stop
'lesfarm serve' first, or point --database-url at its database).`,
	}
	cmd.AddCommand(newTokenCreateCmd(env), newTokenListCmd(env), newTokenRevokeCmd(env))
	return cmd
}

// openTokenStore opens (and migrates) the database named by db.
func openTokenStore(env *Env, db *dbFlags) (*store.Store, func(), error) {
	log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	url, stop, err := db.openDatabase(env.Ctx, log)
	if err != nil {
		return nil, nil, err
	}
	if err := migrations.Up(env.Ctx, url); err != nil {
		stop()
		return nil, nil, err
	}
	st, err := store.Open(env.Ctx, url, store.Config{MaxConns: 2})
	if err != nil {
		stop()
		return nil, nil, err
	}
	return st, func() { st.Close(); stop() }, nil
}

func newTokenCreateCmd(env *Env) *cobra.Command {
	var db dbFlags
	var name, device string
	var scopes []string
	var expires time.Duration
	cmd := &cobra.Command{
		Use:   "create --name NAME [--scope read,trigger,...] | --device DEVICE_ID [--expires 720h]",
		Short: "Create an API token or a device credential and print it once",
		Long: `create makes a new API token named NAME (e.g. the CI system that will use
it), or with --device a NATS credential bound to device DEVICE_ID, and prints
the secret on stdout. Store it now: it is not kept and cannot be shown again.
With --expires DURATION it stops working that long after now (by the
database's clock), refused exactly like a revoked one; 'token list' shows
when. --scope (repeatable or comma-separated: read, trigger, suites,
builds, admin, or all) limits what the API token may do; without it the
token has every scope. Give each client the least it needs: CI that
pushes builds and triggers runs needs builds,trigger; a dashboard, read.

The device's agent then connects with it:
  lesfarm agent --nats-url nats://coordinator:4222 --name DEVICE_ID --device-token SECRET`,
		Example: "  lesfarm token create --name ci --scope builds,trigger\n  lesfarm token create --name dashboard --scope read\n  TOKEN=$(lesfarm token create --name nightly --database-url postgres://farm@db/lesfarm)\n" +
			"  SECRET=$(lesfarm token create --device pixel-8-a)\n  lesfarm agent --nats-url nats://farm:4222 --name pixel-8-a --device-token \"$SECRET\"",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if expires < 0 || cmd.Flags().Changed("expires") && expires < time.Minute {
				return usagef("token create: --expires %s: want at least 1m (omit it for a secret that never expires)", expires)
			}
			if device != "" {
				if name != "" {
					return usagef("token create: give --name (API token) or --device (device credential), not both")
				}
				if len(scopes) > 0 {
					return usagef("token create: --scope is for API tokens; a device credential is bound to its device")
				}
				if !protocol.ValidDeviceID(device) {
					return usagef("token create: --device %q: want a device id of 1-64 letters, digits, '_' or '-'", device)
				}
				st, closeFn, err := openTokenStore(env, &db)
				if err != nil {
					return err
				}
				defer closeFn()
				secret, cred, err := st.CreateDeviceCredentialWith(env.Ctx, &store.DeviceCredentialParams{DeviceID: device, ExpiresIn: expires})
				if err != nil {
					return err
				}
				fmt.Fprintln(env.Stdout, secret)
				fmt.Fprintf(env.Stderr, "created credential %d for device %q (%s…)%s; it is shown only this once\n"+
					"use it with: lesfarm agent --name %s --device-token SECRET\n", cred.ID, cred.DeviceID, cred.Prefix, expiryNote(cred.ExpiresAt), cred.DeviceID)
				return nil
			}
			if name == "" {
				return usagef("token create: --name is required (or --device DEVICE_ID for a device credential)")
			}
			if len(name) > 200 {
				return usagef("token create: --name longer than 200 characters")
			}
			var sc []string // nil: every scope
			if cmd.Flags().Changed("scope") {
				var err error
				if sc, err = store.ParseScopes(scopes); err != nil {
					return usagef("token create: --scope: %s", strings.TrimPrefix(err.Error(), "store: "))
				}
			}
			st, closeFn, err := openTokenStore(env, &db)
			if err != nil {
				return err
			}
			defer closeFn()
			secret, tok, err := st.CreateAPITokenWith(env.Ctx, &store.APITokenParams{Name: name, ExpiresIn: expires, Scopes: sc})
			if errors.Is(err, store.ErrTokenNameTaken) {
				return fmt.Errorf("token create: a live API token is already named %q: pick another name, or revoke it first ('lesfarm token list')", name)
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(env.Stdout, secret)
			fmt.Fprintf(env.Stderr, "created token %d %q (%s…) with scopes %s%s; it is shown only this once\n", tok.ID, tok.Name, tok.Prefix,
				strings.Join(tok.Scopes, ","), expiryNote(tok.ExpiresAt))
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name of the API token, e.g. the CI system using it")
	cmd.Flags().StringVar(&device, "device", "", "create a NATS credential for this device id instead of an API token")
	cmd.Flags().StringSliceVar(&scopes, "scope", nil, "what the API token may do: read, trigger, suites, builds, admin or all (repeatable, comma-separated; default all)")
	cmd.Flags().DurationVar(&expires, "expires", 0, "the secret stops working this long from now, e.g. 720h (default: never)")
	addDBFlags(cmd, &db)
	return cmd
}

func newTokenListCmd(env *Env) *cobra.Command {
	var db dbFlags
	var devices bool
	cmd := &cobra.Command{
		Use:   "list [--devices]",
		Short: "List API tokens, or with --devices device credentials (ids, prefixes, last use, expiry; never the secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, closeFn, err := openTokenStore(env, &db)
			if err != nil {
				return err
			}
			defer closeFn()
			ts := func(t *time.Time) string {
				if t == nil {
					return "-"
				}
				return t.UTC().Format(time.RFC3339)
			}
			if devices {
				creds, err := st.ListDeviceCredentials(env.Ctx, "")
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tDEVICE\tPREFIX\tCREATED\tLAST USED\tEXPIRES\tREVOKED")
				for _, c := range creds {
					fmt.Fprintf(tw, "%d\t%s\t%s…\t%s\t%s\t%s\t%s\n", c.ID, c.DeviceID, c.Prefix, c.CreatedAt.UTC().Format(time.RFC3339), ts(c.LastUsedAt), ts(c.ExpiresAt), ts(c.RevokedAt))
				}
				return tw.Flush()
			}
			toks, err := st.ListAPITokens(env.Ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tSCOPES\tCREATED\tLAST USED\tEXPIRES\tREVOKED")
			for _, t := range toks {
				fmt.Fprintf(tw, "%d\t%s\t%s…\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Prefix, strings.Join(t.Scopes, ","), t.CreatedAt.UTC().Format(time.RFC3339), ts(t.LastUsedAt), ts(t.ExpiresAt), ts(t.RevokedAt))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&devices, "devices", false, "list device credentials (NATS) instead of API tokens")
	addDBFlags(cmd, &db)
	return cmd
}

func newTokenRevokeCmd(env *Env) *cobra.Command {
	var db dbFlags
	var device bool
	cmd := &cobra.Command{
		Use:   "revoke [--device] ID",
		Short: "Revoke an API token, or with --device a device credential, by id (see 'token list'); it stops working at once",
		Long: `revoke revokes the API token with id ID, or with --device the device
credential with id ID (see 'token list --devices'). New requests and
connections presenting it are refused at once; 'lesfarm serve' disconnects
a device already connected with it within 10 seconds.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return usagef("token revoke: ID must be a positive integer, got %q", args[0])
			}
			st, closeFn, err := openTokenStore(env, &db)
			if err != nil {
				return err
			}
			defer closeFn()
			if device {
				cred, err := st.RevokeDeviceCredential(env.Ctx, id)
				if err != nil {
					if errors.Is(err, store.ErrNotFound) {
						return fmt.Errorf("token revoke: no live device credential with id %d", id)
					}
					return err
				}
				fmt.Fprintf(env.Stdout, "revoked device credential %d of device %s\n", id, cred.DeviceID)
				return nil
			}
			if err := st.RevokeAPIToken(env.Ctx, id); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("token revoke: no live token with id %d", id)
				}
				return err
			}
			fmt.Fprintf(env.Stdout, "revoked token %d\n", id)
			return nil
		},
	}
	cmd.Flags().BoolVar(&device, "device", false, "ID is a device credential (see 'token list --devices'), not an API token")
	addDBFlags(cmd, &db)
	return cmd
}

// expiryNote says when a new secret expires, for the create message.
func expiryNote(at *time.Time) string {
	if at == nil {
		return ""
	}
	return ", expires " + at.UTC().Format(time.RFC3339)
}
