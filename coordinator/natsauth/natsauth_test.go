package natsauth_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/coordinator/natsauth"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/embedded"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

type farm struct {
	ns      *server.Server
	auth    *natsauth.Authenticator // nil with auth callout
	callout *natsauth.Callout       // nil with the embedded authenticator
	st      *store.Store
	coord   *nats.Conn
	js      jetstream.JetStream
}

// start runs a real embedded NATS server with JetStream and the
// authenticator backed by a real store, connects the coordinator user and
// creates the telemetry and result streams as the coordinator does.
func start(t *testing.T, runOnly bool) *farm {
	t.Helper()
	st, err := store.Open(context.Background(), testenv.MigratedPostgresURL(t), store.Config{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	auth, err := natsauth.New(natsauth.Config{Verifier: st, RunOnlySubjects: runOnly})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := embedded.StartNATS(embedded.NATSConfig{StoreDir: t.TempDir(), Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	f := &farm{ns: ns, auth: auth, st: st}
	f.coord, err = nats.Connect(ns.ClientURL(), auth.CoordinatorOptions()...)
	if err != nil {
		t.Fatalf("coordinator user: %v", err)
	}
	t.Cleanup(f.coord.Close)
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

// device connects as a device and collects the asynchronous permission
// errors the server reports.
type device struct {
	nc   *nats.Conn
	mu   sync.Mutex
	errs []string
}

func (d *device) violations() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.errs...)
}

func (d *device) waitViolation(t *testing.T, subject string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		for _, e := range d.violations() {
			if strings.Contains(e, subject) {
				return nil
			}
		}
		return fmt.Errorf("no permissions violation reported for %s; got %q", subject, d.violations())
	})
}

// inbox gives a device connection its own inbox prefix, as agents use.
func inbox(id string) nats.Option { return nats.CustomInboxPrefix(protocol.DeviceInboxPrefix(id)) }

func connectDevice(t *testing.T, f *farm, opts ...nats.Option) (*device, error) {
	t.Helper()
	d := &device{}
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		d.mu.Lock()
		d.errs = append(d.errs, err.Error())
		d.mu.Unlock()
	}), nats.MaxReconnects(0))
	nc, err := nats.Connect(f.ns.ClientURL(), opts...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(nc.Close)
	d.nc = nc
	return d, nil
}

