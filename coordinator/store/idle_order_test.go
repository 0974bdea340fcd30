package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestIdleDevicesLeastRecentlyAssignedFirst: idle devices come never
// assigned first, then by their last grant (devices.last_assigned_at, kept
// by ClaimRun and ClaimRuns), oldest first, so work spreads over the fleet.
func TestIdleDevicesLeastRecentlyAssignedFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	label := map[string]string{"idle-order": t.Name()}
	for _, id := range []string{"io-a", "io-b", "io-c", "io-d"} {
		addDevice(t, st, id, label)
	}
	spec := smoke(t)
	spec.Devices.Labels = label
	finish := func(g *store.Grant) {
		t.Helper()
		if _, err := st.CompleteRun(ctx, &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: g.Run.DeviceID, Outcome: protocol.OutcomeSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	// io-c through ClaimRun, then io-a through ClaimRuns: io-b and io-d
	// were never assigned.
	if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	finish(claim(t, st, "io-c"))
	// The next grant's now() must come after io-c's: wait until the
	// database's clock has passed it.
	testenv.Eventually(t, 5*time.Second, time.Millisecond, func() error {
		var past bool
		if err := st.Pool().QueryRow(ctx, `SELECT clock_timestamp() > last_assigned_at FROM devices WHERE id = 'io-c'`).Scan(&past); err != nil || past {
			return err
		}
		return errors.New("the database clock has not passed io-c's grant")
	})
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	gs, err := st.ClaimRuns(ctx, &store.ClaimRunsParams{Pairs: []store.ClaimPair{{DeviceID: "io-a", RunID: runs[0].ID}}, LeaseTTL: time.Minute, Coordinator: "t"})
	if err != nil || len(gs) != 1 {
		t.Fatalf("claim runs: %v %v", gs, err)
	}
	finish(&gs[0])
	idle, err := st.IdleDevices(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range idle {
		if d.Labels["idle-order"] == t.Name() {
			got = append(got, d.ID)
		}
	}
	if want := []string{"io-b", "io-d", "io-c", "io-a"}; !slices.Equal(got, want) {
		t.Fatalf("idle order %v, want %v", got, want)
	}
}
