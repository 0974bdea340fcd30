package store

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ClaimPair proposes one run for one device.
type ClaimPair struct {
	DeviceID string
	RunID    int64
}

// ClaimRunsParams are the arguments of ClaimRuns.
type ClaimRunsParams struct {
	// Pairs are the proposals; a device and a run appear at most once.
	Pairs       []ClaimPair
	LeaseTTL    time.Duration
	Coordinator string
	// UnfitFor: see ClaimRunParams.UnfitFor.
	UnfitFor time.Duration
}

// ClaimRuns grants many leases in one statement, with ClaimRun's rules for
// each pair: the device row is locked FOR UPDATE SKIP LOCKED and must be
// online, undrained and without an active run; the run row is locked FOR
// UPDATE SKIP LOCKED and must be queued; a run the device refused as unfit
// within UnfitFor is not granted; each grant takes its own fencing token.
// A pair that fails any of these is left out of the result (its device
// may try another run, e.g. with ClaimRun), and so is every emulated
// device sharing a host (HostLabel): those take turns through ClaimRun's
// advisory lock on the host. One round trip instead of
// ClaimRun's five per device is what lets a coordinator place a whole
// fleet's worth of freed devices at once.
//
// A pair listed twice, or two claims racing for one device past the
// locks, make the partial unique index on active runs per device refuse
// the statement: then nothing is granted and the error says so
// (ErrBusy).
func (s *Store) ClaimRuns(ctx context.Context, p *ClaimRunsParams) ([]Grant, error) {
	if len(p.Pairs) == 0 {
		return nil, nil
	}
	granted, err := claimRunsOn(ctx, s.pool, p)
	if err != nil {
		return nil, err
	}
	s.notifyRunsLater(ctx, granted)
	return s.grantsOf(ctx, granted)
}

// claimQuerier is a pool or a transaction.
type claimQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// claimRunsSQL is ClaimRuns' statement; its arguments are claimRunsArgs.
var claimRunsSQL = `WITH p AS (
			SELECT p.* FROM unnest($1::text[], $2::bigint[]) AS p(device_id, run_id), ` + deferNotify + `),
		d AS MATERIALIZED (
			SELECT d.id FROM devices d
			WHERE d.id = ANY($1) AND d.state = 'online' AND NOT d.drained
			  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.device_id = d.id AND r.state IN ('assigned', 'running'))
			  AND ` + hostOf("d") + ` IS NULL
			FOR UPDATE OF d SKIP LOCKED),
		q AS MATERIALIZED (
			SELECT r.id FROM runs r WHERE r.id = ANY($2) AND r.state = 'queued' FOR UPDATE OF r SKIP LOCKED),
		ok AS (
			SELECT p.device_id, p.run_id FROM p JOIN d ON d.id = p.device_id JOIN q ON q.id = p.run_id
			WHERE NOT ` + unfitSQL("p.run_id", "p.device_id", "$5") + `),
		r AS (
			UPDATE runs r SET state = 'assigned', device_id = ok.device_id, token = nextval('fencing_tokens'),
				attempts = attempts + 1, assigned_at = now(), started_at = NULL, finished_at = NULL, updated_at = now(),
				lease_expires_at = now() + make_interval(secs => $3::float8),
				deadline_at = now() + make_interval(secs => timeout_ms::float8 / 1000), not_before = NULL
			FROM ok WHERE r.id = ok.run_id
			RETURNING r.*),
		l AS (INSERT INTO leases (token, run_id, device_id, coordinator, expires_at)
			SELECT token, id, device_id, $4, lease_expires_at FROM r),
		dv AS (UPDATE devices SET last_assigned_at = now() FROM r WHERE devices.id = r.device_id)
		SELECT ` + runCols + ` FROM r`

func claimRunsArgs(p *ClaimRunsParams) []any {
	devs := make([]string, len(p.Pairs))
	runs := make([]int64, len(p.Pairs))
	for i, pr := range p.Pairs {
		devs[i], runs[i] = pr.DeviceID, pr.RunID
	}
	return []any{devs, runs, p.LeaseTTL.Seconds(), p.Coordinator, cmp.Or(p.UnfitFor, UnfitFor).Seconds()}
}

// claimRunsOn is ClaimRuns' statement on q, returning the granted runs.
func claimRunsOn(ctx context.Context, q claimQuerier, p *ClaimRunsParams) ([]Run, error) {
	rows, err := q.Query(ctx, claimRunsSQL, claimRunsArgs(p)...)
	granted, err := collectRuns(rows, err)
	return granted, claimRunsErr(err)
}

func claimRunsErr(err error) error {
	if isUniqueViolation(err) {
		return fmt.Errorf("store: claim runs: %w", ErrBusy)
	}
	if err != nil {
		return fmt.Errorf("store: claim runs: %w", err)
	}
	return nil
}

// grantsOf returns the grants of committed claims, with their jobs.
func (s *Store) grantsOf(ctx context.Context, granted []Run) ([]Grant, error) {
	out := make([]Grant, 0, len(granted))
	for _, r := range granted {
		job, err := s.GetJob(ctx, r.JobID)
		if err != nil {
			// Granted and committed: the lease expires unless the caller
			// sends it, so report the error rather than drop the grant
			// silently.
			return out, fmt.Errorf("store: claim runs: job of run %d: %w", r.ID, err)
		}
		out = append(out, Grant{Run: r, Job: *job, Token: r.Token, LeaseExpiresAt: *r.LeaseExpiresAt, Deadline: *r.DeadlineAt})
	}
	return out, nil
}

// AckRenew is one acknowledged assignment for AckAssignmentsRenew.
type AckRenew struct {
	RunID, Token int64
}

// AckAssignmentsRenew is AckAssignment for many assignments in one
// statement, each lease also renewed to ttl from now: the lease granted at
// claim time covered the assignment's delivery, and the agent's heartbeats
// renew it from here. acked[i] says whether acks[i] was current (its token
// the run's, the run assigned or running); one that was not is left
// unchanged. The rows are locked in id order, so concurrent batches never
// deadlock on each other. Its commit is asynchronous: a lost
// acknowledgement is repaired by the next heartbeat, which moves an
// assigned run the agent runs to running.
func (s *Store) AckAssignmentsRenew(ctx context.Context, acks []AckRenew, ttl time.Duration) (acked []bool, err error) {
	ids := make([]int64, len(acks))
	tokens := make([]int64, len(acks))
	for i, a := range acks {
		ids[i], tokens[i] = a.RunID, a.Token
	}
	rows, err := s.pool.Query(ctx, `WITH l AS (
			SELECT r.id FROM runs r JOIN unnest($1::bigint[], $2::bigint[]) AS u(id, token) ON r.id = u.id AND r.token = u.token
			WHERE r.state IN ('assigned', 'running') ORDER BY r.id FOR NO KEY UPDATE OF r)
		UPDATE runs SET state = 'running', started_at = coalesce(started_at, now()), updated_at = now(),
			lease_expires_at = greatest(lease_expires_at, now() + make_interval(secs => $3::float8))
		FROM l, `+asyncCommit+` WHERE runs.id = l.id
		RETURNING runs.id`, ids, tokens, ttl.Seconds())
	if err != nil {
		return nil, fmt.Errorf("store: ack assignments: %w", err)
	}
	defer rows.Close()
	done := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("store: ack assignments: %w", err)
		}
		done[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: ack assignments: %w", err)
	}
	acked = make([]bool, len(acks))
	for i, a := range acks {
		acked[i] = done[a.RunID]
	}
	return acked, nil
}
