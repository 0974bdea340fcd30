package dispatch

import (
	"context"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// CompleteRuns commits a batch of results and, in the same transaction,
// gives the devices they free their next runs: the store writes the
// results and, in the same round trip, reads the freed devices' placement
// (store.BeginCompleteRuns, which leaves the transaction open); the
// scheduler picks from that snapshot (pickPairs, reserved against this
// coordinator's concurrent passes until the commit); the store claims the
// pairs inside the transaction (ResultsTx.Claim: ClaimRuns' locks,
// conditions and fencing tokens, under a savepoint so a refused claim
// still lets the results commit); and results and grants commit together.
// Until that commit the freed devices still look busy to every other pass
// and coordinator, so none can take the runs picked for them in between.
// The grants are sent at once; a device left unplaced is placed by
// freedLoop (Freed, when ingest reports the result committed). It is the
// coordinator's ingest.Reporter.CompleteRuns.
func (dp *Dispatcher) CompleteRuns(ctx context.Context, results []*protocol.Result) ([]store.ResultOutcome, error) {
	// The results' devices are reserved from before the transaction, so a
	// pass of this coordinator that reads them idle after the commit (a
	// full round woken by the runs' end notices) skips them until the
	// grants are sent.
	ids := make([]string, len(results))
	for i, res := range results {
		ids[i] = res.DeviceID
	}
	held := dp.reserved.takeDeviceIDs(ids)
	defer dp.reserved.releaseDevices(held)
	rt, err := dp.store.BeginCompleteRuns(ctx, results, &store.FreedParams{HeadExtra: dp.reserved.headExtra()})
	if err != nil {
		return nil, err
	}
	defer rt.Rollback(ctx)
	if rt.ReadErr != nil && ctx.Err() == nil {
		dp.log.WarnContext(ctx, "dispatch: freed devices' placement read failed", "results", len(results), "err", rt.ReadErr)
	}
	if rt.Snapshot != nil {
		// The picks stay reserved until the claim has committed.
		r := dp.claimFreed(ctx, rt, held)
		defer r.releaseAll()
	}
	done, err := rt.Commit(ctx)
	if done != nil {
		if done.GrantErr != nil && ctx.Err() == nil {
			dp.log.WarnContext(ctx, "dispatch: grant with the result not read back", "err", done.GrantErr)
		}
		now := time.Now()
		for i := range done.Grants {
			g := &done.Grants[i]
			// Freed and granted in one commit.
			dp.work.placedWithResult(g.Run.DeviceID)
			dp.phases.observe(PhaseFreedToGrant, 0)
			dp.log.DebugContext(ctx, "dispatch: lease granted with the result", "run_id", g.Run.ID, "device_id", g.Run.DeviceID, "token", g.Token,
				"suite", g.Run.Suite, "attempt", g.Run.Attempts)
			dp.sendAt(g, now)
		}
	}
	if err != nil {
		return nil, err
	}
	return done.Outcomes, nil
}

// claimFreed picks runs from rt's snapshot for the freed devices this call
// reserved (mine) and claims them inside rt. It returns the pass, whose
// picks the caller releases once rt has committed or rolled back.
func (dp *Dispatcher) claimFreed(ctx context.Context, rt *store.ResultsTx, mine []string) *round {
	snap := rt.Snapshot
	r := &round{load: snap.Load, taken: map[int64]bool{}, head: toSched(snap.Head), truncated: snap.Truncated, shared: dp.reserved}
	held := make(map[string]bool, len(mine))
	for _, id := range mine {
		held[id] = true
	}
	var devs []store.PlacementDevice
	for _, d := range snap.Devices {
		if held[d.ID] {
			devs = append(devs, d)
		}
	}
	pairs, _, _ := dp.pickPairs(r, devs)
	if len(pairs) == 0 {
		return r
	}
	if err := rt.Claim(ctx, &store.ClaimRunsParams{Pairs: pairs, LeaseTTL: dp.grantTTL(), Coordinator: dp.cfg.Name}); err != nil && ctx.Err() == nil {
		dp.log.WarnContext(ctx, "dispatch: claim with the results refused, results commit without it", "pairs", len(pairs), "err", err)
	}
	return r
}
