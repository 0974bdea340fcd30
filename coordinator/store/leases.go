package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/coordinator/fit"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// PlacementDevice is what placement needs to know about an idle device.
type PlacementDevice struct {
	ID          string
	Platform    string
	DeviceModel string
	RAMBytes    int64
	Emulated    bool
	Labels      map[string]string // effective labels
	// ExecPlatform and EmbeddedBuild are the fingerprint's: which build
	// executables the agent runs, and its embedded build's id.
	ExecPlatform, EmbeddedBuild string
}

// IdleDevices returns online, undrained devices without an active run, in
// least-recently-assigned order (so work spreads over the fleet). An
// emulated device whose host (HostLabel) is busy with another emulated
// device's run is not idle.
func (s *Store) IdleDevices(ctx context.Context, limit int) ([]PlacementDevice, error) {
	rows, err := s.pool.Query(ctx, idleDevicesSQL(""), limit)
	devs, err := scanPlacementDevices(rows, err)
	if err != nil {
		return nil, fmt.Errorf("store: idle devices: %w", err)
	}
	return devs, nil
}

// Candidate is a queued run that may go to a device.
type Candidate struct {
	RunID          int64
	Suite          string
	Priority       int
	QueuedAt       time.Time
	Selector       jobs.Selector
	TargetDeviceID string
	// Build is the run's build and Needs what it asks of a device (nil:
	// any device runs it with its embedded runtime).
	Build string
	Needs *fit.BuildNeeds
}

// CandidatesParams are the arguments of Candidates.
type CandidatesParams struct {
	Device *PlacementDevice
	// PerSuite bounds the candidates returned per suite (default 4), so
	// fairness can choose between suites without reading the whole queue.
	PerSuite int
	// UnfitFor: see ClaimRunParams.UnfitFor.
	UnfitFor time.Duration
}

