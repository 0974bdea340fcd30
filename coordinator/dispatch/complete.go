package dispatch

import (
	"context"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// CompleteRuns commits a batch of results and gives the devices they free
// their next runs: the store commits the results and, in the same round
// trip, reads the freed devices' placement (store.CompleteRunsFreed); the
// scheduler picks from that snapshot (pickPairs, reserved against the
// concurrent passes until the claim), and the store claims the pairs
// (store.ClaimRuns), which grants a pair only while its device is idle and
// its run queued, so a device another coordinator placed meanwhile is left
// out. The grants are sent at once; a device left unplaced is placed by
// freedLoop (Freed, when ingest reports the result committed). It is the
// coordinator's ingest.Reporter.CompleteRuns.
func (dp *Dispatcher) CompleteRuns(ctx context.Context, results []*protocol.Result) ([]store.ResultOutcome, error) {
	// The results' devices are idle from the commit until the claim: they
	// are reserved from before the commit, so a concurrent pass (a full
	// round woken by the runs' end notices) that reads them idle skips
	// them, and the two never propose runs for one device (a claim racing
	// another for a device is refused whole: store.ClaimRuns).
	ids := make([]string, len(results))
	for i, res := range results {
		ids[i] = res.DeviceID
	}
	held := dp.reserved.takeDeviceIDs(ids)
	defer dp.reserved.releaseDevices(held)
	fr, err := dp.store.CompleteRunsFreed(ctx, results, &store.FreedParams{HeadExtra: dp.reserved.headExtra()})
	if err != nil {
		return nil, err
	}
	committed := time.Now()
	if fr.ReadErr != nil && ctx.Err() == nil {
		dp.log.WarnContext(ctx, "dispatch: freed devices' placement read failed", "results", len(results), "err", fr.ReadErr)
	}
	mine := make(map[string]bool, len(held))
	for _, id := range held {
		mine[id] = true
	}
	for _, snap := range fr.Snapshots {
		dp.claimFreed(ctx, snap, mine, committed)
	}
	return fr.Outcomes, nil
}

// claimFreed picks runs for the freed devices of snap that this call
// reserved (mine) and claims them, sending each grant.
func (dp *Dispatcher) claimFreed(ctx context.Context, snap *store.PlacementSnapshot, mine map[string]bool, committed time.Time) {
	var devs []store.PlacementDevice
	for _, d := range snap.Devices {
		if mine[d.ID] {
			devs = append(devs, d)
		}
	}
	r := &round{load: snap.Load, taken: map[int64]bool{}, head: toSched(snap.Head), truncated: snap.Truncated, shared: dp.reserved}
	defer r.releaseAll()
	pairs, _, _ := dp.pickPairs(r, devs)
	if len(pairs) == 0 {
		return
	}
	grants, err := dp.store.ClaimRuns(ctx, &store.ClaimRunsParams{Pairs: pairs, LeaseTTL: dp.grantTTL(), Coordinator: dp.cfg.Name})
	if err != nil && ctx.Err() == nil {
		dp.log.WarnContext(ctx, "dispatch: claim for freed devices given up", "pairs", len(pairs), "granted", len(grants), "err", err)
	}
	now := time.Now()
	for i := range grants {
		g := &grants[i]
		dp.work.placedWithResult(g.Run.DeviceID)
		dp.phases.observe(PhaseFreedToGrant, now.Sub(committed))
		dp.log.DebugContext(ctx, "dispatch: lease granted with the result", "run_id", g.Run.ID, "device_id", g.Run.DeviceID, "token", g.Token,
			"suite", g.Run.Suite, "attempt", g.Run.Attempts)
		dp.sendAt(g, now)
	}
}
