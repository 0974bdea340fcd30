package agent

import (
	"time"

	"github.com/lesfarm/lesfarm/agent/telemetry"
	"github.com/lesfarm/lesfarm/protocol"
)

// A run the agent finished but whose result the coordinator has not yet
// committed is still the agent's: its result waits in the outbox (or the
// disk buffer while NATS is unreachable), or in JetStream for ingest. The
// agent keeps listing such runs, in state "finishing", in every hello and
// heartbeat until the coordinator says their lease is no longer active (a
// cancel notice: the run is succeeded, failed, cancelled or superseded).
// Without this, a hello after a reconnect reports no runs and the
// coordinator fails over a run whose result is already on its way, then
// rejects that result as stale: the finished work is lost and an attempt
// is wasted.
//
// The list and each result survive a restart of the agent process: every
// entry is also a file in CACHE_DIR/unreported (unreported_disk.go),
// written before the result is handed to the outbox and removed when the
// entry is dropped. A restarted agent lists them in its first hello and
// publishes their results again (JetStream de-duplicates by message id,
// ingest acknowledges a result it already committed).

// maxUnreported bounds the finished runs listed at once (one slot of
// protocol.MaxRunsPerDevice stays for the current run).
const maxUnreported = protocol.MaxRunsPerDevice - 1

// unreportedKeep bounds how long a finished run without a deadline is
// listed when the coordinator never answers for it.
const unreportedKeep = time.Hour

type unreportedRun struct {
	runID, token int64
	// until is when the entry is dropped regardless: the run's deadline
	// (the coordinator times the run out then) or unreportedKeep.
	until time.Time
	// rec is the run's result record, published again after a restart.
	rec telemetry.Record
}

// noteUnreported records that run r finished with result record rec,
// on disk first (fsynced) and then in the list; call it before handing rec
// to the outbox, so a process killed at any point after finds it.
func (a *Agent) noteUnreported(r *activeRun, rec telemetry.Record) {
	until := r.deadline
	if until.IsZero() {
		until = time.Now().Add(unreportedKeep)
	}
	u := unreportedRun{runID: r.asg.RunID, token: r.asg.Token, until: until, rec: rec}
	if err := a.unreportedDisk.save(u); err != nil {
		a.log.Warn("agent: finished run not persisted; a restart before it is settled would lose it", "run_id", u.runID, "err", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unreported = append(a.unreported, u)
	if n := len(a.unreported); n > maxUnreported {
		for _, old := range a.unreported[:n-maxUnreported] {
			a.unreportedDisk.remove(old)
		}
		a.unreported = append(a.unreported[:0], a.unreported[n-maxUnreported:]...)
	}
}

// unreportedStatusLocked lists the finished, uncommitted runs as
// "finishing", dropping those past their deadline. a.mu must be held.
func (a *Agent) unreportedStatusLocked() []protocol.RunStatus {
	now := time.Now()
	keep := a.unreported[:0]
	var out []protocol.RunStatus
	for _, u := range a.unreported {
		if now.After(u.until) {
			a.unreportedDisk.remove(u)
			continue
		}
		keep = append(keep, u)
		out = append(out, protocol.RunStatus{RunID: u.runID, Token: u.token, State: protocol.RunStateFinishing, Progress: 1})
	}
	a.unreported = keep
	return out
}

// forgetUnreportedLocked drops the finished runs a cancel notice names:
// their lease is no longer active, so the coordinator has the result (or
// will reject it). a.mu must be held.
func (a *Agent) forgetUnreportedLocked(cs []protocol.CancelNotice) {
	if len(cs) == 0 || len(a.unreported) == 0 {
		return
	}
	keep := a.unreported[:0]
	for _, u := range a.unreported {
		gone := false
		for _, c := range cs {
			if c.RunID == u.runID && c.Token == u.token {
				gone = true
				a.log.Debug("agent: finished run settled", "run_id", c.RunID, "token", c.Token, "reason", c.Reason)
				break
			}
		}
		if gone {
			a.unreportedDisk.remove(u)
		} else {
			keep = append(keep, u)
		}
	}
	a.unreported = keep
}