// Candidates returns the best queued runs (by priority, then age) of each
// suite whose selector the device may satisfy, except runs the device has
// refused as unfit within UnfitFor (ClaimRun refuses those too). It reads without locking;
// ClaimRun locks. The SQL prefilter mirrors fit.Match, which makes the
// final decision.
func (s *Store) Candidates(ctx context.Context, p *CandidatesParams) ([]Candidate, error) {
	k := p.PerSuite
	if k <= 0 {
		k = 4
	}
	d := p.Device
	labels := d.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	rows, err := s.pool.Query(ctx, `SELECT q.id, q.suite, q.priority, q.queued_at, q.device_selector, coalesce(q.target_device_id, ''), `+buildNeedsCols+` FROM (
		SELECT r.*, row_number() OVER (PARTITION BY r.suite ORDER BY r.priority DESC, r.queued_at, r.id) AS rn
		FROM runs r
		WHERE r.state = 'queued' AND (r.not_before IS NULL OR r.not_before <= now())
		  AND (r.target_device_id IS NULL OR r.target_device_id = $1)
		  AND (r.sel_platform IS NULL OR r.sel_platform = $2)
		  AND (r.sel_device_model IS NULL OR lower(r.sel_device_model) = lower($3))
		  AND r.sel_min_ram <= $4
		  AND (r.sel_emulated IS NULL OR r.sel_emulated = $5)
		  AND $6::jsonb @> r.sel_labels
		  AND NOT `+unfitSQL("r.id", "$1", "$8")+`
		  AND `+buildRunnableSQL("$9", "$10")+`
		) q`+buildNeedsJoin+` WHERE q.rn <= $7
		ORDER BY q.priority DESC, q.queued_at, q.id`, d.ID, d.Platform, d.DeviceModel, d.RAMBytes, d.Emulated, labels, k,
		cmp.Or(p.UnfitFor, UnfitFor).Seconds(), d.ExecPlatform, d.EmbeddedBuild)
	if err != nil {
		return nil, fmt.Errorf("store: candidates: %w", err)
	}
	defer rows.Close()
	var out []Candidate
	for rows.Next() {
		var c Candidate
		var sel []byte
		var kind string
		var platforms []string
		if err := rows.Scan(&c.RunID, &c.Suite, &c.Priority, &c.QueuedAt, &sel, &c.TargetDeviceID, &c.Build, &kind, &platforms); err != nil {
			return nil, err
		}
		c.Needs = needsOf(kind, platforms)
		if err := jsonUnmarshal(sel, &c.Selector); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// ClaimRunParams are the arguments of ClaimRun.
type ClaimRunParams struct {
	DeviceID string
	// RunIDs are the candidates in order of preference.
	RunIDs      []int64
	LeaseTTL    time.Duration
	Coordinator string
	// UnfitFor is how long the device's unfit refusal of a run keeps it
	// from claiming that run (default UnfitFor).
	UnfitFor time.Duration
}

// UnfitFor is how long a device that refused a run as unable to run it
// (unsupported model, not enough RAM: lease outcome "unfit") is not offered
// that run again, by any coordinator. The refusal may stop being true
// (agent upgraded, memory freed), so it expires.
const UnfitFor = 10 * time.Minute

// unfitSQL is the condition "device refused run as unfit in the last
// window seconds", over SQL expressions for the three.
func unfitSQL(run, device, window string) string {
	return `EXISTS (SELECT 1 FROM leases l WHERE l.run_id = ` + run + ` AND l.device_id = ` + device +
		` AND l.outcome = 'unfit' AND l.released_at > now() - make_interval(secs => ` + window + `::float8))`
}

// Grant is a lease just granted: the run (now assigned), its job and the
// lease's fencing token and expiry.
type Grant struct {
	Run            Run
	Job            Job
	Token          int64
	LeaseExpiresAt time.Time
	Deadline       time.Time
}

// ClaimRun grants the device an exclusive lease on the first candidate run
// that is still queued. It locks the device row (SKIP LOCKED: a device being
// placed by another coordinator gives ErrBusy) and the run row (SKIP LOCKED:
// a run being claimed elsewhere is skipped), so two coordinators never
// assign one run twice or give one device two runs. The fencing token comes
// from the fencing_tokens sequence. It returns ErrBusy when the device is not
// online, drained or already holds a run, ErrUnfit when the device refused
// every candidate as unfit within UnfitFor, and ErrNothingToClaim when
// every candidate was taken. An emulated device whose host is busy with
// another emulated device's run gives ErrBusy (HostLabel).
func (s *Store) ClaimRun(ctx context.Context, p *ClaimRunParams) (*Grant, error) {
	var g *Grant
	err := s.tx(ctx, func(tx pgx.Tx) error {
		// Claims of one host's emulated devices take turns: the lock is
		// held until commit, and the check below runs after it on a fresh
		// snapshot, so it sees a claim committed meanwhile.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('lesfarm/host:' || h, 0))
			FROM (SELECT `+hostOf("d")+` AS h FROM devices d WHERE d.id = $1) q WHERE h IS NOT NULL`, p.DeviceID); err != nil {
			return err
		}
		var ok bool
		err := tx.QueryRow(ctx, `SELECT d.state = 'online' AND NOT d.drained
			AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.device_id = d.id AND r.state IN ('assigned', 'running'))
			AND NOT `+hostBusySQL("d")+`
			FROM devices d WHERE d.id = $1 FOR UPDATE SKIP LOCKED`, p.DeviceID).Scan(&ok)
		if errors.Is(notFound(err), ErrNotFound) || (err == nil && !ok) {
			return ErrBusy
		}
		if err != nil {
			return err
		}
		unfit := 0
		for _, id := range p.RunIDs {
			var refused bool
			if err := tx.QueryRow(ctx, `SELECT `+unfitSQL("$1", "$2", "$3")+` OR `+noRoomSQL("$1", "$2"), id, p.DeviceID, cmp.Or(p.UnfitFor, UnfitFor).Seconds()).Scan(&refused); err != nil {
				return err
			}
			if refused {
				unfit++
				continue
			}
			// Claim and record the lease in one statement.
			r, err := scanRun(tx.QueryRow(ctx, `WITH r AS (
				UPDATE runs r SET state = 'assigned', device_id = $2, token = nextval('fencing_tokens'),
					attempts = attempts + 1, assigned_at = now(), started_at = NULL, finished_at = NULL, updated_at = now(),
					lease_expires_at = now() + make_interval(secs => $3::float8),
					deadline_at = now() + make_interval(secs => timeout_ms::float8 / 1000), not_before = NULL
				WHERE r.id = (SELECT id FROM runs WHERE id = $1 AND state = 'queued' FOR UPDATE SKIP LOCKED)
				RETURNING r.*),
			l AS (INSERT INTO leases (token, run_id, device_id, coordinator, expires_at)
				SELECT token, id, device_id, $4, lease_expires_at FROM r),
			dv AS (UPDATE devices SET last_assigned_at = now() WHERE id = $2 AND EXISTS (SELECT 1 FROM r))
			SELECT `+runCols+` FROM r`, id, p.DeviceID, p.LeaseTTL.Seconds(), p.Coordinator))
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if isUniqueViolation(err) {
				return ErrBusy // another claim gave the device a run first
			}
			if err != nil {
				return err
			}
			g = &Grant{Run: *r, Token: r.Token, LeaseExpiresAt: *r.LeaseExpiresAt, Deadline: *r.DeadlineAt}
			return nil
		}
		if unfit > 0 && unfit == len(p.RunIDs) {
			return ErrUnfit
		}
		return ErrNothingToClaim
	})
	if err != nil {
		if errors.Is(err, ErrBusy) || errors.Is(err, ErrNothingToClaim) { // ErrUnfit matches too
			return nil, err
		}
		return nil, fmt.Errorf("store: claim run: %w", err)
	}
	job, err := s.GetJob(ctx, g.Run.JobID)
	if err != nil {
		return nil, err
	}
	g.Job = *job
	return g, nil
}

// AckAssignment records that the agent accepted the assignment: the run
// moves from assigned to running. A token that is not the run's current one
// (or a run no longer assigned) gives ErrStaleToken.
func (s *Store) AckAssignment(ctx context.Context, runID, token int64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE runs SET state = 'running', started_at = coalesce(started_at, now()), updated_at = now()
		FROM `+asyncCommit+` WHERE id = $1 AND token = $2 AND state IN ('assigned', 'running')`, runID, token)
	if err != nil {
		return fmt.Errorf("store: ack assignment: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrStaleToken
	}
	return nil
}

// ReleaseParams are the arguments of ReleaseAssignment.
type ReleaseParams struct {
	RunID int64
	Token int64
	// Reason is recorded as the run's error.
	Reason string
	// Outcome is recorded on the lease (refused, unreachable, ...).
	Outcome string
	// Fail ends the run as failed instead of requeueing it (a refusal that
	// would repeat, such as insufficient RAM).
	Fail bool
	// Refund gives the attempt back (the device was busy or shutting down:
	// not the run's failure).
	Refund bool
	// Backoff delays the requeued run's next offer.
	Backoff time.Duration
}

// ReleaseAssignment ends a lease the agent refused or never acknowledged:
// the run is requeued while attempts remain (else infra_failed), or failed
// when p.Fail. A stale token gives ErrStaleToken.
func (s *Store) ReleaseAssignment(ctx context.Context, p *ReleaseParams) error {
	// The run's notice goes out after the commit (notifyRuns): under load
	// many unacknowledged assignments are released, and each one held the
	// NOTIFY commit lock across its fsync.
	after := Run{ID: p.RunID}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, deferNotifySQL); err != nil {
			return err
		}
		var requeue bool
		err := tx.QueryRow(ctx, `SELECT coalesce(trigger_id, 0), attempts < max_attempts FROM runs WHERE id = $1 AND token = $2 AND state IN ('assigned', 'running') FOR UPDATE`,
			p.RunID, p.Token).Scan(&after.TriggerID, &requeue)
		if errors.Is(notFound(err), ErrNotFound) {
			return ErrStaleToken
		}
		if err != nil {
			return err
		}
		final := RunInfraFailed
		if p.Fail {
			requeue, final = false, RunFailed
		}
		if p.Refund && !p.Fail {
			requeue = true
		}
		after.State = final
		if requeue {
			after.State = RunQueued
		}
		if err := endLease(ctx, tx, p.RunID, p.Token, requeue, final, p.Reason, p.Outcome); err != nil {
			return err
		}
		if !requeue {
			return nil
		}
		refund := 0
		if p.Refund {
			refund = 1
		}
		_, err = tx.Exec(ctx, `UPDATE runs SET not_before = now() + make_interval(secs => $2::float8), attempts = attempts - $3
			WHERE id = $1 AND state = 'queued'`, p.RunID, p.Backoff.Seconds(), refund)
		return err
	})
	if err != nil && !errors.Is(err, ErrStaleToken) {
		return fmt.Errorf("store: release assignment: %w", err)
	}
	if err == nil {
		s.notifyRuns(ctx, []Run{after})
	}
	return err
}

