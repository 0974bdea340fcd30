package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestFaultGarbageValues is issue 29's fault case "garbage values"
// (finding 2) against a running coordinator: an enrolled device reports,
// for a run leased to it, five good telemetry samples and then one kind of
// garbage each: NaN and ±Inf (which JSON cannot carry: the literal or an
// overflowing number), ±1e308, a negative rate, an unknown config, and
// telemetry for config 99. Every garbage message is refused and charged to
// the device. A result that cannot be decoded is dropped and the device's
// genuine result then succeeds; a result with absurd values fails its run
// naming the field, never green; telemetry for a config the run lacks is
// dropped, so the result's counts never complete and the run ends as an
// infrastructure failure giving both counts. The good samples are stored
// exactly, and /readyz stays 200 throughout.
func TestFaultGarbageValues(t *testing.T) {
	f := newE2EFarmWith(t, e2eDeps{}, coordinator.Config{Ingest: ingest.Config{TelemetryWait: 2 * time.Second, QuarantineAfter: 100}})
	ctx := context.Background()
	st := f.c.Store()
	nc, err := nats.Connect(f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const good = `"mean":14.25`
	tests := []struct {
		name string
		// garbage edits the good result's JSON; bad99 sends telemetry for
		// config 99 instead, with a result counting it.
		garbage         func([]byte) []byte
		bad99           bool
		state, errorHas string
	}{
		{"nan", replace(good, `"mean":NaN`), false, store.RunSucceeded, ""},
		{"plus-inf", replace(good, `"mean":1e999`), false, store.RunSucceeded, ""},
		{"minus-inf", replace(good, `"mean":-1e999`), false, store.RunSucceeded, ""},
		{"plus-1e308", replace(good, `"mean":1e308`), false, store.RunFailed, "decode_tps.mean"},
		{"minus-1e308", replace(`"ttft_ms":{"n":3,"mean":60`, `"ttft_ms":{"n":3,"mean":-1e308`), false, store.RunFailed, "ttft_ms.mean"},
		{"negative", replace(`"prefill_tps":{"n":3,"mean":80`, `"prefill_tps":{"n":3,"mean":-5`), false, store.RunFailed, "prefill_tps.mean"},
		{"unknown-config", replace(`"config_index":0,"config_key":"resident"`, `"config_index":7,"config_key":"does-not-exist"`), false, store.RunFailed, "config_index 7"},
		{"config-99", nil, true, store.RunInfraFailed, "5 of 7"},
	}
	ram := int64(8 << 30)
	type leased struct {
		dev   string
		grant *store.Grant
	}
	var all []leased
	for _, tc := range tests {
		dev := "garbage-" + tc.name
		if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: dev, TTL: time.Hour,
			Fingerprint: protocol.Fingerprint{Platform: "android", RAMBytes: &ram}}); err != nil {
			t.Fatal(err)
		}
		spec := f.spec.Clone()
		spec.Devices.Labels = map[string]string{"pool": "nobody"} // the dispatcher places it nowhere
		spec.Retry.MaxAttempts = 1
		_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "e2e", Source: "test"})
		if err != nil {
			t.Fatal(err)
		}
		g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: dev, RunIDs: []int64{runs[0].ID}, LeaseTTL: time.Minute, Coordinator: "test"})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, leased{dev, g})
		pub := func(subject, id string, data []byte) {
			t.Helper()
			if _, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(id)); err != nil {
				t.Fatal(err)
			}
		}
		tel, resSubject := protocol.DeviceTelemetrySubject(dev, g.Run.ID), protocol.DeviceResultSubject(dev, g.Run.ID)
		pub(tel, protocol.TelemetryMsgID(dev, g.Run.ID, g.Token, 0, protocol.NewMsgNonce()), garbageBatch(t, dev, g, 0, 0, 5))
		res := garbageResult(t, dev, g, 1, 5)
		if tc.bad99 {
			pub(tel, protocol.TelemetryMsgID(dev, g.Run.ID, g.Token, 1, protocol.NewMsgNonce()), garbageBatch(t, dev, g, 1, 99, 2))
			res = garbageResult(t, dev, g, 2, 7)
		} else {
			pub(resSubject, protocol.ResultMsgID(dev, g.Run.ID, g.Token, protocol.NewMsgNonce()), tc.garbage(res))
		}
		if tc.state == store.RunSucceeded || tc.bad99 { // the garbage was not a result: the genuine one follows
			pub(resSubject, protocol.ResultMsgID(dev, g.Run.ID, g.Token, protocol.NewMsgNonce()), res)
		}
	}
	if code := httpStatus(f.c.HTTPURL() + "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d while devices send garbage, want 200", code)
	}
	for k, tc := range tests {
		l := all[k]
		var r *store.Run
		waitFor(t, 30*time.Second, tc.name+": run ended", func() bool {
			r, _ = st.GetRun(ctx, l.grant.Run.ID)
			return r != nil && store.TerminalState(r.State)
		})
		if r.State != tc.state || !strings.Contains(r.Error, tc.errorHas) || (tc.errorHas == "" && r.Error != "") {
			t.Errorf("%s: run %s (%q), want %s with an error naming %q", tc.name, r.State, r.Error, tc.state, tc.errorHas)
		}
		f.wantSamples(t, l.grant.Run.ID, 5)
		waitFor(t, 10*time.Second, tc.name+": the garbage charged to the device", func() bool {
			rj, err := st.GetDeviceRejections(ctx, l.dev)
			return err == nil && rj.Total == 1
		})
	}
	if code := httpStatus(f.c.HTTPURL() + "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d after the garbage, want 200", code)
	}
}

