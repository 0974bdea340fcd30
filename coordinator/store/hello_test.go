package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestReconcileHelloSparesAssignmentsInFlight: a hello that does not list a
// run fails it over only when the agent had acknowledged it (running); an
// assigned run's assignment may still be on its way to the agent, which
// this hello crossed, so it stays with the device.
func TestReconcileHelloSparesAssignmentsInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	addDevice(t, st, "dev-a", nil)
	spec := smoke(t)
	if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "b1"}); err != nil {
		t.Fatal(err)
	}
	g := claim(t, st, "dev-a")
	_, lost, err := st.ReconcileHello(ctx, "dev-a", nil, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.GetRun(ctx, g.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(lost) != 0 || r.State != store.RunAssigned || r.Attempts != 1 {
		t.Fatalf("hello crossing the assignment: lost %v, run state %s, attempts %d", lost, r.State, r.Attempts)
	}
	if err := st.AckAssignment(ctx, g.Run.ID, g.Token); err != nil {
		t.Fatal(err)
	}
	_, lost, err = st.ReconcileHello(ctx, "dev-a", nil, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r, err = st.GetRun(ctx, g.Run.ID); err != nil {
		t.Fatal(err)
	}
	if len(lost) != 1 || lost[0].RunID != g.Run.ID || r.State != store.RunQueued {
		t.Fatalf("restarted agent without its running run: lost %v, run state %s", lost, r.State)
	}
}
