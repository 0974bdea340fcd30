package store_test

import (
	"context"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestInsertTelemetryWriteOnce re-sends a stored batch with the same seq
// and other content (issue 29, finding 2): the first copy stays, the
// re-send is listed in Conflicts. A byte-identical redelivery is no
// conflict, and two copies of one new seq in one call keep the first and
// report the second only when it differs.
func TestInsertTelemetryWriteOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	addDevice(t, st, "dev-a", nil)
	if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)}); err != nil {
		t.Fatal(err)
	}
	g := claim(t, st, "dev-a")
	batch := func(seq uint64, dur int64, n int) *protocol.TelemetryBatch {
		b := &protocol.TelemetryBatch{RunID: g.Run.ID, Token: g.Token, DeviceID: "dev-a", Seq: seq}
		for k := range n {
			b.Samples = append(b.Samples, protocol.Sample{ConfigIndex: 0, Step: k, Phase: protocol.PhaseDecode, Tokens: 1, DurationNS: dur})
		}
		return b
	}
	if ts, err := st.InsertTelemetry(ctx, []*protocol.TelemetryBatch{batch(0, 100, 4)}); err != nil || ts.Inserted != 4 || len(ts.Conflicts) != 0 {
		t.Fatalf("first copy: %+v %v", ts, err)
	}
	// [0] identical redelivery, [1] seq 0 with other durations, [2] new
	// seq 1, [3] seq 1 again with fewer samples, [4] seq 1 identical.
	ts, err := st.InsertTelemetry(ctx, []*protocol.TelemetryBatch{batch(0, 100, 4), batch(0, 999, 4), batch(1, 5, 3), batch(1, 5, 2), batch(1, 5, 3)})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts.Conflicts) != 2 || ts.Conflicts[0] != 1 || ts.Conflicts[1] != 3 || ts.Inserted != 3 {
		t.Fatalf("Conflicts %v, inserted %d; want [1 3] and 3", ts.Conflicts, ts.Inserted)
	}
	var durs []int64
	if err := st.Pool().QueryRow(ctx, `SELECT duration_ns FROM sample_batches WHERE run_id = $1 AND seq = 0`, g.Run.ID).Scan(&durs); err != nil {
		t.Fatal(err)
	}
	if len(durs) != 4 || durs[0] != 100 {
		t.Fatalf("seq 0 stored as %v: the re-send replaced the first copy", durs)
	}
	if n, _ := st.CountSamples(ctx, g.Run.ID); n != 7 {
		t.Fatalf("%d samples stored, want 7", n)
	}
}
