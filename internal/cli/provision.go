package cli

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/natsauth"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/cli/labca"
	"github.com/lesfarm/lesfarm/internal/embedded"
	"github.com/lesfarm/lesfarm/internal/pglocal"
)

// provisionConfig says where serve and demo find, or start, the database
// and NATS a coordinator is handed.
type provisionConfig struct {
	// DataDir holds the embedded NATS store (nats/) and the local
	// Postgres cluster (pg/).
	DataDir string
	// DatabaseURL is an existing Postgres; empty starts a local cluster in
	// DataDir/pg from the machine's binaries.
	DatabaseURL string
	// NATSURL is an existing NATS server with JetStream; empty starts an
	// embedded one in DataDir/nats listening on NATSListen.
	NATSURL string
	// NATSListen is host:port of the embedded server (port 0: a free one).
	NATSListen string
	// NATSAuth is the embedded server's authentication: strict, devices or
	// none (see serve --nats-auth).
	NATSAuth string
	// NATSTLS, when set, makes the embedded server TLS-only.
	NATSTLS *tls.Config
	// NATSOptions are the coordinator's client options for NATSURL
	// (credentials, CA).
	NATSOptions []nats.Option
	// Name is the coordinator's name (its NATS connection name).
	Name string
	Log  *slog.Logger
}

// farmDeps are a coordinator's database and NATS connection, with the
// servers started for them. Close releases everything, in reverse order.
type farmDeps struct {
	store *store.Store
	nc    *nats.Conn
	// auth is the embedded server's device authenticator (nil with
	// NATSURL or --nats-auth none); set its verifier once the coordinator
	// has started.
	auth      *natsauth.Authenticator
	ns        *server.Server
	pg        *pglocal.Server
	stopWatch context.CancelFunc
}

// provision starts what cfg asks for and connects to it: the one place
// serve and demo bring up embedded NATS and a local Postgres (through
// internal/embedded, which the test harness shares). On error everything
// started so far is stopped.
func provision(ctx context.Context, cfg provisionConfig) (d *farmDeps, err error) {
	d = &farmDeps{}
	defer func() {
		if err != nil {
			_ = d.Close()
		}
	}()
	log := cmp.Or(cfg.Log, slog.Default())
	if cfg.DatabaseURL == "" || cfg.NATSURL == "" {
		if cfg.DataDir == "" {
			return nil, errors.New("a data dir is required for embedded NATS or a local Postgres")
		}
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
	}
	natsURL, natsOpts := cfg.NATSURL, cfg.NATSOptions
	if natsURL == "" {
		if d.ns, d.auth, err = startEmbeddedNATS(cfg.NATSListen, cfg.DataDir, cfg.NATSAuth, cfg.NATSTLS, log); err != nil {
			return nil, err
		}
		if cfg.NATSTLS != nil {
			// The coordinator's own connection trusts exactly the
			// listener's certificate, whatever names it carries.
			pin, err := labca.PinnedClientConfig(cfg.NATSTLS)
			if err != nil {
				return nil, err
			}
			natsOpts = append(natsOpts, nats.Secure(pin))
		}
		natsURL = d.ns.ClientURL()
		if d.auth != nil {
			natsOpts = append(natsOpts, d.auth.CoordinatorOptions()...)
			var wctx context.Context
			wctx, d.stopWatch = context.WithCancel(context.WithoutCancel(ctx))
			go d.auth.Watch(wctx, d.ns, 10*time.Second)
		}
	}
	dbURL := cfg.DatabaseURL
	if dbURL == "" {
		dir := filepath.Join(cfg.DataDir, "pg")
		log.InfoContext(ctx, "provision: starting local postgres", "dir", dir)
		if d.pg, err = embedded.StartPostgres(ctx, pglocal.Config{DataDir: dir, Logger: log}); err != nil {
			return nil, err
		}
		dbURL = d.pg.URL()
	}
	if d.store, err = store.Open(ctx, dbURL, store.Config{MaxConns: 32}); err != nil {
		return nil, err
	}
	if d.nc, err = nats.Connect(natsURL, append(coordinator.NATSOptions(cfg.Name), natsOpts...)...); err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", natsURL, err)
	}
	return d, nil
}

// Close closes the connection and the store, then stops the embedded NATS
// and the local Postgres, after the coordinator has stopped.
func (d *farmDeps) Close() error {
	if d.stopWatch != nil {
		d.stopWatch()
	}
	if d.nc != nil {
		d.nc.Close()
	}
	if d.store != nil {
		d.store.Close()
	}
	if d.ns != nil {
		d.ns.Shutdown()
		d.ns.WaitForShutdown()
	}
	if d.pg != nil {
		return d.pg.Stop()
	}
	return nil
}
