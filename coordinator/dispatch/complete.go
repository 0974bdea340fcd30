package dispatch

import (
	"context"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// CompleteRuns commits a batch of results and, in the same transaction,
// gives the devices they free their next runs (store.CompleteRunsPlace):
// the ingester's CompleteRuns. The picks are the placement pass's
// (pickPairs over the snapshot read inside the transaction, reserved
// against the concurrent passes until the commit), the grants are sent at
// once, and a device left unplaced is placed by freedLoop as before
// (OnCommit → Freed).
func (dp *Dispatcher) CompleteRuns(ctx context.Context, results []*protocol.Result) ([]store.ResultOutcome, error) {
	var rounds []*round
	pl := &store.PlaceParams{LeaseTTL: dp.grantTTL(), Coordinator: dp.cfg.Name, HeadExtra: dp.reserved.headExtra(), Pick: func(snap *store.PlacementSnapshot) []store.ClaimPair {
		r := &round{load: snap.Load, taken: map[int64]bool{}, head: toSched(snap.Head), truncated: snap.Truncated, shared: dp.reserved}
		rounds = append(rounds, r)
		pairs, _, _ := dp.pickPairs(r, snap.Devices)
		return pairs
	}}
	pr, err := dp.store.CompleteRunsPlace(ctx, results, pl)
	for _, r := range rounds {
		r.releaseAll()
	}
	if err != nil {
		return nil, err
	}
	if pr.PlaceErr != nil && ctx.Err() == nil {
		dp.log.WarnContext(ctx, "dispatch: placement in the results' commit given up", "results", len(results), "granted", len(pr.Grants), "err", pr.PlaceErr)
	}
	now := time.Now()
	for i := range pr.Grants {
		g := &pr.Grants[i]
		// Freed and granted in one commit.
		dp.work.placedInCommit(g.Run.DeviceID)
		dp.phases.observe(PhaseFreedToGrant, 0)
		dp.log.DebugContext(ctx, "dispatch: lease granted with the result", "run_id", g.Run.ID, "device_id", g.Run.DeviceID, "token", g.Token,
			"suite", g.Run.Suite, "attempt", g.Run.Attempts)
		dp.sendAt(g, now)
	}
	return pr.Outcomes, nil
}
