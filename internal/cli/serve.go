package cli

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/dashboard"
)

func init() { register("serve", newServeCmd) }

func newServeCmd(env *Env) *cobra.Command {
	var (
		db          dbFlags
		httpAddr    string
		natsURL     string
		natsListen  string
		artifactURL string
		name        string
		ttl         time.Duration
		authReads   bool
		logLevel    string
		natsCreds   string
		natsCA      string
	)
	cmd := &cobra.Command{
		Use:   "serve [--http-addr 127.0.0.1:8080] [--data-dir DIR] [--nats-url URL] [--database-url URL]",
		Short: "Run the coordinator: REST API, device protocol over NATS, scheduler, ingest, nightly schedules",
		Long: `serve runs the coordinator, the farm's brain. Postgres holds every state
(devices, runs, leases, results, samples); NATS carries the device protocol
(hello, heartbeat, assignments, cancels) and JetStream the telemetry and
results, which are written to Postgres and acknowledged only after commit.

With no flags everything is embedded, kept in --data-dir:
  - a NATS server with JetStream listening on --nats-listen (agents connect
    there: lesfarm agent --nats-url nats://127.0.0.1:4222);
  - a PostgreSQL started from the machine's binaries in DATA_DIR/pg
    (install with 'apt-get install -y postgresql' or point --database-url
    at a server);
  - the artifact store in DATA_DIR/artifacts.
--nats-url and --database-url point at real ones instead; several
coordinators may share one database and one NATS cluster.

Migrations are applied at startup. --http-addr 127.0.0.1:0 picks a free
port and logs the address. SIGINT or SIGTERM shuts down gracefully: HTTP
stops, in-flight telemetry is committed and acknowledged, and the embedded
NATS and PostgreSQL are stopped.

REST mutations need a token: lesfarm token create --name NAME.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return usagef("--log-level %q: want debug, info, warn or error", logLevel)
			}
			if ttl < time.Second || ttl > time.Hour {
				return usagef("--heartbeat-ttl %s: want between 1s and 1h", ttl)
			}
			if httpAddr != "" && !strings.Contains(httpAddr, ":") {
				return usagef("--http-addr %q: want host:port", httpAddr)
			}
			var natsOpts []nats.Option
			if natsCreds != "" || natsCA != "" {
				if natsURL == "" {
					return usagef("--nats-creds and --nats-ca need --nats-url (the embedded server has no authentication)")
				}
				if natsCreds != "" {
					natsOpts = append(natsOpts, nats.UserCredentials(natsCreds))
				}
				if natsCA != "" {
					natsOpts = append(natsOpts, nats.RootCAs(natsCA))
				}
			}
			log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))
			if db.DatabaseURL == "" || natsURL == "" {
				if err := os.MkdirAll(db.DataDir, 0o755); err != nil {
					return fmt.Errorf("data dir: %w", err)
				}
			}
			c, err := coordinator.New(coordinator.Config{
				DataDir: db.DataDir, DatabaseURL: db.DatabaseURL, NATSURL: natsURL, EmbeddedNATSAddr: natsListen,
				NATSOptions: natsOpts, HTTPAddr: httpAddr, ArtifactBaseURL: artifactURL, Name: name, HeartbeatTTL: ttl,
				RequireAuthForReads: authReads, Version: BuildVersion(), Logger: log, Mount: dashboard.Mount,
			})
			if err != nil {
				return usagef("%v", err)
			}
			if err := c.Start(env.Ctx); err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "lesfarm coordinator %s\n  http: http://%s\n  nats: %s\n", c.Name(), c.HTTPAddr(), c.NATSURL())
			<-env.Ctx.Done()
			log.Info("serve: shutting down")
			return c.Stop()
		},
	}
	addDBFlags(cmd, &db)
	f := cmd.Flags()
	f.StringVar(&httpAddr, "http-addr", "127.0.0.1:8080", "address of the REST API and dashboard (port 0 picks a free port; empty disables HTTP)")
	f.StringVar(&natsURL, "nats-url", os.Getenv("NATS_URL"), "NATS server with JetStream (env NATS_URL); empty runs an embedded one")
	f.StringVar(&natsCreds, "nats-creds", "", "NATS credentials file (JWT + nkey seed) for --nats-url")
	f.StringVar(&natsCA, "nats-ca", "", "PEM file of the CA that signed the NATS server's TLS certificate")
	f.StringVar(&natsListen, "nats-listen", "127.0.0.1:4222", "host:port of the embedded NATS server (port 0 picks a free port)")
	f.StringVar(&artifactURL, "artifact-url", "", "base URL agents download artifacts from (default http://HTTP-ADDR)")
	f.StringVar(&name, "name", "", "name of this coordinator in leases and logs (default hostname:pid)")
	f.DurationVar(&ttl, "heartbeat-ttl", 15*time.Second, "device TTL: a device silent this long is lost and its run requeued")
	f.BoolVar(&authReads, "auth-reads", false, "require an API token for reads (GET) too")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}
