package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

func open(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), testenv.MigratedPostgresURL(t), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

func i64(v int64) *int64 { return &v }

func addDevice(t testing.TB, st *store.Store, id string, labels map[string]string) *store.Device {
	t.Helper()
	d, err := st.UpsertDevice(context.Background(), &store.UpsertDeviceParams{ID: id, TTL: 15 * time.Second, Labels: labels,
		Fingerprint: protocol.Fingerprint{Platform: "android", DeviceModel: "Pixel 8", RAMBytes: i64(8 << 30)}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func smoke(t testing.TB) *jobs.Spec {
	t.Helper()
	s, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func claim(t *testing.T, st *store.Store, dev string) *store.Grant {
	t.Helper()
	ctx := context.Background()
	d, err := st.GetDevice(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	pd := &store.PlacementDevice{ID: d.ID, Platform: d.Platform, DeviceModel: d.DeviceModel, RAMBytes: *d.RAMBytes, Labels: d.EffectiveLabels()}
	cands, err := st.Candidates(ctx, &store.CandidatesParams{Device: pd})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, c := range cands {
		ids = append(ids, c.RunID)
	}
	g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: dev, RunIDs: ids, LeaseTTL: 10 * time.Second, Coordinator: "t"})
	if err != nil {
		t.Fatalf("claim for %s: %v", dev, err)
	}
	return g
}

func TestRunLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	addDevice(t, st, "dev-a", map[string]string{"pool": "ci"})
	spec := smoke(t)
	tr, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "b1", GitSHA: "abc"})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].State != store.RunQueued || tr.RunIDs[0] != runs[0].ID {
		t.Fatalf("runs = %+v", runs)
	}
	g := claim(t, st, "dev-a")
	if g.Run.State != store.RunAssigned || g.Token == 0 || g.Run.Attempts != 1 || g.Job.Spec.Name != "smoke" {
		t.Fatalf("grant = %+v", g)
	}
	// The device holds a run: a second claim is refused.
	if _, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "dev-a", RunIDs: []int64{g.Run.ID}, LeaseTTL: time.Second}); !errors.Is(err, store.ErrBusy) {
		t.Fatalf("second claim: %v", err)
	}
	if err := st.AckAssignment(ctx, g.Run.ID, g.Token+1); !errors.Is(err, store.ErrStaleToken) {
		t.Fatalf("stale ack: %v", err)
	}
	if err := st.AckAssignment(ctx, g.Run.ID, g.Token); err != nil {
		t.Fatal(err)
	}
	renewed, cancels, err := st.RenewLeases(ctx, &store.RenewLeasesParams{DeviceID: "dev-a", TTL: 10 * time.Second,
		Runs: []protocol.RunStatus{{RunID: g.Run.ID, Token: g.Token, State: protocol.RunStateRunning, Progress: 0.5}, {RunID: 999, Token: 1, State: "running"}}})
	if err != nil || len(renewed) != 1 || len(cancels) != 1 || cancels[0].RunID != 999 {
		t.Fatalf("renew: %v %+v %+v", err, renewed, cancels)
	}
	// Telemetry: a batch, its duplicate, and a stale-token batch.
	b := &protocol.TelemetryBatch{RunID: g.Run.ID, Token: g.Token, DeviceID: "dev-a", Seq: 0, Samples: []protocol.Sample{
		{Step: 0, Phase: protocol.PhasePrefill, Tokens: 16, DurationNS: 100},
		{Step: 1, Phase: protocol.PhaseDecode, Tokens: 1, DurationNS: 10, Layers: &protocol.LayerCounts{Hits: []int32{1, 2}, Misses: []int32{3, 0}, PrefetchUsed: []int32{0, 0}, PrefetchWasted: []int32{1, 1}}},
	}}
	stale := *b
	stale.Token = g.Token - 1
	stale.Seq = 1
	wrongDev := *b
	wrongDev.DeviceID = "dev-x"
	wrongDev.Seq = 2
	ts, err := st.InsertTelemetry(ctx, []*protocol.TelemetryBatch{b, b, &stale, &wrongDev})
	if err != nil {
		t.Fatal(err)
	}
	if ts.Inserted != 2 || len(ts.Stale) != 2 || ts.Stale[0] != 2 || ts.Stale[1] != 3 {
		t.Fatalf("telemetry stats %+v", ts)
	}
	if n, _ := st.CountSamples(ctx, g.Run.ID); n != 2 {
		t.Fatalf("samples = %d", n)
	}
	// Stale result rejected; current one completes the run.
	res := &protocol.Result{RunID: g.Run.ID, Token: g.Token - 1, DeviceID: "dev-a", Outcome: protocol.OutcomeSucceeded,
		Configs: []protocol.ConfigResult{{ConfigIndex: 0, ConfigKey: "resident", DecodeTPS: protocol.Stat{N: 1, Mean: 42}, Valid: true}}}
	if _, err := st.CompleteRun(ctx, res); !errors.Is(err, store.ErrStaleToken) {
		t.Fatalf("stale result: %v", err)
	}
	res.Token = g.Token
	r, err := st.CompleteRun(ctx, res)
	if err != nil || r.State != store.RunSucceeded || r.FinishedAt == nil {
		t.Fatalf("complete: %v %+v", err, r)
	}
	if again, err := st.CompleteRun(ctx, res); !errors.Is(err, store.ErrAlreadyCompleted) || again == nil || again.ID != r.ID {
		t.Fatalf("redelivered result: %v", err)
	}
	other := *res
	other.Outcome, other.Error = protocol.OutcomeFailed, "x"
	if _, err := st.CompleteRun(ctx, &other); !errors.Is(err, store.ErrStaleToken) {
		t.Fatalf("a different result for a finished run: %v", err)
	}
	results, err := st.ListResults(ctx, &store.ListResultsParams{RunID: g.Run.ID, Limit: 10})
	if err != nil || len(results) != 1 || results[0].DecodeTPS.Mean != 42 || results[0].DeviceModel != "Pixel 8" {
		t.Fatalf("results: %v %+v", err, results)
	}
	if d, _ := st.GetDevice(ctx, "dev-a"); d.ActiveRunID != 0 {
		t.Fatalf("device still holds run %d", d.ActiveRunID)
	}
}

