package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/protocol"
)

// FreedParams are how CompleteRunsFreed reads the placement of the
// devices its results free.
type FreedParams struct {
	// HeadExtra: see PlacementParams.HeadExtra.
	HeadExtra int
}

// FreedResults is what CompleteRunsFreed committed and read.
type FreedResults struct {
	// Outcomes are CompleteRuns' outcomes, in the order of the results.
	Outcomes []ResultOutcome
	// Snapshots are the placement reads of the devices the committed
	// results freed (those idle, with the suites' load and the head of
	// the queue), one per transaction that freed some, each read inside
	// its transaction after the results were written. The caller picks
	// runs for them and claims the pairs with ClaimRuns, whose locks and
	// conditions decide against every claim made since the read.
	Snapshots []*PlacementSnapshot
	// ReadErr is why a placement read failed (the results are committed
	// regardless; those devices are left to the caller's other passes).
	ReadErr error
}

// CompleteRunsFreed is CompleteRuns that also reads, in each
// transaction's last round trip, the placement of the devices its results
// free: the freed devices that are idle, the suites' load and the queue
// head (Placement's read, under a savepoint, so that a failed read does
// not undo the results). The read costs no round trip of its own, and the
// store never decides placement: the caller picks runs from the snapshot
// (coordinator/scheduler through coordinator/dispatch) and claims them with
// ClaimRuns, which locks the device and run rows FOR UPDATE SKIP LOCKED,
// grants a pair only while its device is still idle and its run still
// queued, and gives each grant a fresh fencing token. A device another
// coordinator placed after the snapshot is therefore never granted twice.
func (s *Store) CompleteRunsFreed(ctx context.Context, results []*protocol.Result, p *FreedParams) (*FreedResults, error) {
	return s.completeRuns(ctx, results, p)
}

// placeSavepoint keeps a failed placement read from aborting the results'
// transaction.
const placeSavepoint = "lesfarm_place"

// placeRead is the freed devices' placement read, done in the results'
// last round trip (placementTail).
type placeRead struct {
	snap *PlacementSnapshot
	err  error
}

// placementTail returns, when p is set and the batch's committed results
// (outs with no error so far) free devices, the tail for finishBatch that
// reads their placement (under a savepoint) and where it lands.
func placementTail(results []*protocol.Result, outs []ResultOutcome, p *FreedParams) (*placeRead, func(*pgx.Batch) func(pgx.BatchResults)) {
	if p == nil {
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
		pq := queuePlacement(b, &PlacementParams{DeviceIDs: devices, HeadExtra: p.HeadExtra}, "SAVEPOINT "+placeSavepoint)
		return func(br pgx.BatchResults) { read.snap, read.err = pq.read(br) }
	}
}

// freedSnapshot returns the placement read (a nil snap when there is
// nothing to place, err when the read failed); after a failed read it
// rolls tx back to the savepoint so the results still commit (an error
// returned means tx cannot commit).
func freedSnapshot(ctx context.Context, tx pgx.Tx, read *placeRead) (placeRead, error) {
	switch {
	case read == nil:
		return placeRead{}, nil
	case read.err != nil:
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+placeSavepoint); err != nil {
			return placeRead{}, fmt.Errorf("store: freed devices' placement: %w (rollback: %v)", read.err, err)
		}
		return placeRead{err: fmt.Errorf("store: freed devices' placement: %w", read.err)}, nil
	case len(read.snap.Devices) == 0 || len(read.snap.Head) == 0:
		return placeRead{}, nil
	}
	return placeRead{snap: read.snap}, nil
}
