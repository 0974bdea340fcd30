package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrSuperseded is returned (wrapped) by Run when another agent with the
// same device id said hello since this one: one connection per device,
// and the newest takes the device over (docs/protocol.md).
var ErrSuperseded = errors.New("agent: superseded by another agent with this device id")

// newSession returns a random agent session id (Hello.Session).
func newSession() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// fence stops this agent after the coordinator said another agent took
// the device over: the current run is aborted (its lease is gone, so
// nothing it reports is accepted) and Run returns ErrSuperseded instead
// of saying hello again, which would take the device back.
func (a *Agent) fence(why string) {
	err := fmt.Errorf("%w: %s", ErrSuperseded, why)
	a.log.Error("agent: fenced: another agent took this device id over; stopping", "device_id", a.cfg.Name, "reason", why)
	a.setError(err)
	a.mu.Lock()
	cur := a.current
	a.mu.Unlock()
	if cur != nil {
		cur.cancel(errLeaseLost)
	}
	select {
	case a.closed <- err:
	default:
	}
}
