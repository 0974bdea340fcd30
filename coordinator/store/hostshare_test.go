package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// addEmulated registers an emulated device (host agent with a storage
// profile) with the given agent labels.
func addEmulated(t *testing.T, st *store.Store, id string, emulated bool, labels map[string]string) {
	t.Helper()
	fp := protocol.Fingerprint{Platform: "linux", DeviceModel: "emulated:phone-mid", RAMBytes: i64(8 << 30), Emulated: emulated, Profile: "phone-mid"}
	if !emulated {
		fp.DeviceModel, fp.Profile = "Pixel 8", ""
	}
	if _, err := st.UpsertDevice(context.Background(), &store.UpsertDeviceParams{ID: id, TTL: time.Minute, Labels: labels, Fingerprint: fp}); err != nil {
		t.Fatal(err)
	}
}

// activeByDevice returns the device of every assigned or running run.
func activeByDevice(t *testing.T, st *store.Store, ids []int64) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, id := range ids {
		r, err := st.GetRun(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.State == store.RunAssigned || r.State == store.RunRunning {
			out[r.DeviceID] = id
		}
	}
	return out
}

// TestHostSharedEmulatedDevicesTakeTurns: emulated devices that declare
// one host get one run at a time, even when every device of the host
// claims at once from two "coordinators"; devices of another host, real
// devices with the same label and emulated devices without one are not
// held back. IdleDevices leaves out the waiting devices.
func TestHostSharedEmulatedDevicesTakeTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	h1 := map[string]string{store.HostLabel: "host-1"}
	h2 := map[string]string{store.HostLabel: "host-2"}
	for _, id := range []string{"h1-a", "h1-b", "h1-c", "h1-d"} {
		addEmulated(t, st, id, true, h1)
	}
	addEmulated(t, st, "h2-a", true, h2)
	addEmulated(t, st, "h2-b", true, h2)
	addEmulated(t, st, "real-on-h1", false, h1) // a phone cabled to host-1 has its own CPUs
	addEmulated(t, st, "emu-unlabelled", true, nil)
	devices := []string{"h1-a", "h1-b", "h1-c", "h1-d", "h2-a", "h2-b", "real-on-h1", "emu-unlabelled"}
	var all []int64
	for range 2 * len(devices) {
		_, rs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, rs[0].ID)
	}
	var wg sync.WaitGroup
	for _, dev := range devices {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: dev, RunIDs: all, LeaseTTL: time.Minute, Coordinator: "t"})
				if err != nil && !errors.Is(err, store.ErrBusy) && !errors.Is(err, store.ErrNothingToClaim) {
					t.Errorf("claim for %s: %v", dev, err)
				}
			}()
		}
	}
	wg.Wait()
	active := activeByDevice(t, st, all)
	count := func(prefix string) int {
		n := 0
		for d := range active {
			if len(d) >= len(prefix) && d[:len(prefix)] == prefix {
				n++
			}
		}
		return n
	}
	if n := count("h1-"); n != 1 {
		t.Errorf("%d emulated devices of host-1 hold a run at once, want 1 (active: %v)", n, active)
	}
	if n := count("h2-"); n != 1 {
		t.Errorf("%d emulated devices of host-2 hold a run at once, want 1 (active: %v)", n, active)
	}
	for _, d := range []string{"real-on-h1", "emu-unlabelled"} {
		if _, ok := active[d]; !ok {
			t.Errorf("%s holds no run: only emulated devices sharing a host take turns (active: %v)", d, active)
		}
	}
	idle, err := st.IdleDevices(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(idle) != 0 {
		t.Errorf("idle devices %v, want none (each is busy or its host is)", idle)
	}
	// When host-1's run ends, its other devices are idle again.
	for d, id := range active {
		if d[:3] != "h1-" {
			continue
		}
		r, err := st.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		finish(t, st, r.ID, r.Token, d)
		idle, err := st.IdleDevices(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, x := range idle {
			got[x.ID] = true
		}
		if len(got) != 4 || !got["h1-a"] || !got["h1-b"] || !got["h1-c"] || !got["h1-d"] {
			t.Errorf("after host-1's run ended, idle devices %v, want the four of host-1", idle)
		}
	}
}

func finish(t *testing.T, st *store.Store, runID, token int64, dev string) {
	t.Helper()
	ctx := context.Background()
	if err := st.AckAssignment(ctx, runID, token); err != nil {
		t.Fatalf("ack run %d: %v", runID, err)
	}
	res := &protocol.Result{RunID: runID, Token: token, DeviceID: dev, Outcome: protocol.OutcomeSucceeded,
		Configs: []protocol.ConfigResult{{ConfigIndex: 0, ConfigKey: "resident", DecodeTPS: protocol.Stat{N: 1, Mean: 42}, Valid: true}}}
	if _, err := st.CompleteRun(ctx, res); err != nil {
		t.Fatalf("complete run %d: %v", runID, err)
	}
}

// TestHostSharedRunsNeverOverlap runs a farm of simulated agents: six
// emulated devices on one host, each claiming (from two coordinators),
// running and completing runs as fast as it can until the queue is empty,
// while an observer reads, statement by statement, how many runs the
// host's devices hold. It must never see two, and every run must finish.
func TestHostSharedRunsNeverOverlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	host := map[string]string{store.HostLabel: "shared"}
	const devices, runs = 6, 24
	var ids []string
	for i := range devices {
		id := fmt.Sprintf("emu-%d", i)
		addEmulated(t, st, id, true, host)
		ids = append(ids, id)
	}
	spec := smoke(t)
	spec.Devices = jobs.Selector{}
	var all []int64
	for range runs {
		_, rs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, rs[0].ID)
	}
	var done atomic.Int64
	stop := make(chan struct{})
	var observed, maxSeen atomic.Int64
	var obsWG sync.WaitGroup
	obsWG.Add(1)
	go func() {
		defer obsWG.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, err := st.CountActiveRunsOnHost(ctx, "shared")
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("observe: %v", err)
				}
				return
			}
			observed.Add(1)
			if int64(n) > maxSeen.Load() {
				maxSeen.Store(int64(n))
			}
		}
	}()
	var wg sync.WaitGroup
	perDevice := make([]atomic.Int64, devices)
	// finished is closed (and replaced) whenever a run finishes: a refused
	// claimer waits for it, since only a finish frees the host.
	var finMu sync.Mutex
	finished := make(chan struct{})
	nextFinish := func() <-chan struct{} {
		finMu.Lock()
		defer finMu.Unlock()
		return finished
	}
	for i, dev := range ids {
		for c := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					// Taken before the check and the claim: a finish in
					// between closes it, and the last one counts before it
					// replaces it, so a late taker sees done == runs.
					turn := nextFinish()
					if done.Load() >= runs {
						return
					}
					g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: dev, RunIDs: all, LeaseTTL: time.Minute, Coordinator: fmt.Sprint("c", c)})
					if errors.Is(err, store.ErrBusy) || errors.Is(err, store.ErrNothingToClaim) {
						<-turn // another device's turn
						continue
					}
					if err != nil {
						t.Errorf("claim for %s: %v", dev, err)
						return
					}
					finish(t, st, g.Run.ID, g.Token, dev)
					perDevice[i].Add(1)
					done.Add(1)
					finMu.Lock()
					close(finished)
					finished = make(chan struct{})
					finMu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	obsWG.Wait()
	if m := maxSeen.Load(); m > 1 {
		t.Fatalf("the observer saw %d runs at once on one host's emulated devices", m)
	}
	if observed.Load() == 0 {
		t.Fatal("the observer read nothing")
	}
	busy := 0
	for i := range perDevice {
		if perDevice[i].Load() > 0 {
			busy++
		}
	}
	t.Logf("%d runs on %d of %d devices, %d observations, at most %d at once", done.Load(), busy, devices, observed.Load(), maxSeen.Load())
	if done.Load() != runs {
		t.Fatalf("%d of %d runs finished", done.Load(), runs)
	}
}
