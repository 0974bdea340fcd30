package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/coordinatortest"
	"github.com/lesfarm/lesfarm/coordinator/natsauth"
	"github.com/lesfarm/lesfarm/internal/embedded"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// authFarm is a coordinator on a database of its own behind the embedded
// NATS server with device authentication (as lesfarm serve runs it), with
// a short credential hold, and agents with a short connect timeout, so
// the tests are quick.
type authFarm struct {
	pg   *testenv.OwnPostgres
	auth *natsauth.Authenticator
	ns   *server.Server
	c    *coordinator.Coordinator
}

func newAuthFarm(t *testing.T) *authFarm {
	t.Helper()
	pg := testenv.NewOwnPostgres(t)
	auth, err := natsauth.New(natsauth.Config{UnavailableWait: 800 * time.Millisecond, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := embedded.StartNATS(embedded.NATSConfig{StoreDir: t.TempDir(), Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	c := startCoordinator(t, coordinatortest.Config(t, coordinator.Config{Name: "c-auth"}, pg.URL(), ns.ClientURL(), auth.CoordinatorOptions()...))
	auth.SetVerifier(c.Store())
	return &authFarm{pg: pg, auth: auth, ns: ns, c: c}
}

// TestE2EDatabaseOutageDoesNotLockDeviceOut: Postgres stops, the agent's
// socket is cut, the agent tries to reconnect several times while the
// credential cannot be checked, then Postgres comes back. Each attempt
// must be a temporary refusal (nats.go stops reconnecting after two
// authorization errors in a row), so the device comes back online by
// itself.
func TestE2EDatabaseOutageDoesNotLockDeviceOut(t *testing.T) {
	f := newAuthFarm(t)
	ctx := context.Background()
	secret, _, err := f.c.Store().CreateDeviceCredential(ctx, "dev-lock")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(f.ns.ClientURL())
	proxy := startFaultProxy(t, u.Host)
	ra := startAgent(t, Config{NATSURL: proxy.url(), Name: "dev-lock", User: "dev-lock", Password: secret, ConnectTimeout: 300 * time.Millisecond})

	f.pg.Stop()
	n0 := proxy.forwarded()
	proxy.cut()
	proxy.restore()
	// Three reconnects held off while the database is down: before the
	// fix the second authorization error ended the agent's reconnecting.
	waitFor(t, 20*time.Second, "three connections held off during the outage", func() bool {
		return proxy.forwarded() >= n0+3 && f.auth.Unavailable() >= 3
	})
	if st := ra.a.Status(); st.Connected {
		t.Fatal("agent connected while the database was down")
	}
	f.pg.Start()
	waitFor(t, 20*time.Second, "device back online", func() bool {
		st := ra.a.Status()
		if !st.Connected || !st.Registered {
			return false
		}
		d, err := f.c.Store().GetDevice(ctx, "dev-lock")
		return err == nil && d.State == "online"
	})
	select {
	case err := <-ra.done:
		t.Fatalf("agent exited: %v", err)
	default:
	}
}

// TestE2EInvalidCredentialEndsAgent: a credential the database really
// rejects is refused, nats.go gives up after two refusals, and Run returns
// ErrCredentialRefused (a non-zero exit) instead of staying alive offline.
func TestE2EInvalidCredentialEndsAgent(t *testing.T) {
	f := newAuthFarm(t)
	a, err := New(Config{NATSURL: f.ns.ClientURL(), Name: "dev-bad", User: "dev-bad", Password: "lfd_not-a-credential",
		CacheDir: t.TempDir(), ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = a.Run(ctx)
	if !errors.Is(err, ErrCredentialRefused) {
		t.Fatalf("Run = %v, want ErrCredentialRefused", err)
	}
	if f.auth.Refused() < 2 {
		t.Fatalf("refused %d connections, want >= 2", f.auth.Refused())
	}
}

// testLogger discards logs unless the test runs with -v.
func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}
