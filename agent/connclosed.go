package agent

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// ErrCredentialRefused is returned by Run when the NATS server refused the
// device's credential twice in a row (invalid, revoked or expired), after
// which nats.go stops reconnecting. A supervisor should not just restart
// the agent with the same credential.
var ErrCredentialRefused = errors.New("agent: the server refused the device credential (invalid, revoked or expired)")

// connClosed is the connection's closed handler. The agent reconnects
// forever, so nats.go closes the connection on its own only when it gives
// up: after two authorization errors in a row, or a server error it does
// not know. Staying alive then would leave a process that looks healthy
// while its device is offline for good, so Run returns: the error says
// whether the credential was refused (fix the credential) or the
// connection failed otherwise (a supervisor restart recovers). A close
// during shutdown is ignored.
func (a *Agent) connClosed(last error) {
	a.mu.Lock()
	stopping := a.stopping
	a.mu.Unlock()
	if stopping {
		return
	}
	var err error
	switch {
	case errors.Is(last, nats.ErrAuthorization), errors.Is(last, nats.ErrAuthRevoked), errors.Is(last, nats.ErrAuthExpired),
		errors.Is(last, nats.ErrAccountAuthExpired):
		err = fmt.Errorf("%w: %v", ErrCredentialRefused, last)
	case last != nil:
		err = fmt.Errorf("agent: NATS connection closed and not reconnecting: %w", last)
	default:
		err = errors.New("agent: NATS connection closed and not reconnecting")
	}
	a.log.Error("agent: connection lost for good, stopping", "err", err)
	a.setError(err)
	select {
	case a.closed <- err:
	default:
	}
}