// RenewLeasesParams are the arguments of RenewLeases.
type RenewLeasesParams struct {
	DeviceID string
	Runs     []protocol.RunStatus
	TTL      time.Duration
}

// RenewLeases renews the leases of the runs a heartbeat reports (matching
// device and token, still active), records their progress and moves
// assigned runs the agent reports as running to running. Reported runs that
// are not renewed come back as cancel notices: their lease is gone
// (cancelled, timed out, requeued elsewhere), so the agent must stop them.
func (s *Store) RenewLeases(ctx context.Context, p *RenewLeasesParams) ([]protocol.LeaseRenewal, []protocol.CancelNotice, error) {
	if len(p.Runs) == 0 {
		return nil, nil, nil
	}
	ids := make([]int64, len(p.Runs))
	tokens := make([]int64, len(p.Runs))
	states := make([]string, len(p.Runs))
	progress := make([]float32, len(p.Runs))
	msgs := make([]string, len(p.Runs))
	for i, r := range p.Runs {
		ids[i], tokens[i], states[i], progress[i], msgs[i] = r.RunID, r.Token, r.State, float32(r.Progress), clipText(r.Message)
	}
	rows, err := s.pool.Query(ctx, `UPDATE runs r SET lease_expires_at = now() + make_interval(secs => $2::float8),
			state = CASE WHEN r.state = 'assigned' AND u.st IN ('running', 'finishing') THEN 'running' ELSE r.state END,
			started_at = CASE WHEN r.state = 'assigned' AND u.st IN ('running', 'finishing') THEN now() ELSE r.started_at END,
			progress = u.progress, progress_message = u.msg, updated_at = now()
		FROM unnest($3::bigint[], $4::bigint[], $5::text[], $6::real[], $7::text[]) AS u(id, token, st, progress, msg), `+asyncCommit+`
		WHERE r.id = u.id AND r.token = u.token AND r.device_id = $1 AND r.state IN ('assigned', 'running')
		RETURNING r.id, r.token, r.lease_expires_at`, p.DeviceID, p.TTL.Seconds(), ids, tokens, states, progress, msgs)
	if err != nil {
		return nil, nil, fmt.Errorf("store: renew leases: %w", err)
	}
	var renewed []protocol.LeaseRenewal
	ok := map[int64]bool{}
	for rows.Next() {
		var l protocol.LeaseRenewal
		if err := rows.Scan(&l.RunID, &l.Token, &l.ExpiresAt); err != nil {
			rows.Close()
			return nil, nil, err
		}
		ok[l.RunID] = true
		renewed = append(renewed, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	var cancels []protocol.CancelNotice
	for _, r := range p.Runs {
		if !ok[r.RunID] {
			cancels = append(cancels, protocol.CancelNotice{RunID: r.RunID, Token: r.Token, Reason: s.leaseGoneReason(ctx, r.RunID, r.Token)})
		}
	}
	return renewed, cancels, nil
}

// leaseGoneReason says why a reported lease is not valid anymore.
func (s *Store) leaseGoneReason(ctx context.Context, runID, token int64) string {
	var state, cancelReason string
	var cur int64
	err := s.pool.QueryRow(ctx, `SELECT state, coalesce(token, 0), cancel_reason FROM runs WHERE id = $1`, runID).Scan(&state, &cur, &cancelReason)
	switch {
	case err != nil:
		return "unknown run"
	case state == RunCancelled:
		return "cancelled: " + cancelReason
	case cur != token:
		return "lease lost (superseded by a newer lease)"
	}
	return "run is " + state
}

// ReconcileHello compares the runs an agent says it holds (after a
// reconnect or restart) with the database. Held runs whose lease is gone
// come back as cancel notices; active runs of the device that the agent
// does not hold (it restarted) are failed over like a lost lease.
func (s *Store) ReconcileHello(ctx context.Context, deviceID string, held []protocol.RunStatus, ttl time.Duration) ([]protocol.CancelNotice, []LostRun, error) {
	_, cancels, err := s.RenewLeases(ctx, &RenewLeasesParams{DeviceID: deviceID, Runs: held, TTL: ttl})
	if err != nil {
		return nil, nil, err
	}
	heldIDs := make([]int64, 0, len(held))
	for _, r := range held {
		heldIDs = append(heldIDs, r.RunID)
	}
	var lost []LostRun
	err = s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, deferNotifySQL); err != nil {
			return err
		}
		var err error
		// Only running runs: an assigned one has its assignment request
		// in flight, which this hello may have crossed; if the agent
		// really lost it, the dispatcher's unanswered request gives the
		// run back without using up an attempt.
		lost, err = failLeases(ctx, tx, `device_id = $1 AND state = 'running' AND NOT (id = ANY($2::bigint[]))`,
			[]any{deviceID, heldIDs}, "agent restarted and no longer holds the run", "agent_restarted")
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("store: reconcile hello: %w", err)
	}
	s.notifyRuns(ctx, lostNotices(lost))
	return cancels, lost, nil
}

