package natsauth_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/lesfarm/lesfarm/coordinator/natsauth"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// startFunc starts a NATS server that enforces device permissions, and a
// coordinator connection with full permissions.
type startFunc func(t *testing.T, runOnly bool) *farm

// eachAuth runs body against the embedded server's Authenticator and
// against a standalone server configured for auth callout, served by
// natsauth.Callout: the same permissions must hold on both.
func eachAuth(t *testing.T, body func(*testing.T, startFunc)) {
	t.Run("embedded", func(t *testing.T) { body(t, start) })
	t.Run("callout", func(t *testing.T) { body(t, startCallout) })
	t.Run("callout-xkey", func(t *testing.T) {
		body(t, func(t *testing.T, runOnly bool) *farm { return startCalloutWith(t, runOnly, true) })
	})
}

// calloutTTL is the device authorization lifetime in the callout tests.
const calloutTTL = 2 * time.Second

// startCallout runs a nats-server configured as a standalone deployment
// would be (authorization { users: [coordinator], auth_callout { issuer,
// auth_users: [coordinator] } }, see docs/scale.md) and serves the
// callout from the coordinator's connection.
func startCallout(t *testing.T, runOnly bool) *farm { return startCalloutWith(t, runOnly, false) }

// startCalloutWith is startCallout; with xkey the server encrypts its
// requests to the callout's curve key (auth_callout.xkey) and the answers
// come back encrypted to the server's.
func startCalloutWith(t *testing.T, runOnly, xkey bool) *farm {
	t.Helper()
	st, err := store.Open(context.Background(), testenv.MigratedPostgresURL(t), store.Config{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	issuer, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := issuer.Seed()
	var xkeySeed []byte
	if xkey {
		xk, err := nkeys.CreateCurveKeys()
		if err != nil {
			t.Fatal(err)
		}
		xkeySeed, _ = xk.Seed()
	}
	co, err := natsauth.NewCallout(natsauth.CalloutConfig{Verifier: st, IssuerSeed: string(seed), RunOnlySubjects: runOnly, UserTTL: calloutTTL,
		XKeySeed: string(xkeySeed), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	const coordPass = "coordinator-secret"
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		Users:       []*server.User{{Username: natsauth.CoordinatorUser, Password: coordPass}},
		AuthCallout: &server.AuthCallout{Issuer: co.IssuerPublicKey(), AuthUsers: []string{natsauth.CoordinatorUser}, XKey: co.XKeyPublicKey()}})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	f := &farm{ns: ns, st: st, callout: co}
	if f.coord, err = nats.Connect(ns.ClientURL(), nats.UserInfo(natsauth.CoordinatorUser, coordPass)); err != nil {
		t.Fatalf("coordinator user: %v", err)
	}
	t.Cleanup(f.coord.Close)
	if err := co.Start(f.coord); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(co.Stop)
	if f.js, err = jetstream.New(f.coord); err != nil {
		t.Fatal(err)
	}
	for name, subj := range map[string]string{protocol.StreamTelemetry: protocol.TelemetrySubjectPattern, protocol.StreamResults: protocol.ResultSubjectPattern} {
		if _, err := f.js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{subj}}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// TestCalloutRefusedCredentials: through auth callout, no credential, a
// wrong one, one used under another device's name and a revoked one cannot
// connect; revoking a connected device's credential ends its connection
// when its authorization expires, and it cannot come back.
func TestCalloutRefusedCredentials(t *testing.T) {
	ctx := context.Background()
	f := startCallout(t, false)
	secretA, credA, err := f.st.CreateDeviceCredential(ctx, "dev-a")
	if err != nil {
		t.Fatal(err)
	}
	secretB, credB, err := f.st.CreateDeviceCredential(ctx, "dev-b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.RevokeDeviceCredential(ctx, credB.ID); err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]nats.Option{
		"no credential":         nil,
		"wrong secret":          {nats.UserInfo("dev-a", otherSecret(secretA))},
		"API-token-shaped":      {nats.Token("lft_" + secretA[4:])},
		"A's secret as B":       {nats.UserInfo("dev-b", secretA)},
		"revoked":               {nats.UserInfo("dev-b", secretB)},
		"wrong coordinator key": {nats.UserInfo(natsauth.CoordinatorUser, "nope")},
	} {
		_, refusedBefore, _ := f.callout.Stats()
		if _, err := connectDevice(t, f, opts...); !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: connect = %v; want an authorization error", name, err)
		}
		if _, refused, _ := f.callout.Stats(); refused == refusedBefore && name != "wrong coordinator key" {
			t.Errorf("%s: refusal not counted", name)
		}
	}

	disconnected := make(chan struct{}, 1)
	a, err := connectDevice(t, f, nats.UserInfo("dev-a", secretA), inbox("dev-a"),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {
			select {
			case disconnected <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	if granted, _, _ := f.callout.Stats(); granted == 0 {
		t.Fatal("device connected without a callout grant")
	}
	if _, err := f.st.RevokeDeviceCredential(ctx, credA.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-disconnected:
	case <-time.After(calloutTTL + 5*time.Second):
		t.Fatalf("device with a revoked credential still connected %s after its authorization expired", 5*time.Second)
	}
	if a.nc.IsConnected() {
		t.Fatal("device reconnected with a revoked credential")
	}
	if _, err := connectDevice(t, f, nats.UserInfo("dev-a", secretA)); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("reconnect with the revoked credential: %v", err)
	}
}

func TestCalloutConfigErrors(t *testing.T) {
	user, _ := nkeys.CreateUser()
	userSeed, _ := user.Seed()
	for name, cfg := range map[string]natsauth.CalloutConfig{
		"no verifier":    {IssuerSeed: "SAANDLKMXL6CUS3CP52WIXBEDN6YJ545GDKC65U5JZPPV6WH6ESWUA6YAI"},
		"bad seed":       {Verifier: &store.Store{}, IssuerSeed: "nope"},
		"user, not acct": {Verifier: &store.Store{}, IssuerSeed: string(userSeed)},
		"xkey not curve": {Verifier: &store.Store{}, IssuerSeed: "SAANDLKMXL6CUS3CP52WIXBEDN6YJ545GDKC65U5JZPPV6WH6ESWUA6YAI", XKeySeed: string(userSeed)},
	} {
		if _, err := natsauth.NewCallout(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