func TestLostDeviceRequeues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	addDevice(t, st, "dev-a", nil)
	spec := smoke(t)
	spec.Retry.MaxAttempts = 2
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	g1 := claim(t, st, "dev-a")
	b := &protocol.TelemetryBatch{RunID: g1.Run.ID, Token: g1.Token, DeviceID: "dev-a", Samples: []protocol.Sample{{Phase: "decode", Tokens: 1}}}
	if _, err := st.InsertTelemetry(ctx, []*protocol.TelemetryBatch{b}); err != nil {
		t.Fatal(err)
	}
	// Not lost while within TTL.
	if lost, _, _ := st.MarkDeviceLost(ctx, "dev-a", 0); lost {
		t.Fatal("device lost within its TTL")
	}
	if _, err := st.Pool().Exec(ctx, `UPDATE devices SET last_seen_at = now() - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	lost, lr, err := st.MarkDeviceLost(ctx, "dev-a", 0)
	if err != nil || !lost || len(lr) != 1 || !lr[0].Requeued || lr[0].RunID != runs[0].ID {
		t.Fatalf("lost: %v %v %+v", err, lost, lr)
	}
	r, _ := st.GetRun(ctx, runs[0].ID)
	if r.State != store.RunQueued || r.Error != "device lost" {
		t.Fatalf("run after loss: %+v", r)
	}
	if n, _ := st.CountSamples(ctx, r.ID); n != 0 {
		t.Fatalf("partial samples of the lost attempt kept: %d", n)
	}
	// While the run waits in the queue, the lost attempt's late telemetry
	// must not slip in under its old token.
	if ts, err := st.InsertTelemetry(ctx, []*protocol.TelemetryBatch{b}); err != nil || len(ts.Stale) != 1 {
		t.Fatalf("late telemetry of the lost attempt accepted while queued: %+v %v", ts, err)
	}
	if n, _ := st.CountSamples(ctx, r.ID); n != 0 {
		t.Fatalf("samples of the lost attempt stored after the requeue: %d", n)
	}
	if err := st.TouchDevice(ctx, "dev-a", time.Second, "t"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("touch of lost device: %v", err)
	}
	addDevice(t, st, "dev-b", nil)
	g2 := claim(t, st, "dev-b")
	if g2.Run.ID != r.ID || g2.Token <= g1.Token || g2.Run.Attempts != 2 {
		t.Fatalf("second grant %+v", g2)
	}
	// The old agent's late telemetry and result are rejected.
	ts, _ := st.InsertTelemetry(ctx, []*protocol.TelemetryBatch{b})
	if len(ts.Stale) != 1 {
		t.Fatalf("late telemetry accepted: %+v", ts)
	}
	if _, err := st.CompleteRun(ctx, &protocol.Result{RunID: r.ID, Token: g1.Token, DeviceID: "dev-a", Outcome: "succeeded"}); !errors.Is(err, store.ErrStaleToken) {
		t.Fatalf("late result: %v", err)
	}
	// Lease expiry of the last attempt: out of attempts -> infra_failed.
	if _, err := st.Pool().Exec(ctx, `UPDATE runs SET lease_expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	lr, err = st.ExpireLeases(ctx, 100)
	if err != nil || len(lr) != 1 || lr[0].Requeued {
		t.Fatalf("expire: %v %+v", err, lr)
	}
	if r, _ := st.GetRun(ctx, r.ID); r.State != store.RunInfraFailed {
		t.Fatalf("state = %s", r.State)
	}
}

func TestCancelAndTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	addDevice(t, st, "dev-a", nil)
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
	if err != nil {
		t.Fatal(err)
	}
	before, err := st.CancelRun(ctx, runs[0].ID, "not needed")
	if err != nil || before.State != store.RunQueued || before.Token != 0 {
		t.Fatalf("cancel queued: %v %+v", err, before)
	}
	if _, err := st.CancelRun(ctx, runs[0].ID, "again"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("cancel twice: %v", err)
	}
	_, runs, _ = st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
	g := claim(t, st, "dev-a")
	before, err = st.CancelRun(ctx, runs[0].ID, "user")
	if err != nil || before.Token != g.Token || before.DeviceID != "dev-a" {
		t.Fatalf("cancel active: %v %+v", err, before)
	}
	_, cancels, _ := st.RenewLeases(ctx, &store.RenewLeasesParams{DeviceID: "dev-a", TTL: time.Second, Runs: []protocol.RunStatus{{RunID: g.Run.ID, Token: g.Token, State: "running"}}})
	if len(cancels) != 1 || cancels[0].Reason != "cancelled: user" {
		t.Fatalf("cancels = %+v", cancels)
	}
	_, _, _ = st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
	g = claim(t, st, "dev-a")
	if _, err := st.Pool().Exec(ctx, `UPDATE runs SET deadline_at = now() - interval '1 second' WHERE id = $1`, g.Run.ID); err != nil {
		t.Fatal(err)
	}
	to, err := st.TimeoutRuns(ctx, 10)
	if err != nil || len(to) != 1 || to[0].Requeued {
		t.Fatalf("timeout: %v %+v", err, to)
	}
	if r, _ := st.GetRun(ctx, g.Run.ID); r.State != store.RunFailed || r.Error != "timed out after 5m0s" {
		t.Fatalf("after timeout: %s %q", r.State, r.Error)
	}
}

