// Package embedded starts the servers a farm needs on one machine: an
// in-process NATS server with JetStream, and a PostgreSQL cluster from the
// machine's binaries (through internal/pglocal). lesfarm serve, lesfarm
// demo and the test harness (internal/testenv) start them here, and only
// here; the coordinator is handed a database pool and a NATS connection
// and never starts a server.
package embedded

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/lesfarm/lesfarm/internal/pglocal"
)

// NATSConfig configures StartNATS. StoreDir is required; the zero value of
// every other field picks a default.
type NATSConfig struct {
	// Addr is host:port to listen on; port 0 picks a free port. Empty
	// means 127.0.0.1 on a free port.
	Addr string
	// StoreDir holds the JetStream store; it is created if missing.
	StoreDir string
	// TLS, when set, makes every client speak TLS (tls_required in the
	// server's INFO; a plaintext client is cut off after the handshake
	// timeout).
	TLS *tls.Config
	// Auth authenticates clients in process (e.g. a
	// coordinator/natsauth.Authenticator); nil accepts every client.
	Auth server.Authentication
	// Name is the server name; default "lesfarm-embedded".
	Name string
	// ReadyTimeout bounds the wait for the server to accept connections;
	// default 15s.
	ReadyTimeout time.Duration
	// Logger, when set, receives the server's warnings and errors (nil:
	// the server logs nothing).
	Logger *slog.Logger
}

// StartNATS starts an in-process NATS server with JetStream and returns it
// once it accepts connections. The caller shuts it down (Shutdown, then
// WaitForShutdown). Errors name the address (a port in use) or the bad
// option.
func StartNATS(cfg NATSConfig) (*server.Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("embedded NATS: a store dir is required")
	}
	addr := cmp.Or(cfg.Addr, "127.0.0.1:0")
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: listen address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("embedded NATS: listen address %q: bad port", addr)
	}
	if port == 0 {
		port = -1 // nats-server's "pick a free port"
	}
	if err := os.MkdirAll(cfg.StoreDir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	opts := &server.Options{Host: host, Port: port, JetStream: true, StoreDir: cfg.StoreDir, NoSigs: true, NoLog: true,
		ServerName: cmp.Or(cfg.Name, "lesfarm-embedded"), TLSConfig: cfg.TLS, CustomClientAuthentication: cfg.Auth}
	if cfg.TLS != nil {
		opts.TLSTimeout = 5
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	if cfg.Logger != nil {
		ns.SetLoggerV2(natsLogger{cfg.Logger}, false, false, false)
	}
	go ns.Start()
	if !ns.ReadyForConnections(cmp.Or(cfg.ReadyTimeout, 15*time.Second)) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded NATS on %s not ready (port in use?)", addr)
	}
	return ns, nil
}

// StartPostgres starts (initialising on first use) a local PostgreSQL
// cluster in cfg.DataDir from the machine's binaries; see pglocal.Start
// (when we are root the postgres user runs the server, so the data dir's
// parent must be reachable by it). The caller stops it.
func StartPostgres(ctx context.Context, cfg pglocal.Config) (*pglocal.Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("local postgres: a data dir is required")
	}
	srv, err := pglocal.Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("local postgres: %w", err)
	}
	return srv, nil
}
