package dispatch

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// Wake asks the dispatcher to run a placement round over every idle
// device soon. It never blocks.
func (dp *Dispatcher) Wake() {
	dp.work.setFull()
	dp.signal()
}

// signal wakes the dispatch loop for the work pending (dp.work).
func (dp *Dispatcher) signal() {
	dp.phases.woken(time.Now())
	select {
	case dp.wake <- struct{}{}:
	default:
	}
}

// dispatchLoop runs full placement rounds (every idle device) on
// wake-ups and on every tick. The devices results free are placed by
// freedLoop, concurrently, so they never wait for a full round.
func (dp *Dispatcher) dispatchLoop(ctx context.Context) {
	t := time.NewTicker(dp.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-dp.wake:
		case <-t.C:
			dp.work.setFull()
		}
		if !dp.work.takeFull() {
			continue
		}
		start := time.Now()
		dp.phases.roundStarts(start)
		if err := dp.dispatchRound(ctx, nil); err != nil && ctx.Err() == nil {
			dp.log.ErrorContext(ctx, "dispatch: dispatch round", "err", err)
		}
		dp.log.DebugContext(ctx, "dispatch: dispatch round done", "took", time.Since(start))
	}
}

// freedLoop places the devices that committed results freed, one pass
// over those devices alone as soon as one is freed: a lone result's
// device is placed at once, and the devices freed while a pass is in
// flight go together in the next one (a batch only under backlog).
func (dp *Dispatcher) freedLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-dp.wakeFreedCh:
		}
		freed := dp.work.takeFreed()
		if freed == nil {
			continue
		}
		start := time.Now()
		if err := dp.dispatchRound(ctx, freed); err != nil && ctx.Err() == nil {
			dp.log.ErrorContext(ctx, "dispatch: freed-device pass", "devices", len(freed), "err", err)
		}
		dp.log.DebugContext(ctx, "dispatch: freed-device pass done", "devices", len(freed), "took", time.Since(start))
	}
}

// dispatchRound gives queued runs to idle devices until a pass leaves an
// idle device unplaced; with freed set, one pass over those devices only
// (the ones results just freed). One round trip reads a pass's inputs:
// the idle devices, the suites' load and the head of every suite's queue
// (store.Placement); workers then take candidates from that shared list
// (each run is tried by one worker of this coordinator) and claim them in
// the database, where SKIP LOCKED arbitrates between coordinators. A
// device that matches nothing in a truncated list asks the database for
// its own candidates.
func (dp *Dispatcher) dispatchRound(ctx context.Context, freed []string) error {
	for ctx.Err() == nil {
		qstart := time.Now()
		snap, err := dp.store.Placement(ctx, &store.PlacementParams{DeviceIDs: freed, Limit: 2000, HeadExtra: dp.reserved.headExtra()})
		if err != nil || len(snap.Devices) == 0 || len(snap.Head) == 0 {
			return err
		}
		load, head, truncated := snap.Load, snap.Head, snap.Truncated
		dp.phases.observe(PhaseRoundQueries, time.Since(qstart))
		// Devices a concurrent pass read are that pass's to place.
		devs, held := dp.reserved.takeDevices(snap.Devices)
		if len(devs) == 0 {
			return nil
		}
		r := &round{load: load, taken: map[int64]bool{}, head: toSched(head), truncated: truncated, shared: dp.reserved}
		// One batch claim for every device the shared head has a run for;
		// the devices it left out (run taken elsewhere, unfit, nothing in
		// the head) go through place, one claim each.
		rest := dp.claimBatch(ctx, r, devs)
		var wg sync.WaitGroup
		next := make(chan *store.PlacementDevice)
		for range dp.cfg.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for d := range next {
					g, err := dp.place(ctx, r, d)
					if err != nil {
						if ctx.Err() == nil {
							dp.log.ErrorContext(ctx, "dispatch: place", "device_id", d.ID, "err", err)
						}
						continue
					}
					if g != nil {
						dp.send(g)
					}
				}
			}()
		}
		for _, d := range rest {
			select {
			case next <- d:
			case <-ctx.Done():
			}
		}
		close(next)
		wg.Wait()
		r.releaseAll()
		dp.reserved.releaseDevices(held)
		// Another pass only when this one placed every idle device it
		// read (more may be idle beyond the read's limit, or freed
		// meanwhile). A pass that left devices unplaced found nothing for
		// them, and a pass to confirm it (all its reads again) doubled the
		// database work of every round at 1,000 agents; runs queued or
		// devices freed since wake the dispatcher again.
		if freed != nil && r.granted < len(devs) && r.skippedReserved {
			// Runs this device could take were picked by a concurrent pass,
			// which may not claim them all: a full round rechecks.
			dp.Wake()
		}
		if freed != nil || r.granted == 0 || r.granted < len(devs) {
			return nil
		}
	}
	return nil
}

