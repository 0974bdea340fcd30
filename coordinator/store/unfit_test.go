package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestUnfitRefusalIsRemembered: a run a device refused as unfit is neither
// a candidate for nor claimable by that device for UnfitFor, but still is
// for others, and the refusal uses no attempt.
func TestUnfitRefusalIsRemembered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	addDevice(t, st, "dev-a", nil)
	addDevice(t, st, "dev-b", nil)
	if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t), Build: "b1"}); err != nil {
		t.Fatal(err)
	}
	g := claim(t, st, "dev-a")
	if err := st.ReleaseAssignment(ctx, &store.ReleaseParams{RunID: g.Run.ID, Token: g.Token, Refund: true, Outcome: "unfit", Reason: "unsupported: architecture llama4"}); err != nil {
		t.Fatal(err)
	}
	candidates := func(dev string) int {
		d, err := st.GetDevice(ctx, dev)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := st.Candidates(ctx, &store.CandidatesParams{Device: &store.PlacementDevice{ID: d.ID, Platform: d.Platform, DeviceModel: d.DeviceModel, RAMBytes: *d.RAMBytes, Labels: d.EffectiveLabels()}})
		if err != nil {
			t.Fatal(err)
		}
		return len(cs)
	}
	if n := candidates("dev-a"); n != 0 {
		t.Fatalf("dev-a refused the run as unfit but gets %d candidates", n)
	}
	if n := candidates("dev-b"); n != 1 {
		t.Fatalf("dev-b gets %d candidates, want the run", n)
	}
	// Claiming says why: unfit for this device, not taken.
	_, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "dev-a", RunIDs: []int64{g.Run.ID}, LeaseTTL: 10 * time.Second, Coordinator: "t"})
	if !errors.Is(err, store.ErrUnfit) || !errors.Is(err, store.ErrNothingToClaim) {
		t.Fatalf("dev-a claiming the run it refused: %v, want ErrUnfit", err)
	}
	// The refusal expires after UnfitFor (the agent may have been
	// upgraded, memory freed).
	// That is a span of the database's clock, so the test waits for the
	// candidate to come back, which must be soon after UnfitFor.
	d, err := st.GetDevice(ctx, "dev-a")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		cs, err := st.Candidates(ctx, &store.CandidatesParams{UnfitFor: 10 * time.Millisecond,
			Device: &store.PlacementDevice{ID: d.ID, Platform: d.Platform, DeviceModel: d.DeviceModel, RAMBytes: *d.RAMBytes, Labels: d.EffectiveLabels()}})
		if err == nil && len(cs) != 1 {
			err = fmt.Errorf("after UnfitFor dev-a gets %d candidates, want the run", len(cs))
		}
		return err
	})
	g2, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "dev-a", RunIDs: []int64{g.Run.ID}, LeaseTTL: 10 * time.Second, Coordinator: "t", UnfitFor: 10 * time.Millisecond})
	if err != nil || g2.Run.ID != g.Run.ID {
		t.Fatalf("after UnfitFor dev-a cannot claim the run: %v", err)
	}
	r, err := st.GetRun(ctx, g.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != store.RunAssigned || r.Attempts != 1 {
		t.Fatalf("after an unfit refusal and a new claim: state %s, attempts %d, want assigned on attempt 1 (the refusal used none)", r.State, r.Attempts)
	}
}
