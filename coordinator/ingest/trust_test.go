package ingest_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/agent/telemetry"
	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// startIngest starts an ingester on e and stops it in t.Cleanup.
func startIngest(t *testing.T, e *env, cfg ingest.Config) *ingest.Ingester {
	t.Helper()
	cfg.JS, cfg.Store = e.js, e.st
	cfg.Logger = slog.New(slog.DiscardHandler)
	ing, err := ingest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ing.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ing.Stop() })
	return ing
}

// publishID publishes msg on subject with a Nats-Msg-Id and returns the ack.
func publishID(t *testing.T, js jetstream.JetStream, subject, id string, data []byte) *jetstream.PubAck {
	t.Helper()
	ack, err := js.Publish(context.Background(), subject, data, jetstream.WithMsgID(id))
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

func encode(t *testing.T, m protocol.Message) []byte {
	t.Helper()
	b, err := protocol.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rejections(t *testing.T, e *env, dev string) int64 {
	t.Helper()
	r, err := e.st.GetDeviceRejections(context.Background(), dev)
	if err != nil {
		t.Fatal(err)
	}
	return r.Total
}

// TestIngestHostileDeviceCannotSuppressAnother is issue 29's finding 1: a
// device publishes junk on its own permitted subjects (telemetry and
// result subjects naming itself) under the message ids the victim's run
// will use, before the victim publishes, in every id format: the old
// predictable ones and the device-scoped ones, nonce included (as if it
// leaked). The victim publishes through the agent's Outbox. Every one of
// the victim's samples and its result must be stored, the run succeed,
// and every hostile message be rejected and charged to the hostile device,
// none to the victim.
func TestIngestHostileDeviceCannotSuppressAnother(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	ram := int64(8 << 30)
	if _, err := e.st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "hostile", TTL: time.Minute, Fingerprint: protocol.Fingerprint{Platform: "linux", RAMBytes: &ram}}); err != nil {
		t.Fatal(err)
	}
	run, token := e.run.Run.ID, e.run.Token
	const batches, per = 16, 8
	nonce := protocol.NewMsgNonce() // the victim's, leaked to the attacker

	// The attack, before the victim publishes anything.
	hostileTel, hostileRes := protocol.DeviceTelemetrySubject("hostile", run), protocol.DeviceResultSubject("hostile", run)
	sent := 0
	for s := range uint64(batches) {
		junk := batch(e.run, s, 1)
		junk.DeviceID = "hostile"
		publishID(t, e.js, hostileTel, protocol.TelemetryMsgID("dev-1", run, token, s, nonce), encode(t, junk))
		publishID(t, e.js, hostileTel, protocol.TelemetryMsgID("dev-1", run, token, s, "0000000000000000"), []byte("{junk"))
		sent += 2
	}
	for _, id := range []string{"t/" + itoa(run) + "/" + itoa(token) + "/0", "r/" + itoa(run) + "/" + itoa(token)} {
		publishID(t, e.js, hostileTel, id, []byte("{junk"))
		sent++
	}
	fake := &protocol.Result{RunID: run, Token: token, DeviceID: "hostile", Outcome: protocol.OutcomeFailed, Error: "junk"}
	publishID(t, e.js, hostileRes, protocol.ResultMsgID("dev-1", run, token, nonce), encode(t, fake))
	sent++

	// The victim, through the agent's outbox on its own connection.
	vc, err := nats.Connect(e.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	pub, err := telemetry.NewJetStreamPublisher(vc)
	if err != nil {
		t.Fatal(err)
	}
	buf, err := telemetry.OpenBuffer(t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := telemetry.NewOutbox(telemetry.OutboxConfig{Buffer: buf, Publisher: pub, RetryEvery: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	octx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { ob.Run(octx); close(done) }()
	defer func() { stop(); <-done }()
	victimTel := protocol.DeviceTelemetrySubject("dev-1", run)
	for s := range uint64(batches) {
		ob.Send(telemetry.Record{Subject: victimTel, MsgID: protocol.TelemetryMsgID("dev-1", run, token, s, nonce), Data: encode(t, batch(e.run, s, per))})
	}
	res := &protocol.Result{RunID: run, Token: token, DeviceID: "dev-1", Outcome: protocol.OutcomeSucceeded,
		TelemetryBatches: batches, TelemetrySamples: batches * per,
		Configs: []protocol.ConfigResult{{ConfigIndex: 0, ConfigKey: "resident", Valid: true, DecodeTPS: protocol.Stat{N: 1, Mean: 10, Median: 10, Min: 10, Max: 10}}}}
	ob.Send(telemetry.Record{Subject: protocol.DeviceResultSubject("dev-1", run), MsgID: protocol.ResultMsgID("dev-1", run, token, nonce), Data: encode(t, res), Summary: true})
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := ob.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	if got := ob.Duplicates(); got != batches+1 {
		t.Errorf("the victim's outbox saw %d first-publish duplicates, want %d", got, batches+1)
	}

	ing := startIngest(t, e, ingest.Config{QuarantineAfter: 1000})
	waitFor(t, "the victim's samples, its result and every junk message", 20*time.Second, func() bool {
		n, _ := e.st.CountSamples(ctx, run)
		r, _ := e.st.GetRun(ctx, run)
		return n == batches*per && r.State == store.RunSucceeded && rejections(t, e, "hostile") == int64(sent)
	})
	keys, _ := e.st.SampleKeys(ctx, run)
	for k, key := range keys {
		if key != [2]int{k / per, k % per} {
			t.Fatalf("sample %d stored as %v", k, key)
		}
	}
	if n := rejections(t, e, "dev-1"); n != 0 {
		t.Errorf("the victim was charged %d rejections", n)
	}
	if st := ing.Stats(); st.Rejected != uint64(sent) {
		t.Errorf("rejected %d, want the %d hostile messages", st.Rejected, sent)
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
