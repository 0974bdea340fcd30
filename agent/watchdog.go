package agent

import "time"

// watchTTL stops local work when the coordinator has not been reached for
// longer than the TTL: the lease is gone, so the work would be rejected.
func (a *Agent) watchTTL() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ttl <= 0 || a.lastContact.IsZero() || time.Since(a.lastContact) <= a.ttl {
		return
	}
	if r := a.current; r != nil && !r.abandoned {
		a.log.Warn("agent: cut off from the coordinator past the TTL, stopping the run", "run_id", r.asg.RunID, "ttl", a.ttl.String(), "last_contact", a.lastContact.Format(time.RFC3339Nano))
		r.abandoned = true
		r.cancel(errCutOff)
	}
	if a.registered {
		// The state changes here, under the lock, so a registration that
		// follows (kickHello) cannot be overtaken by it.
		a.registered = false
		if a.state != StateCutOff {
			a.state = StateCutOff
			go a.announceState(StateCutOff)
		}
		go a.kickHello()
	}
}
