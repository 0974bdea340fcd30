package agent

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestE2EOneConnectionPerDevice is issue 29's finding 11 end to end: a
// second real agent with the same device id takes the device over. The
// first agent's run is failed over (its lease gone, so nothing it still
// reports is accepted), its next heartbeat is answered Superseded and its
// Run returns ErrSuperseded instead of saying hello again, and it ignores
// assignments, which name the new session. The run's next attempt runs
// on the second agent alone and succeeds with exactly one attempt's
// results and samples; the first attempt is blamed on nothing (the run
// ends without an error), and /readyz stays 200 through the takeover.
func TestE2EOneConnectionPerDevice(t *testing.T) {
	f := newE2EFarm(t)
	ctx := context.Background()
	spec := f.spec.Clone()
	spec.Repetitions = 30 // still running when the second agent arrives
	if raceEnabled {
		spec.Repetitions = 4
	}
	spec.Retry.MaxAttempts = 3
	a1 := startAgent(t, Config{NATSURL: f.url, Name: "e2e-twin"})
	_, runs, err := f.c.Store().CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "e2e", Fanout: true, Source: "test"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v err %v", runs, err)
	}
	id := runs[0].ID
	first := f.waitRun(t, id, store.RunRunning, 2*time.Minute)
	waitFor(t, 2*time.Minute, "the first agent publishing", func() bool {
		st := a1.a.Status()
		return st.RunState == "running" && st.Published > 0
	})

	a2 := startAgent(t, Config{NATSURL: f.url, Name: "e2e-twin"})
	if code := httpStatus(f.c.HTTPURL() + "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d during the takeover, want 200", code)
	}
	select {
	case err := <-a1.done:
		if !errors.Is(err, ErrSuperseded) {
			t.Fatalf("the first agent's Run returned %v, want ErrSuperseded", err)
		}
		a1.done <- err // for its cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("the first agent was not fenced within 30s of the second one's hello")
	}
	done := f.waitRun(t, id, store.RunSucceeded, 3*time.Minute)
	if done.Token == first.Token || done.Attempts < 2 || done.Error != "" {
		t.Fatalf("run: attempts %d token %d, want a later attempt than the first agent's token %d (error %q)", done.Attempts, done.Token, first.Token, done.Error)
	}
	if st := a2.a.Status(); st.RunsDone != 1 {
		t.Fatalf("the second agent finished %d runs, want 1", st.RunsDone)
	}
	res, err := f.c.Store().ListResults(ctx, &store.ListResultsParams{RunID: id, Limit: 10})
	if err != nil || len(res) != len(spec.Expand()) {
		t.Fatalf("results %d err %v, want exactly one attempt's %d configs", len(res), err, len(spec.Expand()))
	}
	want := expectedSamples(spec)
	waitFor(t, 30*time.Second, "every sample of the successful attempt", func() bool {
		n, err := f.c.Store().CountSamples(ctx, id)
		return err == nil && n == want
	})
	if n, _ := f.c.Store().CountSamples(ctx, id); n != want {
		t.Fatalf("%d samples stored, want exactly %d", n, want)
	}
	d, err := f.c.Store().GetDevice(ctx, "e2e-twin")
	if err != nil || d.State != "online" {
		t.Fatalf("device %+v err %v, want online under the second agent", d, err)
	}
}