// replace returns an edit of JSON replacing old (which must be there) with new.
func replace(old, new string) func([]byte) []byte {
	return func(b []byte) []byte {
		if !bytes.Contains(b, []byte(old)) {
			panic("garbage edit: " + old + " not in " + string(b))
		}
		return bytes.Replace(b, []byte(old), []byte(new), 1)
	}
}

// garbageBatch is telemetry batch seq of n decode samples for config cfg,
// as plain JSON (protocol.Encode would refuse config 99 for no run).
func garbageBatch(t *testing.T, dev string, g *store.Grant, seq uint64, cfg, n int) []byte {
	t.Helper()
	b := &protocol.TelemetryBatch{V: protocol.Version, RunID: g.Run.ID, Token: g.Token, DeviceID: dev, Seq: seq, SentAt: time.Now()}
	for i := range n {
		b.Samples = append(b.Samples, protocol.Sample{ConfigIndex: cfg, Step: i, Phase: protocol.PhaseDecode, Tokens: 1,
			DurationNS: 1e7, StallNS: 1e6, BytesRead: 147456, CacheBytes: 1 << 20})
	}
	data, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// garbageResult is a plausible succeeded result for config 0 reporting
// batches and samples of telemetry.
func garbageResult(t *testing.T, dev string, g *store.Grant, batches, samples uint64) []byte {
	t.Helper()
	now := time.Now().UTC()
	res := &protocol.Result{V: protocol.Version, RunID: g.Run.ID, Token: g.Token, DeviceID: dev, Outcome: protocol.OutcomeSucceeded,
		TelemetryBatches: batches, TelemetrySamples: samples, StartedAt: now.Add(-time.Minute), FinishedAt: now,
		Configs: []protocol.ConfigResult{{ConfigIndex: 0, ConfigKey: "resident", Valid: true, Repetitions: 3,
			DecodeTPS:  protocol.Stat{N: 3, Mean: 14.25, Median: 14.1, Stddev: 0.3},
			PrefillTPS: protocol.Stat{N: 3, Mean: 80, Median: 80, Stddev: 1},
			TTFTMS:     protocol.Stat{N: 3, Mean: 60, Median: 60, Stddev: 2}, HitRate: 0.9, StallFraction: 0.1, PeakMemoryBytes: 1 << 28}}}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
