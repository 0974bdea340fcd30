package agent

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestE2EHostileDeviceBesideTwoAgents is issue 29's finding 1 end to end:
// two real agents run the smoke suite while a hostile device, knowing each
// run's id and fencing token as soon as it is leased, floods its own
// subjects with junk under every id the victims could be predicted to
// use (the old r/<run>/<token> and t/<run>/<token>/<seq>, and the
// device-scoped form with guessed nonces) and with well-formed batches and
// results that name the victims. The first run is attacked on both
// streams; the second on TELEMETRY only (finding 7's variant: its result
// gets through, so only the sample count shows what was lost). Both runs
// must succeed in their first attempt, blaming nothing, with every sample
// stored exactly once; /readyz stays 200 during the attack (a hostile
// device is not the farm's fault); nothing may be charged to the victims,
// and the hostile device must be charged for every message and
// quarantined.
func TestE2EHostileDeviceBesideTwoAgents(t *testing.T) {
	f := newE2EFarm(t)
	ctx := context.Background()
	ram := int64(8 << 30)
	if _, err := f.c.Store().UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "hostile", TTL: time.Hour,
		Fingerprint: protocol.Fingerprint{Platform: "android", RAMBytes: &ram}}); err != nil {
		t.Fatal(err)
	}
	startAgent(t, Config{NATSURL: f.url, Name: "victim-a", Labels: map[string]string{"pool": "ci"}})
	startAgent(t, Config{NATSURL: f.url, Name: "victim-b", Labels: map[string]string{"pool": "ci"}})
	waitFor(t, 30*time.Second, "both agents registered", func() bool {
		ds, _ := f.c.Store().ListDevices(ctx, &store.ListDevicesParams{Limit: 10})
		n := 0
		for _, d := range ds {
			if d.ID == "victim-a" || d.ID == "victim-b" {
				n++
			}
		}
		return n == 2
	})
	nc, err := nats.Connect(f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	spec := f.spec.Clone()
	spec.Devices.Labels = map[string]string{"pool": "ci"}
	_, runs, err := f.c.Store().CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "e2e", Fanout: true, Source: "test"})
	if err != nil || len(runs) != 2 {
		t.Fatalf("runs %v err %v", runs, err)
	}

	// The attack: as soon as a run is leased, junk under its ids.
	var mu sync.Mutex
	sent := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		attacked := map[int64]bool{}
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			for _, r := range runs {
				cur, err := f.c.Store().GetRun(ctx, r.ID)
				if err != nil || cur.Token == 0 || attacked[r.ID] {
					continue
				}
				attacked[r.ID] = true
				tel, res := protocol.DeviceTelemetrySubject("hostile", r.ID), protocol.DeviceResultSubject("hostile", r.ID)
				run, tok := strconv.FormatInt(r.ID, 10), strconv.FormatInt(cur.Token, 10)
				pub := func(subject, id string, data []byte) {
					if _, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(id)); err == nil {
						mu.Lock()
						sent++
						mu.Unlock()
					}
				}
				for seq := range uint64(40) {
					s := strconv.FormatUint(seq, 10)
					pub(tel, "t/"+run+"/"+tok+"/"+s, []byte("{junk"))
					pub(tel, protocol.TelemetryMsgID(cur.DeviceID, r.ID, cur.Token, seq, "0000000000000000"), []byte("{junk"))
					fake := &protocol.TelemetryBatch{V: protocol.Version, RunID: r.ID, Token: cur.Token, DeviceID: cur.DeviceID, Seq: seq,
						Samples: []protocol.Sample{{Phase: protocol.PhaseDecode, Tokens: 1, DurationNS: 1}}}
					if data, err := protocol.Encode(fake); err == nil {
						pub(tel, protocol.TelemetryMsgID("hostile", r.ID, cur.Token, seq, protocol.NewMsgNonce()), data)
					}
				}
				if r.ID == runs[1].ID {
					continue // the telemetry-only variant
				}
				pub(res, "r/"+run+"/"+tok, []byte("{junk"))
				fake := &protocol.Result{RunID: r.ID, Token: cur.Token, DeviceID: cur.DeviceID, Outcome: protocol.OutcomeFailed, Error: "junk"}
				if data, err := protocol.Encode(fake); err == nil {
					pub(res, protocol.ResultMsgID(cur.DeviceID, r.ID, cur.Token, "ffffffffffffffff"), data)
				}
			}
		}
	}()
	waitFor(t, time.Minute, "the attack under way", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return sent > 0
	})
	if code := httpStatus(f.c.HTTPURL() + "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d during the attack, want 200", code)
	}
	for _, r := range runs {
		done := f.waitRun(t, r.ID, store.RunSucceeded, 3*time.Minute)
		if done.Attempts != 1 || done.Error != "" {
			t.Errorf("run %d: %d attempts, error %q; want one attempt and no blame", r.ID, done.Attempts, done.Error)
		}
	}
	close(stop)
	<-done
	want := expectedSamples(spec)
	for _, r := range runs {
		waitFor(t, 30*time.Second, "every sample of the victims stored", func() bool {
			n, err := f.c.Store().CountSamples(ctx, r.ID)
			return err == nil && n == want
		})
	}
	mu.Lock()
	total := int64(sent)
	mu.Unlock()
	if total == 0 {
		t.Fatal("the hostile device published nothing")
	}
	waitFor(t, 30*time.Second, "every hostile message charged to it", func() bool {
		rj, err := f.c.Store().GetDeviceRejections(ctx, "hostile")
		return err == nil && rj.Total == total
	})
	for _, v := range []string{"victim-a", "victim-b"} {
		if rj, _ := f.c.Store().GetDeviceRejections(ctx, v); rj.Total != 0 {
			t.Errorf("%s charged %d rejections (last: %s)", v, rj.Total, rj.Last)
		}
	}
	if d, _ := f.c.Store().GetDevice(ctx, "hostile"); !d.Drained {
		t.Error("the hostile device was not quarantined")
	}
}
