package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/protocol"
)

// FreedParams are how BeginCompleteRuns reads the placement of the
// devices its results free.
type FreedParams struct {
	// HeadExtra: see PlacementParams.HeadExtra.
	HeadExtra int
}

// ResultsTx is a batch of results written inside a transaction that is
// still open (BeginCompleteRuns), with the placement read of the devices
// they free. The caller picks runs for those devices (the store never
// decides placement), claims them in the same transaction (Claim) and
// ends it with Commit or Rollback. Until then the results' runs are locked
// and their devices still look busy to every other reader, so no other
// pass or coordinator can take a freed device's run between the results'
// commit and its claim: the two commit together. A ResultsTx is not safe
// for concurrent use; Rollback after Commit does nothing.
type ResultsTx struct {
	// Snapshot is the placement read of the freed devices that are idle,
	// with the suites' load and the head of the queue, read inside the
	// transaction after the results were written. It is nil when no
	// device was freed, none is idle, the queue is empty or the read
	// failed.
	Snapshot *PlacementSnapshot
	// ReadErr is why the placement read failed; the results still commit.
	ReadErr error

	s       *Store
	tx      pgx.Tx
	results []*protocol.Result
	// now are the indexes of results written in tx (outs, in the same
	// order); later are the repeats of a run, completed after the commit.
	now, later []int
	outs       []ResultOutcome
	claimed    []Run
}

// CompletedRuns is what ResultsTx.Commit committed.
type CompletedRuns struct {
	// Outcomes are CompleteRuns' outcomes, in the order of the results.
	Outcomes []ResultOutcome
	// Grants are the leases Claim granted, committed with the results;
	// the caller sends them.
	Grants []Grant
	// GrantErr is why a committed grant could not be read back (its job);
	// that lease expires unless the run is sent by other means.
	GrantErr error
}

// BeginCompleteRuns is CompleteRuns that leaves its transaction open: it
// locks and writes the results with CompleteRuns' rules and, in the same
// round trip, reads the placement of the devices they free (Placement's
// read, under a savepoint, so that a failed read does not undo the
// results). A run listed more than once is settled by its first result
// here, and the later ones after the commit (where they are stale or
// already completed). An error means nothing was written. The caller
// must end the ResultsTx with Commit or Rollback (defer Rollback).
func (s *Store) BeginCompleteRuns(ctx context.Context, results []*protocol.Result, p *FreedParams) (*ResultsTx, error) {
	all := make([]int, len(results))
	for i := range all {
		all[i] = i
	}
	now, later := firstOfEachRun(results, all)
	batch := make([]*protocol.Result, len(now))
	for k, i := range now {
		batch[k] = results[i]
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: complete run: %w", err)
	}
	outs, freed, err := s.completeIn(ctx, tx, batch, p)
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, fmt.Errorf("store: complete run: %w", err)
	}
	return &ResultsTx{Snapshot: freed.snap, ReadErr: freed.err, s: s, tx: tx, results: results, now: now, later: later, outs: outs}, nil
}

// Claim grants, inside the results' transaction, the pairs the caller
// picked from Snapshot, with ClaimRuns' statement and rules: the device
// and run rows are locked FOR UPDATE SKIP LOCKED, a pair is granted only
// while its device is online, undrained and idle and its run queued (and
// not refused as unfit), and each grant takes a fresh fencing token. A
// pair that fails these is left out. The claim runs under a savepoint: a
// claim the database refuses whole (a device proposed twice, or racing
// another claim past the locks: ErrBusy) is rolled back to it and
// returned, and the results still commit. The grants are returned by
// Commit. An error from a failed rollback means the transaction cannot
// commit.
func (t *ResultsTx) Claim(ctx context.Context, p *ClaimRunsParams) error {
	if t.tx == nil {
		return errors.New("store: claim: results transaction already ended")
	}
	if len(p.Pairs) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	b.Queue("SAVEPOINT " + placeSavepoint)
	b.Queue(claimRunsSQL, claimRunsArgs(p)...)
	b.Queue("RELEASE SAVEPOINT " + placeSavepoint)
	br := t.tx.SendBatch(ctx, b)
	_, err := br.Exec()
	var granted []Run
	if err == nil {
		granted, err = collectRuns(br.Query())
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if _, rerr := t.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+placeSavepoint); rerr != nil {
			return fmt.Errorf("%w (rollback: %v)", claimRunsErr(err), rerr)
		}
		return claimRunsErr(err)
	}
	t.claimed = append(t.claimed, granted...)
	return nil
}

// Commit commits the results and the claims with them, sends their
// notices, reads the grants' jobs and completes the repeated results (see
// BeginCompleteRuns). An error with a nil CompletedRuns means nothing was
// committed; with one, the first transaction committed (its grants are
// there to send) and the repeats failed.
func (t *ResultsTx) Commit(ctx context.Context) (*CompletedRuns, error) {
	if t.tx == nil {
		return nil, errors.New("store: complete run: results transaction already ended")
	}
	tx := t.tx
	t.tx = nil
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("store: complete run: %w", err)
	}
	done := &CompletedRuns{Outcomes: make([]ResultOutcome, len(t.results))}
	var notices []Run
	for k, i := range t.now {
		done.Outcomes[i] = t.outs[k]
		if t.outs[k].Err == nil {
			notices = append(notices, *t.outs[k].Run)
		}
	}
	t.s.notifyRunsLater(ctx, append(notices, t.claimed...))
	done.Grants, done.GrantErr = t.s.grantsOf(ctx, t.claimed)
	if len(t.later) == 0 {
		return done, nil
	}
	rest := make([]*protocol.Result, len(t.later))
	for k, i := range t.later {
		rest[k] = t.results[i]
	}
	outs, err := t.s.CompleteRuns(ctx, rest)
	if err != nil {
		return done, err
	}
	for k, i := range t.later {
		done.Outcomes[i] = outs[k]
	}
	return done, nil
}

// Rollback abandons the results and the claims (nothing of them is
// written). After Commit it does nothing.
func (t *ResultsTx) Rollback(ctx context.Context) {
	if t.tx != nil {
		_ = t.tx.Rollback(ctx)
		t.tx = nil
	}
}

// placeSavepoint keeps a failed placement read or claim from aborting the
// results' transaction.
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