// grantTTL is the lease a claim grants: LeaseTTL from the agent's answer,
// which may take up to AssignTimeout (the acknowledgement renews it to
// LeaseTTL). A lease shorter than its own delivery would expire, and be
// granted again, while its assignment is still on the way; an agent that
// never answers has its lease released by sendAssignment, not by expiry.
func (dp *Dispatcher) grantTTL() time.Duration { return dp.cfg.LeaseTTL + dp.cfg.AssignTimeout }

// send pushes a grant to its agent in the background.
func (dp *Dispatcher) send(g *store.Grant) {
	at := time.Now()
	dp.phases.granted(g.Run.DeviceID, at)
	dp.sendAt(g, at)
}

// sendAt pushes a grant made at at to its agent in the background.
func (dp *Dispatcher) sendAt(g *store.Grant, at time.Time) {
	dp.sendWG.Add(1)
	go func() {
		defer dp.sendWG.Done()
		dp.sendAssignment(g, at)
	}()
}

// claimBatch picks the best run of the shared head for each device and
// claims all the pairs in one statement (store.ClaimRuns), sending each
// grant at once. It returns the devices still unplaced, for place.
func (dp *Dispatcher) claimBatch(ctx context.Context, r *round, devs []store.PlacementDevice) []*store.PlacementDevice {
	pairs, rest, byDevice := dp.pickPairs(r, devs)
	if len(pairs) == 0 {
		return rest
	}
	cstart := time.Now()
	grants, err := dp.store.ClaimRuns(ctx, &store.ClaimRunsParams{Pairs: pairs, LeaseTTL: dp.grantTTL(), Coordinator: dp.cfg.Name})
	dp.phases.observe(PhaseClaim, time.Since(cstart))
	if err != nil && ctx.Err() == nil {
		dp.log.WarnContext(ctx, "dispatch: batch claim, placing one by one", "pairs", len(pairs), "granted", len(grants), "err", err)
	}
	placed := map[string]bool{}
	for i := range grants {
		g := &grants[i]
		placed[g.Run.DeviceID] = true
		r.mu.Lock()
		r.granted++
		r.load[g.Run.Suite]++
		r.mu.Unlock()
		dp.log.DebugContext(ctx, "dispatch: lease granted", "run_id", g.Run.ID, "device_id", g.Run.DeviceID, "token", g.Token,
			"suite", g.Run.Suite, "attempt", g.Run.Attempts, "batch", len(pairs))
		dp.send(g)
	}
	for _, p := range pairs {
		if placed[p.DeviceID] {
			continue
		}
		// Its run went elsewhere or it refused it as unfit: place tries
		// the device's next candidates (the run stays taken in this round,
		// so it is not tried again).
		rest = append(rest, byDevice[p.DeviceID])
	}
	return rest
}

// place claims the best run for one idle device, or returns nil.
func (dp *Dispatcher) place(ctx context.Context, r *round, d *store.PlacementDevice) (*store.Grant, error) {
	sd := d.Fit()
	cands := r.head
	own := false
	var tried map[int64]bool // runs this device tried in the round
	for attempt := 0; attempt < 8; attempt++ {
		cd, ok := r.pick(sd, cands, tried)
		if !ok {
			if own || !r.truncated {
				return nil, nil
			}
			// The shared head had nothing for this device but the queue is
			// longer: ask for the device's own candidates once.
			mine, err := dp.store.Candidates(ctx, &store.CandidatesParams{Device: d})
			if err != nil {
				return nil, err
			}
			cands, own = toSched(mine), true
			continue
		}
		if tried == nil {
			tried = map[int64]bool{}
		}
		tried[cd.RunID] = true
		g, err := dp.store.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: d.ID, RunIDs: []int64{cd.RunID}, LeaseTTL: dp.grantTTL(), Coordinator: dp.cfg.Name})
		if errors.Is(err, store.ErrBusy) {
			return nil, nil
		}
		if errors.Is(err, store.ErrUnfit) {
			// The device refused it as unfit (the store remembers that for
			// every coordinator): leave it to the other devices.
			r.untake(cd.RunID)
			continue
		}
		if errors.Is(err, store.ErrNothingToClaim) {
			continue // taken by another coordinator: try the next
		}
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.granted++
		r.load[g.Run.Suite]++
		r.mu.Unlock()
		dp.log.DebugContext(ctx, "dispatch: lease granted", "run_id", g.Run.ID, "device_id", d.ID, "token", g.Token,
			"suite", g.Run.Suite, "attempt", g.Run.Attempts)
		return g, nil
	}
	return nil, nil
}
