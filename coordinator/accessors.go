package coordinator

import (
	"context"
	"crypto/ed25519"
	"errors"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// HTTPURL returns the base URL of the HTTP server (https:// when it serves
// TLS), or "".
func (c *Coordinator) HTTPURL() string {
	if c.httpLn == nil {
		return ""
	}
	if c.cfg.HTTPTLS != nil {
		return "https://" + c.httpLn.Addr().String()
	}
	return "http://" + c.httpLn.Addr().String()
}

// HTTPAddr returns the address the HTTP server listens on, or "".
func (c *Coordinator) HTTPAddr() string {
	if c.httpLn == nil {
		return ""
	}
	return c.httpLn.Addr().String()
}

// NATSURL returns the client URL of the NATS server in use.
func (c *Coordinator) NATSURL() string {
	if c.nc == nil {
		return ""
	}
	return c.nc.ConnectedUrl()
}

// Store returns the coordinator's store.
func (c *Coordinator) Store() *store.Store { return c.store }

// SigningKey returns the public key that verifies assignments.
// It is nil until Start has read it from the store.
func (c *Coordinator) SigningKey() ed25519.PublicKey {
	if c.disp == nil {
		return nil
	}
	return c.disp.SigningKey()
}

// Wake asks the dispatcher for a placement round over every idle device
// soon (dispatch.Dispatcher.Wake). It never blocks.
func (c *Coordinator) Wake() {
	if c.disp != nil {
		c.disp.Wake()
	}
}

// CancelRun pushes the cancellation of a run (already marked cancelled in
// the store) to its agent (dispatch.Dispatcher.CancelRun). It implements
// api.Canceller and bisect.Canceller.
func (c *Coordinator) CancelRun(ctx context.Context, runID int64) error {
	if c.disp == nil {
		return errors.New("coordinator: not started")
	}
	return c.disp.CancelRun(ctx, runID)
}

// Rejects returns the counter of rejected protocol messages.
func (c *Coordinator) Rejects() *protocol.RejectCounter { return c.rejects }

// IngestStats returns the ingest counters.
func (c *Coordinator) IngestStats() ingest.Stats {
	if c.ingest == nil {
		return ingest.Stats{}
	}
	return c.ingest.Stats()
}

// AssignLatencies returns the assignment round trips observed (grant to
// agent ack), for benchmarks.
func (c *Coordinator) AssignLatencies() []time.Duration {
	if c.disp == nil {
		return nil
	}
	return c.disp.AssignLatencies()
}

// Sweeps returns how many lease, timeout and lost-device sweeps have
// finished (for metrics and tests that wait for a sweep).
func (c *Coordinator) Sweeps() uint64 {
	if c.disp == nil {
		return 0
	}
	return c.disp.Sweeps()
}

// Name returns the coordinator's name.
func (c *Coordinator) Name() string { return c.cfg.Name }
