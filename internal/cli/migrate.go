package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/migrations"
)

func init() { register("migrate", newMigrateCmd) }

func newMigrateCmd(env *Env) *cobra.Command {
	var db dbFlags
	cmd := &cobra.Command{
		Use:   "migrate up|down|status",
		Short: "Apply, roll back or list the coordinator's database migrations",
		Long: `migrate manages the coordinator's PostgreSQL schema. The migrations are
numbered SQL files embedded in this binary; they are applied under a
PostgreSQL session lock, so coordinators starting together migrate once.
'lesfarm serve' applies pending migrations itself at startup.

  up      apply every pending migration
  down    roll back the most recent migration
  status  list migrations and whether each is applied; when the database
          is ahead of this binary (a newer lesfarm migrated it), say so and
          exit 1: serve refuses to start on it

Without --database-url, a local PostgreSQL is started in DATA_DIR/pg.`,
		Example: "  lesfarm migrate status\n  lesfarm migrate up --database-url postgres://farm@db/lesfarm",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			action := args[0]
			if action != "up" && action != "down" && action != "status" {
				return usagef("migrate: unknown action %q (want up, down or status)", action)
			}
			log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			url, stop, err := db.openDatabase(env.Ctx, log)
			if err != nil {
				return err
			}
			defer stop()
			m, err := migrations.New(url)
			if err != nil {
				return err
			}
			defer m.Close()
			switch action {
			case "up":
				n, err := m.Up(env.Ctx)
				if err != nil {
					return err
				}
				fmt.Fprintf(env.Stdout, "applied %d migration(s)\n", n)
			case "down":
				done, err := m.Down(env.Ctx)
				if err != nil {
					return err
				}
				if !done {
					fmt.Fprintln(env.Stdout, "no migration to roll back")
				} else {
					fmt.Fprintln(env.Stdout, "rolled back 1 migration")
				}
			case "status":
				st, err := m.Status(env.Ctx)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "VERSION\tAPPLIED\tFILE")
				for _, s := range st {
					fmt.Fprintf(tw, "%05d\t%v\t%s\n", s.Version, s.Applied, s.Name)
				}
				tw.Flush()
				var ahead *migrations.SchemaAheadError
				if err := m.CheckNotAhead(env.Ctx); errors.As(err, &ahead) {
					fmt.Fprintf(env.Stdout, "database ahead of this binary: schema version %05d, newest migration here %05d\n", ahead.Database, ahead.Binary)
					return &ExitError{Code: 1, Msg: err.Error()}
				} else if err != nil {
					return err
				}
			}
			return nil
		},
	}
	addDBFlags(cmd, &db)
	return cmd
}
