package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/natsauth"
	"github.com/lesfarm/lesfarm/dashboard"
	"github.com/lesfarm/lesfarm/internal/embedded"
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
		queueWait   time.Duration
		authReads   bool
		logLevel    string
		natsCreds   string
		natsCA      string
		natsAuth    string
		tlsFlags    serveTLSFlags
		replicas    int
		calloutSeed string
		calloutXKey string
		health      serveHealthFlags
	)
	cmd := &cobra.Command{
		Use:   "serve [--http-addr 127.0.0.1:8080] [--data-dir DIR] [--nats-url URL] [--database-url URL]",
		Short: "Run the coordinator: REST API, device protocol over NATS, scheduler, ingest, nightly schedules",
		Long: `serve runs the coordinator, the farm's brain. Postgres holds every state
(devices, runs, leases, results, samples); NATS carries the device protocol
(hello, heartbeat, assignments, cancels) and JetStream the telemetry and
results, which are written to Postgres and acknowledged only after commit.

With no flags everything is embedded, kept in --data-dir:
  - a NATS server with JetStream listening on --nats-listen, where each
    device authenticates with its own credential and may speak only for
    itself (see --nats-auth):
      lesfarm token create --device pixel-8-a     (prints SECRET once)
      lesfarm agent --nats-url nats://127.0.0.1:4222 --name pixel-8-a --device-token SECRET
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

--nats-auth sets what the embedded NATS server asks of its clients:
  strict   (default) a device connects only with a credential from
           'lesfarm token create --device ID' (as --token, or --password with
           --user ID); it may publish only its own hello, heartbeat,
           telemetry and results (lesfarm.v1.telemetry.<device>.<run>),
           receive only its own assignments and cancels, and read only its
           own inboxes (_INBOX.<device>.>). It cannot speak for another
           device.
  devices  as strict, but also accepts telemetry and results on the run-only
           subjects (lesfarm.v1.telemetry.<run>, which do not name the
           device) and the shared _INBOX.> of agents from before
           device-scoped subjects.
  none     no authentication: any client may speak for any device. Only for
           a trusted lab network.
Revoking a credential ('lesfarm token revoke --device CREDENTIAL_ID') refuses new
connections at once and disconnects open ones within 10 seconds. With
--nats-url, authentication is the external NATS server's (--nats-creds).

/readyz also checks the data dir's free space (--min-free-space) and a
JetStream probe publish; the embedded JetStream is restarted in process
once space is back after a full disk, the embedded PostgreSQL is restarted
with backoff when it dies (serve exits non-zero after --pg-max-restarts
failures in a row), and one data dir takes one serve (a lock). See
docs/operations.md.

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
			if replicas < 1 || replicas > 5 {
				return usagef("--stream-replicas %d: want 1..5", replicas)
			}
			if calloutXKey != "" && calloutSeed == "" {
				return usagef("--nats-callout-xkey-seed encrypts the auth callout of --nats-callout-seed")
			}
			if calloutSeed != "" && natsURL == "" {
				return usagef("--nats-callout-seed serves auth callout for an external NATS (--nats-url); the embedded one authenticates with --nats-auth")
			}
			switch natsAuth {
			case "devices", "strict", "none":
			default:
				return usagef("--nats-auth %q: want devices, strict or none", natsAuth)
			}
			if natsURL != "" && cmd.Flags().Changed("nats-auth") {
				return usagef("--nats-auth applies to the embedded NATS server; with --nats-url the server's own authorization applies (see --nats-creds)")
			}
			httpTLS, natsTLS, err := tlsFlags.configs(natsURL != "")
			if err != nil {
				return err
			}
			var natsOpts []nats.Option
			if natsCreds != "" || natsCA != "" {
				if natsURL == "" {
					return usagef("--nats-creds and --ca need --nats-url (the embedded server authenticates with --nats-auth)")
				}
				if natsCreds != "" {
					natsOpts = append(natsOpts, nats.UserCredentials(natsCreds))
				}
				if natsCA != "" {
					natsOpts = append(natsOpts, nats.RootCAs(natsCA))
				}
			}
			log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))
			stopPprof, err := startPprof(log)
			if err != nil {
				return err
			}
			defer stopPprof()
			if natsURL == "" || db.DatabaseURL == "" {
				release, err := lockDataDir(db.DataDir)
				if err != nil {
					return err
				}
				defer release()
			}
			deps, err := provision(env.Ctx, provisionConfig{DataDir: db.DataDir, DatabaseURL: db.DatabaseURL, NATSURL: natsURL,
				NATSListen: natsListen, NATSAuth: natsAuth, NATSTLS: natsTLS, NATSOptions: natsOpts, Name: name, Log: log})
			if err != nil {
				return err
			}
			defer deps.Close()
			auth := deps.auth
			hc, err := health.config(deps, db.DataDir)
			if err != nil {
				return err
			}
			pgFailed := health.supervise(env.Ctx, deps)
			c, err := coordinator.New(coordinator.Config{Health: hc,
				Store: deps.store, NATS: deps.nc, DataDir: db.DataDir, HTTPAddr: httpAddr, HTTPTLS: httpTLS, ArtifactBaseURL: artifactURL, Name: name, HeartbeatTTL: ttl, QueueTimeout: queueWait,
				RequireAuthForReads: authReads, Version: BuildVersion(), Logger: log, Mount: dashboard.Mount,
				Ingest: ingest.Config{Replicas: replicas},
			})
			if err != nil {
				return usagef("%v", err)
			}
			if err := c.Start(env.Ctx); err != nil {
				return err
			}
			if auth != nil {
				auth.SetVerifier(c.Store())
			}
			if calloutSeed != "" {
				stop, err := startCallout(natsURL, natsOpts, calloutSeed, calloutXKey, natsAuth != "strict", c, log)
				if err != nil {
					_ = c.Stop()
					return err
				}
				defer stop()
			}
			fmt.Fprintf(env.Stdout, "lesfarm coordinator %s\n  http: %s\n  nats: %s\n", c.Name(), c.HTTPURL(), c.NATSURL())
			select {
			case <-env.Ctx.Done():
				log.Info("serve: shutting down")
				return c.Stop()
			case err := <-pgFailed:
				log.Error("serve: the embedded PostgreSQL keeps failing, exiting so a supervisor restarts serve", "err", err)
				return errors.Join(fmt.Errorf("embedded PostgreSQL: %w", err), c.Stop())
			}
		},
	}
	addDBFlags(cmd, &db)
	f := cmd.Flags()
	f.StringVar(&httpAddr, "http-addr", "127.0.0.1:8080", "address of the REST API and dashboard (port 0 picks a free port; empty disables HTTP)")
	f.StringVar(&natsURL, "nats-url", os.Getenv("NATS_URL"), "NATS server with JetStream (env NATS_URL); empty runs an embedded one")
	f.StringVar(&natsCreds, "nats-creds", "", "NATS credentials file (JWT + nkey seed) for --nats-url")
	f.StringVar(&natsCA, "ca", "", "PEM file of the CA that signed the --nats-url server's TLS certificate")
	aliasFlag(f, "nats-ca", "ca")
	f.StringVar(&natsListen, "nats-listen", "127.0.0.1:4222", "host:port of the embedded NATS server (port 0 picks a free port)")
	f.StringVar(&natsAuth, "nats-auth", "strict", "authentication of the embedded NATS server: strict (per-device credentials; each device publishes and reads only under its own id), devices (also accepts the run-only data subjects and shared inbox of older agents) or none (trusted lab)")
	f.StringVar(&artifactURL, "artifact-url", "", "base URL agents download artifacts from (default http://HTTP-ADDR)")
	f.StringVar(&name, "name", "", "name of this coordinator in leases and logs (default hostname:pid)")
	f.StringVar(&calloutXKey, "nats-callout-xkey-seed", "", "file holding a curve nkey seed (SX...) whose public key is the server's auth_callout.xkey: requests and answers are then encrypted")
	f.StringVar(&calloutSeed, "nats-callout-seed", "", "file holding the account nkey seed (SA...) whose public key is the external NATS server's auth_callout issuer: serve per-device authorization to it (docs/scale.md)")
	f.IntVar(&replicas, "stream-replicas", 1, "replicas of the TELEMETRY and RESULTS streams (3 on a NATS cluster of three or more nodes)")
	f.DurationVar(&ttl, "heartbeat-ttl", 15*time.Second, "device TTL: a device silent this long is lost and its run requeued")
	f.DurationVar(&queueWait, "queue-timeout", coordinator.DefaultQueueTimeout, "a run no device took for this long ends as an infrastructure failure saying why it waited (negative: never)")
	f.BoolVar(&authReads, "auth-reads", false, "require an API token for reads (GET) too")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	tlsFlags.add(cmd)
	health.add(cmd)
	return cmd
}

// startEmbeddedNATS starts the coordinator's embedded NATS server with
// JetStream in DATA_DIR/nats, listening on addr (port 0 picks a free one).
// mode "devices" or "strict" installs a device authenticator (returned; the
// coordinator connects with its CoordinatorOptions and sets its verifier
// once the store is open), "none" leaves the server open.
func startEmbeddedNATS(addr, dataDir, mode string, tlsConfig *tls.Config, log *slog.Logger) (*server.Server, *natsauth.Authenticator, error) {
	if err := listenAddr(addr); err != nil {
		return nil, nil, err
	}
	dir := filepath.Join(dataDir, "nats")
	cfg := embedded.NATSConfig{Addr: addr, StoreDir: dir, TLS: tlsConfig, Logger: log}
	var auth *natsauth.Authenticator
	if mode != "none" {
		var err error
		if auth, err = natsauth.New(natsauth.Config{RunOnlySubjects: mode != "strict", Logger: log}); err != nil {
			return nil, nil, err
		}
		cfg.Auth = auth
	}
	ns, err := embedded.StartNATS(cfg)
	if err != nil {
		return nil, nil, err
	}
	log.Info("serve: embedded NATS with JetStream", "url", ns.ClientURL(), "store_dir", dir, "auth", mode, "tls", tlsConfig != nil)
	return ns, auth, nil
}

// startCallout serves NATS auth callout (natsauth.Callout) on its own
// connection to the external NATS, with the issuer seed read from
// seedFile, checking device credentials in the coordinator's store.
func startCallout(natsURL string, opts []nats.Option, seedFile, xkeyFile string, runOnly bool, c *coordinator.Coordinator, log *slog.Logger) (func(), error) {
	seed, err := os.ReadFile(seedFile)
	if err != nil {
		return nil, fmt.Errorf("--nats-callout-seed: %w", err)
	}
	var xkey []byte
	if xkeyFile != "" {
		if xkey, err = os.ReadFile(xkeyFile); err != nil {
			return nil, fmt.Errorf("--nats-callout-xkey-seed: %w", err)
		}
	}
	co, err := natsauth.NewCallout(natsauth.CalloutConfig{Verifier: c.Store(), IssuerSeed: strings.TrimSpace(string(seed)),
		XKeySeed: strings.TrimSpace(string(xkey)), RunOnlySubjects: runOnly, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--nats-callout-seed %s: %w", seedFile, err)
	}
	nc, err := nats.Connect(natsURL, append([]nats.Option{nats.Name("lesfarm-coordinator auth callout " + c.Name()), nats.MaxReconnects(-1)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("auth callout: connect to NATS: %w", err)
	}
	if err := co.Start(nc); err != nil {
		nc.Close()
		return nil, err
	}
	log.Info("serve: serving NATS auth callout", "issuer", co.IssuerPublicKey(), "xkey", co.XKeyPublicKey())
	return func() { co.Stop(); nc.Close() }, nil
}

// listenAddr checks a --nats-listen host:port (port 0 picks a free one).
func listenAddr(addr string) error {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--nats-listen %q: %v", addr, err)
	}
	if port, err := strconv.Atoi(portStr); err != nil || port < 0 || port > 65535 {
		return usagef("--nats-listen %q: bad port", addr)
	}
	return nil
}
