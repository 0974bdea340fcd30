package cli

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/internal/pglocal"
)

// defaultDataDir is where lesfarm keeps its state when --data-dir is not
// given: $LESFARM_DATA_DIR, else /var/lib/lesfarm for root (the postgres
// user cannot reach /root), else $XDG_DATA_HOME/lesfarm or
// ~/.local/share/lesfarm.
func defaultDataDir() string {
	if d := os.Getenv("LESFARM_DATA_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/lib/lesfarm"
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "lesfarm")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "lesfarm")
	}
	return filepath.Join(os.TempDir(), "lesfarm")
}

// dbFlags are the flags every command that talks to Postgres shares.
type dbFlags struct {
	DatabaseURL string
	DataDir     string
}

// addDBFlags registers --database-url and --data-dir on cmd.
func addDBFlags(cmd *cobra.Command, f *dbFlags) {
	cmd.Flags().StringVar(&f.DatabaseURL, "database-url", os.Getenv("DATABASE_URL"),
		"PostgreSQL URL (env DATABASE_URL); empty starts a local PostgreSQL from the machine's binaries in the data dir")
	cmd.Flags().StringVar(&f.DataDir, "data-dir", defaultDataDir(),
		"directory for local state: embedded PostgreSQL cluster, NATS store, artifacts (env LESFARM_DATA_DIR)")
}

// openDatabase returns a database URL: --database-url when given, else the
// URL of a local PostgreSQL started in DATA_DIR/pg. stop shuts the local
// server down (a no-op for an external URL).
func (f *dbFlags) openDatabase(ctx context.Context, log *slog.Logger) (url string, stop func(), err error) {
	if f.DatabaseURL != "" {
		return f.DatabaseURL, func() {}, nil
	}
	srv, err := pglocal.Start(ctx, pglocal.Config{DataDir: filepath.Join(f.DataDir, "pg"), Logger: log})
	if err != nil {
		return "", nil, err
	}
	return srv.URL(), func() { _ = srv.Stop() }, nil
}