// ExpireLeases fails over the active runs whose lease expired (no heartbeat
// renewed it): requeued as infrastructure failures while attempts remain.
func (s *Store) ExpireLeases(ctx context.Context, limit int) ([]LostRun, error) {
	var lost []LostRun
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, deferNotifySQL); err != nil {
			return err
		}
		var err error
		lost, err = failLeases(ctx, tx, `id IN (SELECT id FROM runs WHERE state IN ('assigned', 'running') AND lease_expires_at < now() LIMIT $1)`,
			[]any{limit}, "lease expired", "expired")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: expire leases: %w", err)
	}
	s.notifyRuns(ctx, lostNotices(lost))
	return lost, nil
}

// TimedOutRun is a run ended by its timeout.
type TimedOutRun struct {
	RunID    int64
	Token    int64
	DeviceID string
	Requeued bool
	// TriggerID is the run's trigger (0 if none), for its notice.
	TriggerID int64
}

// TimeoutRuns fails the active runs past their deadline (requeued instead
// when the spec retries failures and attempts remain).
func (s *Store) TimeoutRuns(ctx context.Context, limit int) ([]TimedOutRun, error) {
	return s.timeoutRuns(ctx, limit, RunFailed, "")
}

// TimeoutRunsUnhealthy is TimeoutRuns while the farm itself could not take
// reports (a full data dir, JetStream down): the runs end as
// infra_failed, not blamed on their build, with why in their error.
func (s *Store) TimeoutRunsUnhealthy(ctx context.Context, limit int, why string) ([]TimedOutRun, error) {
	return s.timeoutRuns(ctx, limit, RunInfraFailed, "; the farm could not take reports: "+why)
}

