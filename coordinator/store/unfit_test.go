package store_test

import (
	"context"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestUnfitRefusalIsRemembered: a run a device refused as unfit is never
// a candidate for that device again, but still is for others, and the
// refusal uses no attempt.
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
	r, err := st.GetRun(ctx, g.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != store.RunQueued || r.Attempts != 0 {
		t.Fatalf("after an unfit refusal: state %s, attempts %d", r.State, r.Attempts)
	}
}
