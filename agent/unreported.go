package agent

import (
	"time"

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
}

// noteUnreportedLocked records that run r's result was handed to the
// outbox. a.mu must be held.
func (a *Agent) noteUnreportedLocked(r *activeRun) {
	until := r.deadline
	if until.IsZero() {
		until = time.Now().Add(unreportedKeep)
	}
	a.unreported = append(a.unreported, unreportedRun{runID: r.asg.RunID, token: r.asg.Token, until: until})
	if n := len(a.unreported); n > maxUnreported {
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
		if !gone {
			keep = append(keep, u)
		}
	}
	a.unreported = keep
}
