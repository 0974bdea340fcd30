package natsauth_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/coordinatortest"
	"github.com/lesfarm/lesfarm/coordinator/natsauth"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/embedded"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestCoordinatorStoresNothingDeviceASaysForB runs a real coordinator
// (ingest into Postgres) behind the authenticated embedded server. Device B
// holds a run; device A, which knows the run id and B's fencing token,
// tries every data subject to write telemetry and a result for it. The
// device-scoped subjects of B are permissions violations; A's own scoped
// subjects reach ingest, which rejects the foreign device_id; in strict
// mode the run-only subjects are violations too. Only B's own batch is
// stored and the run is not completed by A.
func TestCoordinatorStoresNothingDeviceASaysForB(t *testing.T) {
	for _, mode := range []string{"devices", "strict"} {
		t.Run(mode, func(t *testing.T) { testForeignData(t, mode == "devices") })
	}
}

func testForeignData(t *testing.T, runOnly bool) {
	ctx := context.Background()
	dbURL := testenv.MigratedPostgresURL(t)
	st, err := store.Open(ctx, dbURL, store.Config{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	auth, err := natsauth.New(natsauth.Config{RunOnlySubjects: runOnly})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := embedded.StartNATS(embedded.NATSConfig{StoreDir: t.TempDir(), Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	// Device B holds a run, claimed before the coordinator starts: its
	// dispatcher would otherwise assign the run to dev-b first.
	ram := int64(8 << 30)
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "dev-b", TTL: time.Minute, Fingerprint: protocol.Fingerprint{Platform: "linux", RAMBytes: &ram}}); err != nil {
		t.Fatal(err)
	}
	spec, _ := jobs.Builtin("smoke")
	// A selector no device matches keeps the running coordinator's
	// dispatcher from placing the run itself before the claim below (it
	// did, under load); the direct claim does not match selectors.
	spec.Devices = jobs.Selector{Labels: map[string]string{"placed-by": "this-test"}}
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "dev-b", RunIDs: []int64{runs[0].ID}, LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	run := g.Run.ID
	c, err := coordinator.New(coordinatortest.Config(t, coordinator.Config{Name: "auth-c", NoNightly: true, NoRegress: true},
		dbURL, ns.ClientURL(), auth.CoordinatorOptions()...))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("coordinator as the internal user: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	auth.SetVerifier(c.Store())

	batch := func(seq uint64, n int) []byte {
		b := &protocol.TelemetryBatch{RunID: run, Token: g.Token, DeviceID: "dev-b", Seq: seq, SentAt: time.Now()}
		for i := range n {
			b.Samples = append(b.Samples, protocol.Sample{ConfigIndex: 0, Step: i, Phase: protocol.PhaseDecode, Tokens: 1, DurationNS: 1e6})
		}
		data, err := protocol.Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	result, err := protocol.Encode(&protocol.Result{RunID: run, Token: g.Token, DeviceID: "dev-b", Outcome: "succeeded",
		Configs: []protocol.ConfigResult{{ConfigIndex: 0, ConfigKey: "resident", Valid: true, DecodeTPS: protocol.Stat{N: 1, Mean: 10}}}})
	if err != nil {
		t.Fatal(err)
	}

	secretA, _, err := st.CreateDeviceCredential(ctx, "dev-a")
	if err != nil {
		t.Fatal(err)
	}
	secretB, _, err := st.CreateDeviceCredential(ctx, "dev-b")
	if err != nil {
		t.Fatal(err)
	}
	f := &farm{ns: ns}
	a, err := connectDevice(t, f, nats.UserInfo("dev-a", secretA), inbox("dev-a"))
	if err != nil {
		t.Fatal(err)
	}
	jsA, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	denied := []struct {
		subject string
		data    []byte
	}{
		{protocol.DeviceTelemetrySubject("dev-b", run), batch(0, 3)},
		{protocol.DeviceResultSubject("dev-b", run), result},
	}
	if !runOnly {
		denied = append(denied, struct {
			subject string
			data    []byte
		}{protocol.TelemetrySubject(run), batch(0, 3)}, struct {
			subject string
			data    []byte
		}{protocol.ResultSubject(run), result})
	}
	for _, d := range denied {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := jsA.Publish(pctx, d.subject, d.data)
		cancel()
		if err == nil {
			t.Fatalf("A published on %s", d.subject)
		}
		a.waitViolation(t, d.subject)
	}
	// A's own subjects with B's name in the body: NATS lets them through,
	// ingest rejects them.
	for _, subj := range []string{protocol.DeviceTelemetrySubject("dev-a", run), protocol.DeviceResultSubject("dev-a", run)} {
		data := batch(0, 3)
		if subj == protocol.DeviceResultSubject("dev-a", run) {
			data = result
		}
		if _, err := jsA.Publish(ctx, subj, data); err != nil {
			t.Fatalf("A on its own subject %s: %v", subj, err)
		}
	}

	// B itself is stored.
	b, err := connectDevice(t, f, nats.Token(secretB), inbox("dev-b"))
	if err != nil {
		t.Fatal(err)
	}
	jsB, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jsB.Publish(ctx, protocol.DeviceTelemetrySubject("dev-b", run), batch(1, 5)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, 50*time.Millisecond, func() error {
		n, err := st.CountSamples(ctx, run)
		if err == nil && (n != 5 || c.Rejects().Total() < 2) {
			err = fmt.Errorf("%d samples, rejects %s; want B's 5 samples and A's 2 messages rejected", n, c.Rejects())
		}
		return err
	})
	testenv.WaitAcked(t, ns, 15*time.Second) // nothing else is in flight
	if n, _ := st.CountSamples(ctx, run); n != 5 {
		t.Fatalf("%d samples stored, want only B's 5", n)
	}
	if r, _ := st.GetRun(ctx, run); store.TerminalState(r.State) {
		t.Fatalf("A completed B's run: %s", r.State)
	}
	if got := c.Rejects().Total(); got != 2 {
		t.Fatalf("rejects %s; want exactly A's 2", c.Rejects())
	}
	if len(b.violations()) != 0 {
		t.Fatalf("B's own publish raised %q", b.violations())
	}
}
