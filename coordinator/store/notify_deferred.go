package store

import (
	"context"
	"strconv"
	"time"
)

// deferNotifySQL makes the runs table's notify triggers skip the rest of
// the current transaction (migration 00027): the store then sends the
// notices with notifyRuns after the commit.
//
// PostgreSQL commits notifying transactions one at a time under a
// database-wide lock held until the commit's WAL is flushed, so a notifying
// trigger, claim or result transaction made every other notifying commit
// (acks, renewals, other results) wait for its fsync. Deferred, the
// transaction commits (durably, in parallel with others: group commit)
// without that lock, and the notices follow in an asynchronous commit that
// holds it for microseconds.
const deferNotifySQL = `SELECT set_config('lesfarm.notify', 'deferred', true)`

// deferNotify is deferNotifySQL as a FROM item, for autocommit statements.
const deferNotify = `(` + deferNotifySQL + `) AS defer_notify`

// notifyRuns announces runs on RunNotifyChannel as the triggers would have
// ("<id> <state> <trigger id>"), after the transaction that changed them
// committed. It is best effort: a notice lost to a crash or a dropped
// connection in between is covered by the listeners' safety polls, as a
// notice lost on the way is.
func (s *Store) notifyRuns(ctx context.Context, runs []Run) {
	if len(runs) == 0 {
		return
	}
	payloads := make([]string, len(runs))
	for i := range runs {
		r := &runs[i]
		payloads[i] = strconv.FormatInt(r.ID, 10) + " " + r.State + " " + strconv.FormatInt(r.TriggerID, 10)
	}
	// Not cancelled with the caller (the change is committed), but bounded:
	// a database that stopped answering must not hold the caller.
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), notifyTimeout)
	defer cancel()
	_, _ = s.pool.Exec(nctx, `SELECT pg_notify('`+RunNotifyChannel+`', n) FROM unnest($1::text[]) AS n, `+asyncCommit, payloads)
}

// notifyRunsLater is notifyRuns in the background, so a caller on the
// assignment path (a claim, a result commit) does not wait for the
// notice's round trip: the coordinator that made the change acts on it
// itself, and listeners re-read the runs a notice names, so its order
// against later notices does not matter. Up to 4 are in flight; beyond
// that it waits, as notifyRuns does.
func (s *Store) notifyRunsLater(ctx context.Context, runs []Run) {
	if len(runs) == 0 {
		return
	}
	select {
	case s.notifying <- struct{}{}:
		go func() {
			defer func() { <-s.notifying }()
			s.notifyRuns(context.WithoutCancel(ctx), runs)
		}()
	default:
		s.notifyRuns(ctx, runs)
	}
}

// notifyTimeout bounds notifyRuns.
const notifyTimeout = 5 * time.Second

// lostNotices are the notices of runs whose leases failLeases ended:
// requeued, or infra_failed when out of attempts.
func lostNotices(lost []LostRun) []Run {
	out := make([]Run, len(lost))
	for i, l := range lost {
		out[i] = Run{ID: l.RunID, State: RunInfraFailed, TriggerID: l.TriggerID}
		if l.Requeued {
			out[i].State = RunQueued
		}
	}
	return out
}
