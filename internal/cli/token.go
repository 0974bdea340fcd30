package cli

import (
	"fmt"
	"log/slog"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/migrations"
)

func init() { register("token", newTokenCmd) }

func newTokenCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token create|list|revoke",
		Short: "Manage the API tokens that authorise REST mutations",
		Long: `token manages bearer tokens for the coordinator's REST API. Every mutating
call (trigger a run, upload an artifact, edit a suite or schedule) needs
'Authorization: Bearer <token>'; reads are open unless the coordinator is
configured to require tokens for them too.

Only a sha256 of each token is stored in PostgreSQL: 'token create' prints
the token once and it cannot be shown again.

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
	var name string
	cmd := &cobra.Command{
		Use:     "create --name NAME",
		Short:   "Create an API token and print it once",
		Long:    "create makes a new API token named NAME (e.g. the CI system that will use it)\nand prints it on stdout. Store it now: it is not kept and cannot be shown again.",
		Example: "  lesfarm token create --name ci\n  TOKEN=$(lesfarm token create --name nightly --database-url postgres://farm@db/lesfarm)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return usagef("token create: --name is required")
			}
			if len(name) > 200 {
				return usagef("token create: --name longer than 200 characters")
			}
			st, closeFn, err := openTokenStore(env, &db)
			if err != nil {
				return err
			}
			defer closeFn()
			secret, tok, err := st.CreateAPIToken(env.Ctx, name)
			if err != nil {
				return err
			}
			fmt.Fprintln(env.Stdout, secret)
			fmt.Fprintf(env.Stderr, "created token %d %q (%s…); it is shown only this once\n", tok.ID, tok.Name, tok.Prefix)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name of the token, e.g. the CI system using it (required)")
	addDBFlags(cmd, &db)
	return cmd
}

func newTokenListCmd(env *Env) *cobra.Command {
	var db dbFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List API tokens (ids, names, prefixes, last use; never the secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, closeFn, err := openTokenStore(env, &db)
			if err != nil {
				return err
			}
			defer closeFn()
			toks, err := st.ListAPITokens(env.Ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tCREATED\tLAST USED\tREVOKED")
			ts := func(t *time.Time) string {
				if t == nil {
					return "-"
				}
				return t.UTC().Format(time.RFC3339)
			}
			for _, t := range toks {
				fmt.Fprintf(tw, "%d\t%s\t%s…\t%s\t%s\t%s\n", t.ID, t.Name, t.Prefix, t.CreatedAt.UTC().Format(time.RFC3339), ts(t.LastUsedAt), ts(t.RevokedAt))
			}
			return tw.Flush()
		},
	}
	addDBFlags(cmd, &db)
	return cmd
}

func newTokenRevokeCmd(env *Env) *cobra.Command {
	var db dbFlags
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API token by id (see 'token list'); it stops working at once",
		Args:  cobra.ExactArgs(1),
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
			if err := st.RevokeAPIToken(env.Ctx, id); err != nil {
				if err == store.ErrNotFound {
					return fmt.Errorf("token revoke: no live token with id %d", id)
				}
				return err
			}
			fmt.Fprintf(env.Stdout, "revoked token %d\n", id)
			return nil
		},
	}
	addDBFlags(cmd, &db)
	return cmd
}
