package agent

import (
	"time"

	"github.com/lesfarm/lesfarm/protocol"
)

// The device's wall clock need not agree with the coordinator's: phones
// drift, lab devices have no NTP, a user sets the time by hand. The agent
// therefore never compares a coordinator timestamp with its own clock
// directly. A run's deadline is a duration (Assignment.DeadlineInMS)
// counted from receipt on the monotonic clock; for an assignment without
// one (an older coordinator) the absolute Deadline is moved onto the
// device's clock by the offset measured from the ServerTime of hello and
// heartbeat replies. Liveness (TTL, last contact) uses the monotonic clock
// only.

// now is the device's wall clock.
func (a *Agent) now() time.Time {
	if a.cfg.Clock != nil {
		return a.cfg.Clock()
	}
	return time.Now()
}

// noteServerTimeLocked records the clock offset from a reply's ServerTime
// to a request sent at sent (device clock), taking the reply as produced
// halfway through the round trip. a.mu must be held.
func (a *Agent) noteServerTimeLocked(sent, server time.Time) {
	if server.IsZero() {
		return
	}
	recv := a.now()
	mid := sent.Add(recv.Sub(sent) / 2)
	a.clockOffset, a.offsetKnown = server.Sub(mid), true
}

// runTimeLeftLocked returns how long the run of asg has before its
// deadline, measured from now, and false when it has none. a.mu must be
// held.
func (a *Agent) runTimeLeftLocked(asg *protocol.Assignment) (time.Duration, bool) {
	if asg.DeadlineInMS > 0 {
		return time.Duration(asg.DeadlineInMS) * time.Millisecond, true
	}
	if asg.Deadline.IsZero() {
		return 0, false
	}
	// Older coordinator: its absolute deadline, moved onto this clock.
	local := asg.Deadline
	if a.offsetKnown {
		local = local.Add(-a.clockOffset)
	}
	return local.Sub(a.now()), true
}
