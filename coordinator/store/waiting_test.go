package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestFillWaitingReasons: a queued run says why it waits, from the online
// devices' last hello: a build with no executable for any online device's
// platform names the platforms and the devices it rules out; a run some
// device can take but none is free says so; no device online says so; a
// run that is not queued gets no reason.
func TestFillWaitingReasons(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	push(t, st, &store.CreateBuildParams{ID: "arm-only", PushedBy: "ci", Lineage: "wait",
		Executables: []store.Executable{exe(t, st, "android/arm64", "wait-arm")}})
	reasons := func(runs []store.Run) []string {
		t.Helper()
		if err := st.FillWaitingReasons(ctx, runs); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range runs {
			out = append(out, r.WaitingReason)
		}
		return out
	}
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t), Build: "arm-only", Lineage: "wait"})
	if err != nil {
		t.Fatal(err)
	}
	if got := reasons(runs); got[0] != "no device is online" {
		t.Errorf("no device: %q", got)
	}
	for _, id := range []string{"host-1", "host-2"} {
		if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: id, TTL: 15 * time.Second,
			Fingerprint: protocol.Fingerprint{Platform: "linux", DeviceModel: "emulated:phone-mid", RAMBytes: i64(8 << 30), ExecPlatform: "linux/amd64"}}); err != nil {
			t.Fatal(err)
		}
	}
	got := reasons(runs)[0]
	for _, want := range []string{"no online device can run it", "build arm-only has no executable for linux/amd64 (has android/arm64)", "(2 device(s))"} {
		if !strings.Contains(got, want) {
			t.Errorf("wrong platform: %q lacks %q", got, want)
		}
	}
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "phone-1", TTL: 15 * time.Second,
		Fingerprint: protocol.Fingerprint{Platform: "android", DeviceModel: "Pixel 8", RAMBytes: i64(8 << 30), ExecPlatform: "android/arm64"}}); err != nil {
		t.Fatal(err)
	}
	if got := reasons(runs)[0]; got != "waiting for a free device: 1 online device(s) can run it, all busy" {
		t.Errorf("a fit device: %q", got)
	}
	cands, err := st.Candidates(ctx, &store.CandidatesParams{Device: &store.PlacementDevice{ID: "phone-1", Platform: "android",
		DeviceModel: "Pixel 8", RAMBytes: 8 << 30, ExecPlatform: "android/arm64"}})
	if err != nil || len(cands) != 1 {
		t.Fatalf("candidates for the arm64 phone: %v %+v", err, cands)
	}
	if _, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "phone-1", RunIDs: []int64{cands[0].RunID}, LeaseTTL: 10 * time.Second, Coordinator: "t"}); err != nil {
		t.Fatal(err)
	}
	r, err := st.GetRun(ctx, runs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := reasons([]store.Run{*r}); got[0] != "" {
		t.Errorf("assigned run has a waiting reason %q", got[0])
	}
}

// TestExpireQueuedRuns: a run queued longer than the queue timeout ends as
// an infrastructure failure whose error says how long it waited and why; a
// run queued more recently, and a zero timeout, expire nothing.
func TestExpireQueuedRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	spec := smoke(t)
	spec.Devices.Labels = map[string]string{"pool": "nowhere"}
	_, old, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	_, fresh, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `UPDATE runs SET queued_at = now() - interval '2 hours' WHERE id = $1`, old[0].ID); err != nil {
		t.Fatal(err)
	}
	if got, err := st.ExpireQueuedRuns(ctx, 0, 10); err != nil || len(got) != 0 {
		t.Fatalf("zero timeout expired %v, %v", got, err)
	}
	got, err := st.ExpireQueuedRuns(ctx, time.Hour, 10)
	if err != nil || len(got) != 1 || got[0].ID != old[0].ID {
		t.Fatalf("ExpireQueuedRuns = %+v, %v; want run %d only", got, err, old[0].ID)
	}
	r, err := st.GetRun(ctx, old[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != store.RunInfraFailed || !strings.Contains(r.Error, "queued for 1h0m0s") || !strings.Contains(r.Error, "no device is online") || r.FinishedAt == nil {
		t.Errorf("expired run: state %s, error %q, finished %v", r.State, r.Error, r.FinishedAt)
	}
	if r, _ := st.GetRun(ctx, fresh[0].ID); r.State != store.RunQueued {
		t.Errorf("fresh run is %s, want queued", r.State)
	}
}