func TestFanoutAndSelector(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	addDevice(t, st, "dev-a", map[string]string{"pool": "ci"})
	addDevice(t, st, "dev-b", map[string]string{"pool": "lab"})
	spec := smoke(t)
	spec.Devices.Labels = map[string]string{"pool": "ci"}
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Fanout: true})
	if err != nil || len(runs) != 1 || runs[0].TargetDeviceID != "dev-a" {
		t.Fatalf("fanout: %v %+v", err, runs)
	}
	spec.Devices.Labels = map[string]string{"pool": "none"}
	if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Fanout: true}); !errors.Is(err, store.ErrNoDevices) {
		t.Fatalf("no devices: %v", err)
	}
	// dev-b does not match pool=ci: no candidates.
	d, _ := st.GetDevice(ctx, "dev-b")
	c, err := st.Candidates(ctx, &store.CandidatesParams{Device: &store.PlacementDevice{ID: "dev-b", Platform: "android", Labels: d.EffectiveLabels(), RAMBytes: 8 << 30}})
	if err != nil || len(c) != 0 {
		t.Fatalf("candidates for dev-b: %v %+v", err, c)
	}
	if _, err := st.SetDeviceLabels(ctx, "dev-b", map[string]string{"pool": "ci"}); err != nil {
		t.Fatal(err)
	}
	// Pinned to dev-a: still not for dev-b.
	c, _ = st.Candidates(ctx, &store.CandidatesParams{Device: &store.PlacementDevice{ID: "dev-b", Platform: "android", Labels: map[string]string{"pool": "ci"}, RAMBytes: 8 << 30}})
	if len(c) != 0 {
		t.Fatalf("pinned run offered to another device: %+v", c)
	}
}

// TestConcurrentClaimsNeverDoubleAssign has many claimers (as several
// coordinators would) race for the same queued runs.
func TestConcurrentClaimsNeverDoubleAssign(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	const devices, runs = 20, 30
	for i := range devices {
		addDevice(t, st, "dev-"+string(rune('a'+i)), nil)
	}
	var all []int64
	for range runs {
		_, rs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, rs[0].ID)
	}
	var mu sync.Mutex
	got := map[int64]string{}
	var wg sync.WaitGroup
	for i := range devices {
		for range 2 { // two "coordinators" per device
			wg.Add(1)
			go func() {
				defer wg.Done()
				dev := "dev-" + string(rune('a'+i))
				g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: dev, RunIDs: all, LeaseTTL: time.Minute})
				if err != nil {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if prev, dup := got[g.Run.ID]; dup {
					t.Errorf("run %d assigned to %s and %s", g.Run.ID, prev, dev)
				}
				got[g.Run.ID] = dev
			}()
		}
	}
	wg.Wait()
	perDevice := map[string]int{}
	for _, d := range got {
		perDevice[d]++
	}
	for d, n := range perDevice {
		if n > 1 {
			t.Errorf("device %s got %d runs", d, n)
		}
	}
	if len(got) != devices {
		t.Errorf("%d runs assigned, want %d (one per device)", len(got), devices)
	}
}

// TestAbortedResultRequeues: an agent that shuts down mid-run reports the
// attempt as aborted; that is an infrastructure failure, so the run goes
// back to the queue while attempts remain and ends infra_failed after.
func TestAbortedResultRequeues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	addDevice(t, st, "dev-a", nil)
	spec := smoke(t)
	spec.Retry.MaxAttempts = 2
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	for attempt, want := range []string{store.RunQueued, store.RunInfraFailed} {
		g := claim(t, st, "dev-a")
		if g.Run.ID != runs[0].ID {
			t.Fatalf("attempt %d: granted run %d", attempt+1, g.Run.ID)
		}
		r, err := st.CompleteRun(ctx, &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: "dev-a",
			Outcome: protocol.OutcomeAborted, Error: "agent shutting down"})
		if err != nil {
			t.Fatalf("attempt %d: %v", attempt+1, err)
		}
		if r.State != want {
			t.Fatalf("attempt %d: state %s, want %s", attempt+1, r.State, want)
		}
	}
}
