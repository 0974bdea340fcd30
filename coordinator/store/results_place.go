package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/protocol"
)

// PlaceParams are how CompleteRunsPlace places the devices its results
// free.
type PlaceParams struct {
	// Pick proposes a run for some of the snapshot's devices (the freed
	// ones that are idle, with the suites' load and the head of the
	// queue, read inside the results' transaction): the coordinator's
	// scheduler. It is called inside the transaction, so it must not
	// block; it may be called once per transaction of the batch.
	Pick        func(snap *PlacementSnapshot) []ClaimPair
	LeaseTTL    time.Duration
	Coordinator string
	// HeadExtra: see PlacementParams.HeadExtra.
	HeadExtra int
}

// PlacedResults is what CompleteRunsPlace did.
type PlacedResults struct {
	// Outcomes are CompleteRuns' outcomes, in the order of the results.
	Outcomes []ResultOutcome
	// Grants are the leases granted to freed devices in the results'
	// transactions, committed with them; the caller sends them.
	Grants []Grant
	// PlaceErr is why a placement inside a transaction was given up (the
	// results are committed regardless; the devices are left idle).
	PlaceErr error

	granted []Run
}

// placement is the in-transaction placement of one completeBatch.
type placement struct {
	granted []Run
	err     error
}

// CompleteRunsPlace is CompleteRuns that also places the devices its
// results free, inside the same transaction: after the results are
// written, the same round trip reads the freed devices that are idle, the
// suites' load and the queue head (Placement's read, under a savepoint),
// pl.Pick proposes runs, and a second round trip claims them with
// ClaimRuns' statement and rules (device and run rows locked FOR UPDATE
// SKIP LOCKED, unfit runs refused, a fencing token per grant). The grants
// commit with the results, so a freed device's next lease costs no
// transaction, commit or wake-up of its own. A placement that fails (a
// claim racing another one for a device, see ClaimRuns) is rolled back to
// the savepoint and the results still commit: PlaceErr says why, and the
// devices it did not place are left to the caller.
func (s *Store) CompleteRunsPlace(ctx context.Context, results []*protocol.Result, pl *PlaceParams) (*PlacedResults, error) {
	pr, err := s.completeRuns(ctx, results, pl)
	if err != nil {
		return nil, err
	}
	// The claim's notices went out with the results'.
	pr.Grants, err = s.grantsOf(ctx, pr.granted)
	if err != nil && pr.PlaceErr == nil {
		pr.PlaceErr = err
	}
	return pr, nil
}

// placeSavepoint keeps a failed placement from aborting the results'
// transaction.
const placeSavepoint = "lesfarm_place"

// placeRead is the freed devices' placement read, done in the results'
// last round trip (placementTail).
type placeRead struct {
	snap *PlacementSnapshot
	err  error
}

// placementTail returns, when pl is set and the batch's committed results
// (outs with no error so far) free devices, the tail for finishBatch that
// reads their placement (under a savepoint) and where it lands.
func placementTail(results []*protocol.Result, outs []ResultOutcome, pl *PlaceParams) (*placeRead, func(*pgx.Batch) func(pgx.BatchResults)) {
	if pl == nil || pl.Pick == nil {
		return nil, nil
	}
	seen := map[string]bool{}
	var devices []string
	for i, o := range outs {
		if d := results[i].DeviceID; o.Err == nil && d != "" && !seen[d] {
			seen[d] = true
			devices = append(devices, d)
		}
	}
	if len(devices) == 0 {
		return nil, nil
	}
	read := &placeRead{err: errors.New("not read")}
	return read, func(b *pgx.Batch) func(pgx.BatchResults) {
		pq := queuePlacement(b, &PlacementParams{DeviceIDs: devices, HeadExtra: pl.HeadExtra}, "SAVEPOINT "+placeSavepoint)
		return func(br pgx.BatchResults) { read.snap, read.err = pq.read(br) }
	}
}

// placeFreed claims the runs pl.Pick proposes from the placement read
// inside tx, as CompleteRunsPlace describes; with read nil (nothing to
// place) it does nothing.
func placeFreed(ctx context.Context, tx pgx.Tx, read *placeRead, pl *PlaceParams) placement {
	if read == nil {
		return placement{}
	}
	granted, err := placeIn(ctx, tx, read, pl)
	if err != nil {
		if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+placeSavepoint); rerr != nil {
			// The transaction cannot go on: its commit fails, and the
			// results are applied again (one by one) by the caller.
			return placement{err: fmt.Errorf("store: place freed devices: %w (rollback: %v)", err, rerr)}
		}
		return placement{err: fmt.Errorf("store: place freed devices: %w", err)}
	}
	return placement{granted: granted}
}

func placeIn(ctx context.Context, tx pgx.Tx, read *placeRead, pl *PlaceParams) ([]Run, error) {
	if read.err != nil {
		return nil, read.err
	}
	snap := read.snap
	if len(snap.Devices) == 0 || len(snap.Head) == 0 {
		return nil, nil
	}
	pairs := pl.Pick(snap)
	if len(pairs) == 0 {
		return nil, nil
	}
	b := &pgx.Batch{}
	b.Queue(claimRunsSQL, claimRunsArgs(&ClaimRunsParams{Pairs: pairs, LeaseTTL: pl.LeaseTTL, Coordinator: pl.Coordinator})...)
	b.Queue("RELEASE SAVEPOINT " + placeSavepoint)
	br := tx.SendBatch(ctx, b)
	granted, err := collectRuns(br.Query())
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, claimRunsErr(err)
	}
	return granted, nil
}
