package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestCreateABInterleaves: a comparison pins its runs to the devices that
// can run both builds, in ABBA order per device, and a device takes them
// in that order; adding rounds is idempotent per observed round count and
// bounded by the budget; the default baseline is the newest earlier build
// of the lineage with results.
func TestCreateABInterleaves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	for _, b := range []string{"ab-1", "ab-2"} {
		push(t, st, &store.CreateBuildParams{ID: b, PushedBy: "ci", Lineage: "abl",
			Executables: []store.Executable{exe(t, st, "linux/amd64", b)}})
	}
	push(t, st, &store.CreateBuildParams{ID: "ab-arm", PushedBy: "ci", Lineage: "abl",
		Executables: []store.Executable{exe(t, st, "android/arm64", "ab-arm")}})
	for id, plat := range map[string]string{"ab-host-1": "linux/amd64", "ab-host-2": "linux/amd64", "ab-phone": "android/arm64"} {
		if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: id, TTL: 15 * time.Second,
			Fingerprint: protocol.Fingerprint{Platform: "linux", DeviceModel: "emulated:phone-mid", RAMBytes: i64(8 << 30), ExecPlatform: plat}}); err != nil {
			t.Fatal(err)
		}
	}
	spec := smoke(t)
	p := &store.CreateABParams{Spec: spec, Build: "ab-2", Baseline: "ab-1", Lineage: "abl", MinEffect: 0.02, InitialRounds: 2, StepRounds: 2, MaxRounds: 5}
	ab, runs, err := st.CreateAB(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(ab.Devices) != 2 || ab.Devices[0] != "ab-host-1" || len(runs) != 8 || ab.Rounds != 2 {
		t.Fatalf("devices %v, %d runs, %d rounds: want the two linux hosts, 2 rounds of 2 runs each", ab.Devices, len(runs), ab.Rounds)
	}
	var order []string
	for _, r := range runs {
		if r.TargetDeviceID == "ab-host-1" {
			order = append(order, r.Build)
		}
	}
	if want := []string{"ab-1", "ab-2", "ab-2", "ab-1"}; !slices.Equal(order, want) {
		t.Fatalf("ab-host-1's runs in id order: %v, want %v (ABBA)", order, want)
	}
	// The device takes them in that order.
	pd := &store.PlacementDevice{ID: "ab-host-1", Platform: "linux", DeviceModel: "emulated:phone-mid", RAMBytes: 8 << 30, ExecPlatform: "linux/amd64"}
	cands, err := st.Candidates(ctx, &store.CandidatesParams{Device: pd})
	if err != nil || len(cands) == 0 || cands[0].RunID != runs[0].ID {
		t.Fatalf("candidates %+v (%v), want run %d first", cands, err, runs[0].ID)
	}
	more, err := st.AddABRounds(ctx, ab.ID, 2, 2)
	if err != nil || len(more) != 8 {
		t.Fatalf("add rounds: %d runs, %v", len(more), err)
	}
	if again, err := st.AddABRounds(ctx, ab.ID, 2, 2); err != nil || len(again) != 0 {
		t.Fatalf("a second add for the same round count added %d runs (%v)", len(again), err)
	}
	last, err := st.AddABRounds(ctx, ab.ID, 4, 2)
	if err != nil || len(last) != 4 {
		t.Fatalf("add past the budget: %d runs (%v), want one round (max 5)", len(last), err)
	}
	got, err := st.GetAB(ctx, ab.ID)
	if err != nil || got.Rounds != 5 || got.State != store.ABRunning {
		t.Fatalf("ab %+v, %v", got, err)
	}
	abRuns, err := st.ABRuns(ctx, ab.ID)
	if err != nil || len(abRuns) != 20 {
		t.Fatalf("%d ab runs, %v", len(abRuns), err)
	}
	if err := st.FinishAB(ctx, ab.ID, "same", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishAB(ctx, ab.ID, "same", []byte(`{}`)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("finish twice: %v", err)
	}
	if r, err := st.AddABRounds(ctx, ab.ID, 5, 1); err != nil || len(r) != 0 {
		t.Fatalf("rounds added to a finished comparison: %d %v", len(r), err)
	}
	// No device runs both: ab-arm only has android/arm64, the phone only
	// runs it, and the hosts do not.
	if _, _, err := st.CreateAB(ctx, &store.CreateABParams{Spec: spec, Build: "ab-arm", Baseline: "ab-1", Lineage: "abl",
		MinEffect: 0.02, InitialRounds: 1, StepRounds: 1, MaxRounds: 1}); !errors.Is(err, store.ErrNoABDevices) {
		t.Fatalf("no device runs both: %v", err)
	}
	if _, err := st.PreviousBuildWithResults(ctx, "ab-2", spec.SuiteName()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("no results yet: %v", err)
	}
	if err := st.SetABPolicy(ctx, &store.ABPolicy{Suite: "smoke", MinEffect: 0.05, MaxRounds: 12}); err != nil {
		t.Fatal(err)
	}
	if pol, err := st.GetABPolicy(ctx, "smoke"); err != nil || pol.MinEffect != 0.05 || pol.MaxRounds != 12 {
		t.Fatalf("policy %+v %v", pol, err)
	}
}