func (s *Store) timeoutRuns(ctx context.Context, limit int, state, suffix string) ([]TimedOutRun, error) {
	var out []TimedOutRun
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, deferNotifySQL); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT id, token, device_id, retry_on_failure AND attempts < max_attempts, timeout_ms, coalesce(trigger_id, 0) FROM runs
			WHERE state IN ('assigned', 'running') AND deadline_at < now() LIMIT $1 FOR UPDATE SKIP LOCKED`, limit)
		if err != nil {
			return err
		}
		var ms []int64
		for rows.Next() {
			var t TimedOutRun
			var m int64
			if err := rows.Scan(&t.RunID, &t.Token, &t.DeviceID, &t.Requeued, &m, &t.TriggerID); err != nil {
				rows.Close()
				return err
			}
			out = append(out, t)
			ms = append(ms, m)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for i, t := range out {
			reason := fmt.Sprintf("timed out after %s", time.Duration(ms[i])*time.Millisecond) + suffix
			if err := endLease(ctx, tx, t.RunID, t.Token, t.Requeued, state, reason, "timeout"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: timeout runs: %w", err)
	}
	notices := make([]Run, len(out))
	for i, t := range out {
		notices[i] = Run{ID: t.RunID, State: state, TriggerID: t.TriggerID}
		if t.Requeued {
			notices[i].State = RunQueued
		}
	}
	s.notifyRuns(ctx, notices)
	return out, nil
}