func streamCount(t *testing.T, f *farm, stream, subject string) uint64 {
	t.Helper()
	s, err := f.js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// TestDeviceSpeaksOnlyForItself runs device A's whole protocol surface
// (hello and heartbeat requests, assign and cancel replies, JetStream
// telemetry and result publishes with acks) with its credential, then
// checks that every attempt to speak for device B is a permissions
// violation and leaves nothing in the streams under B.
func TestDeviceSpeaksOnlyForItself(t *testing.T) { eachAuth(t, testDeviceSpeaksOnlyForItself) }

func testDeviceSpeaksOnlyForItself(t *testing.T, start startFunc) {
	ctx := context.Background()
	f := start(t, false)
	secretA, _, err := f.st.CreateDeviceCredential(ctx, "dev-a")
	if err != nil {
		t.Fatal(err)
	}
	// The coordinator answers hello and heartbeat for every device.
	for _, w := range []string{protocol.HelloWildcard, protocol.HeartbeatWildcard} {
		if _, err := f.coord.Subscribe(w, func(m *nats.Msg) { _ = m.Respond([]byte("ok " + m.Subject)) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.coord.Flush(); err != nil {
		t.Fatal(err)
	}
	a, err := connectDevice(t, f, nats.UserInfo("dev-a", secretA), inbox("dev-a"))
	if err != nil {
		t.Fatalf("device A with its credential: %v", err)
	}

	// Own protocol: requests, subscriptions with replies, JetStream.
	for _, subj := range []string{protocol.HelloSubject("dev-a"), protocol.HeartbeatSubject("dev-a")} {
		if m, err := a.nc.Request(subj, []byte("{}"), 2*time.Second); err != nil || string(m.Data) != "ok "+subj {
			t.Fatalf("request %s: %v", subj, err)
		}
	}
	for _, subj := range []string{protocol.AssignSubject("dev-a"), protocol.CancelSubject("dev-a")} {
		if _, err := a.nc.Subscribe(subj, func(m *nats.Msg) { _ = m.Respond([]byte("accepted")) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{protocol.AssignSubject("dev-a"), protocol.CancelSubject("dev-a")} {
		if m, err := f.coord.Request(subj, []byte("{}"), 2*time.Second); err != nil || string(m.Data) != "accepted" {
			t.Fatalf("coordinator request %s: %v", subj, err)
		}
	}
	jsA, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jsA.Publish(ctx, protocol.DeviceTelemetrySubject("dev-a", 5), []byte("{}"), jetstream.WithMsgID("t/5/1/0")); err != nil {
		t.Fatalf("telemetry on A's own subject: %v", err)
	}
	if _, err := jsA.Publish(ctx, protocol.DeviceResultSubject("dev-a", 5), []byte("{}")); err != nil {
		t.Fatalf("result on A's own subject: %v", err)
	}
	if v := a.violations(); len(v) != 0 {
		t.Fatalf("A's own protocol raised violations: %q", v)
	}

	// Speaking for B.
	for _, subj := range []string{protocol.DeviceTelemetrySubject("dev-b", 6), protocol.DeviceResultSubject("dev-b", 6)} {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := jsA.Publish(pctx, subj, []byte("{}"))
		cancel()
		if err == nil {
			t.Fatalf("A published %s", subj)
		}
		a.waitViolation(t, subj)
	}
	// Run-only subjects are closed unless RunOnlySubjects.
	if err := a.nc.Publish(protocol.TelemetrySubject(6), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	a.waitViolation(t, protocol.TelemetrySubject(6))
	for _, subj := range []string{protocol.HelloSubject("dev-b"), protocol.HeartbeatSubject("dev-b"), protocol.AssignSubject("dev-b"), "$JS.API.STREAM.DELETE.TELEMETRY"} {
		if err := a.nc.Publish(subj, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		a.waitViolation(t, subj)
	}
	for _, subj := range []string{protocol.AssignSubject("dev-b"), protocol.CancelSubject("dev-b"), protocol.HelloWildcard, "lesfarm.>", ">",
		"_INBOX.>", protocol.DeviceInboxPrefix("dev-b") + ".>"} { // other devices' replies
		if _, err := a.nc.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		a.waitViolation(t, subj)
	}
	if n := streamCount(t, f, protocol.StreamTelemetry, "lesfarm.v1.telemetry.dev-b.>"); n != 0 {
		t.Fatalf("%d telemetry messages stored under dev-b", n)
	}
	if n := streamCount(t, f, protocol.StreamResults, "lesfarm.v1.result.dev-b.>"); n != 0 {
		t.Fatalf("%d results stored under dev-b", n)
	}
	if n := streamCount(t, f, protocol.StreamTelemetry, protocol.TelemetrySubject(6)); n != 0 {
		t.Fatalf("%d run-only telemetry messages stored", n)
	}
	if n := streamCount(t, f, protocol.StreamTelemetry, "lesfarm.v1.telemetry.dev-a.>"); n != 1 {
		t.Fatalf("%d telemetry messages under dev-a, want 1", n)
	}
	if n := streamCount(t, f, protocol.StreamResults, ">"); n != 1 {
		t.Fatalf("%d results stored in all, want A's 1", n)
	}
}

// TestRunOnlySubjects checks the compatibility mode: a device may publish
// on lesfarm.v1.telemetry.<run>, never on another device's scoped subject.
func TestRunOnlySubjects(t *testing.T) { eachAuth(t, testRunOnlySubjects) }

func testRunOnlySubjects(t *testing.T, start startFunc) {
	ctx := context.Background()
	f := start(t, true)
	secret, _, err := f.st.CreateDeviceCredential(ctx, "dev-a")
	if err != nil {
		t.Fatal(err)
	}
	a, err := connectDevice(t, f, nats.Token(secret)) // the token alone names the device
	if err != nil {
		t.Fatal(err)
	}
	jsA, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{protocol.TelemetrySubject(7), protocol.ResultSubject(7), protocol.DeviceTelemetrySubject("dev-a", 7)} {
		if _, err := jsA.Publish(ctx, subj, []byte("{}")); err != nil {
			t.Fatalf("publish %s: %v", subj, err)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := jsA.Publish(pctx, protocol.DeviceTelemetrySubject("dev-b", 7), []byte("{}")); err == nil {
		t.Fatal("A published on B's telemetry subject in run-only mode")
	}
	a.waitViolation(t, protocol.DeviceTelemetrySubject("dev-b", 7))
}

// TestRefusedCredentials checks that no credential, a wrong one, one used
// under another device's name, a revoked one and a wrong coordinator
// secret cannot connect, and that revoking a connected device's credential
// disconnects it at the next Revalidate.
func TestRefusedCredentials(t *testing.T) {
	ctx := context.Background()
	f := start(t, false)
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
		"coordinator, A secret": {nats.UserInfo(natsauth.CoordinatorUser, secretA)},
	} {
		before := f.auth.Refused()
		if _, err := connectDevice(t, f, opts...); !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: connect = %v; want an authorization error", name, err)
		}
		if f.auth.Refused() == before {
			t.Errorf("%s: refusal not counted", name)
		}
	}

	a, err := connectDevice(t, f, nats.UserInfo("dev-a", secretA), inbox("dev-a"))
	if err != nil {
		t.Fatal(err)
	}
	if n := f.auth.Revalidate(ctx, f.ns); n != 0 || !a.nc.IsConnected() {
		t.Fatalf("Revalidate with a live credential disconnected %d", n)
	}
	if _, err := f.st.RevokeDeviceCredential(ctx, credA.ID); err != nil {
		t.Fatal(err)
	}
	if n := f.auth.Revalidate(ctx, f.ns); n != 1 {
		t.Fatalf("Revalidate after revocation disconnected %d, want 1", n)
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if !a.nc.IsClosed() {
			return errors.New("device with a revoked credential still connected")
		}
		return nil
	})
	if _, err := connectDevice(t, f, nats.UserInfo("dev-a", secretA)); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("reconnect with the revoked credential: %v", err)
	}
}

// TestNotReadyRefusesDevicesButNotCoordinator: before the store is set,
// devices are refused and the coordinator connects.
func TestNotReadyRefusesDevicesButNotCoordinator(t *testing.T) {
	auth, err := natsauth.New(natsauth.Config{ReadyWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true, CustomClientAuthentication: auth})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	defer ns.Shutdown()
	if _, err := nats.Connect(ns.ClientURL(), nats.Token("lfd_x"), nats.MaxReconnects(0)); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("device before the store is ready: %v", err)
	}
	nc, err := nats.Connect(ns.ClientURL(), auth.CoordinatorOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}

// TestDeviceWaitsForVerifier: a device connecting while the coordinator is
// still opening its store waits and is accepted once the verifier is set,
// rather than refused (nats.go gives up after two refusals).
func TestDeviceWaitsForVerifier(t *testing.T) {
	st, err := store.Open(context.Background(), testenv.MigratedPostgresURL(t), store.Config{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	secret, _, err := st.CreateDeviceCredential(context.Background(), "dev-a")
	if err != nil {
		t.Fatal(err)
	}
	auth, err := natsauth.New(natsauth.Config{ReadyWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true, CustomClientAuthentication: auth})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	defer ns.Shutdown()
	time.AfterFunc(300*time.Millisecond, func() { auth.SetVerifier(st) })
	start := time.Now()
	nc, err := nats.Connect(ns.ClientURL(), nats.Token(secret), nats.Timeout(4*time.Second), nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("device connecting before the verifier was set: %v", err)
	}
	nc.Close()
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("connected after %s, before the verifier was set", waited)
	}
	if auth.Refused() != 0 {
		t.Fatalf("%d refusals", auth.Refused())
	}
}

// otherSecret returns secret with its last character changed, so it
// always differs from secret (replacing the last two with "aa" gave the
// real secret back about once in 64 runs).
func otherSecret(secret string) string {
	c := byte('a')
	if secret[len(secret)-1] == c {
		c = 'b'
	}
	return secret[:len(secret)-1] + string(c)
}
