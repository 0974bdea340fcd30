package agent

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"time"

	"github.com/lesfarm/lesfarm/lib/backoff"
	"github.com/lesfarm/lesfarm/protocol"
)

// loop registers, heartbeats and watches the TTL until ctx is done (nil)
// or the connection is closed for good (the error that closed it).
func (a *Agent) loop(ctx context.Context) error {
	helloAttempt := 0
	var hbTimer *time.Timer
	var nextHello time.Time
	watch := time.NewTicker(250 * time.Millisecond)
	defer watch.Stop()
	needHello := true
	// helloConn is the connection (its reconnect count) the last accepted
	// hello went out on; helloOK says there was one.
	var helloConn uint64
	helloOK := false
	for {
		if needHello && !time.Now().Before(nextHello) {
			conn := a.nc.Stats().Reconnects
			ok, refused := a.hello(ctx)
			if ok {
				needHello = false
				helloOK, helloConn = true, conn
				helloAttempt = 0
				if hbTimer == nil {
					hbTimer = time.NewTimer(a.heartbeatInterval())
				} else {
					hbTimer.Reset(a.heartbeatInterval())
				}
			} else {
				helloAttempt++
				d := backoff.Delay(helloAttempt, a.cfg.ReconnectMin, a.cfg.ReconnectMax)
				if refused {
					d = max(d, 10*time.Second)
				}
				nextHello = time.Now().Add(d)
			}
		}
		var hbC <-chan time.Time
		if hbTimer != nil && !needHello {
			hbC = hbTimer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-a.closed:
			return err
		case <-a.rehelo:
			// A kick is redundant when a hello was accepted on the current
			// connection and the registration still holds (typically the
			// initial-connect kick arriving after the first hello). A
			// second hello would report no run while an assignment may be
			// in flight, and the coordinator would fail that run over.
			a.mu.Lock()
			registered := a.registered
			a.mu.Unlock()
			if needHello || !helloOK || !registered || a.nc.Stats().Reconnects != helloConn {
				needHello = true
				nextHello = time.Time{}
			}
		case <-a.short.kick:
			// Short of storage: say so now, not at the next beat.
			if hbC != nil {
				a.heartbeat(ctx)
			}
		case <-hbC:
			if !a.heartbeat(ctx) {
				a.mu.Lock()
				known := a.registered
				a.mu.Unlock()
				if !known {
					needHello = true
				}
			}
			hbTimer.Reset(a.heartbeatInterval())
		case <-watch.C:
			a.watchTTL()
		}
	}
}

func (a *Agent) heartbeatInterval() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hbInterval > 0 {
		return a.hbInterval
	}
	return max(a.ttl/3, 100*time.Millisecond)
}

func (a *Agent) runStatusLocked() []protocol.RunStatus {
	out := a.unreportedStatusLocked()
	if r := a.current; r != nil && !r.abandoned {
		out = append(out, protocol.RunStatus{RunID: r.asg.RunID, Token: r.asg.Token, State: r.state, Progress: r.progress, Message: clipText(r.message)})
	}
	return out
}

// hello registers the device. It returns ok when accepted; refused when
// the coordinator answered but refused.
func (a *Agent) hello(ctx context.Context) (ok, refused bool) {
	a.mu.Lock()
	runs := a.runStatusLocked()
	a.mu.Unlock()
	fp := *a.fp // the identity read at New, with the current state
	st := a.deviceState()
	fp.State = &st
	// The room for artifacts (free space plus what the cache would
	// evict): the coordinator assigns no model larger (issue 29, finding 10).
	if room, ok := a.cache.Room(); ok {
		fp.FreeStorageBytes = &room
	}
	sent := a.now()
	msg := &protocol.Hello{DeviceID: a.cfg.Name, Fingerprint: fp, Labels: a.cfg.Labels, Runs: runs, SentAt: sent.UTC(), Session: a.session}
	data, err := protocol.Encode(msg)
	if err != nil {
		a.log.Error("agent: hello not encodable", "err", err)
		a.setError(err)
		return false, true
	}
	rctx, cancel := context.WithTimeout(ctx, a.cfg.RequestTimeout)
	defer cancel()
	resp, err := a.nc.RequestWithContext(rctx, protocol.HelloSubject(a.cfg.Name), data)
	if err != nil {
		a.log.Debug("agent: hello unanswered", "err", err)
		return false, false
	}
	rep, err := protocol.DecodeHelloReply(resp.Data)
	if err != nil {
		a.log.Warn("agent: bad hello reply", "err", err)
		a.setError(err)
		return false, false
	}
	if !rep.Accepted {
		a.log.Warn("agent: coordinator refused the device", "reason", rep.Reason)
		a.setError(fmt.Errorf("coordinator refused the device: %s", rep.Reason))
		return false, true
	}
	a.mu.Lock()
	a.noteServerTimeLocked(sent, rep.ServerTime)
	a.registered = true
	a.signingKey = ed25519.PublicKey(rep.SigningKey)
	if len(a.signingKey) != 0 {
		a.keyOnce.Do(func() { close(a.keyKnown) })
	}
	a.ttl = rep.TTL()
	a.hbInterval = rep.HeartbeatInterval()
	a.lastContact = time.Now()
	a.mu.Unlock()
	a.applyCancels(rep.Cancel, errLeaseLost)
	a.log.Info("agent: registered", "device_id", a.cfg.Name, "ttl", rep.TTL().String(), "heartbeat_interval", a.heartbeatInterval().String(), "signing_key", protocol.KeyID(rep.SigningKey))
	a.settleState()
	return true, false
}

func (a *Agent) rootForState() string {
	if a.cfg.DeviceOptions != nil {
		return a.cfg.DeviceOptions.Root
	}
	return ""
}

// heartbeat renews the device and its run's lease. It returns false when
// the coordinator did not answer or asked for a new hello.
func (a *Agent) heartbeat(ctx context.Context) bool {
	st := a.deviceState()
	a.mu.Lock()
	a.hbSeq++
	sent := a.now()
	msg := &protocol.Heartbeat{DeviceID: a.cfg.Name, Seq: a.hbSeq, Runs: a.runStatusLocked(), State: &st, SentAt: sent.UTC(), Session: a.session}
	a.mu.Unlock()
	msg.FreeStorageBytes = a.short.report(a.cache)
	data, err := protocol.Encode(msg)
	if err != nil {
		a.log.Error("agent: heartbeat not encodable", "err", err)
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, a.cfg.RequestTimeout)
	defer cancel()
	resp, err := a.nc.RequestWithContext(rctx, protocol.HeartbeatSubject(a.cfg.Name), data)
	if err != nil {
		a.log.Debug("agent: heartbeat unanswered", "err", err)
		return false
	}
	rep, err := protocol.DecodeHeartbeatReply(resp.Data)
	if err != nil {
		a.log.Warn("agent: bad heartbeat reply", "err", err)
		return false
	}
	if rep.Superseded != "" {
		a.fence(rep.Superseded)
		return false
	}
	a.mu.Lock()
	a.lastContact = time.Now()
	a.noteServerTimeLocked(sent, rep.ServerTime)
	if rep.TTLMS > 0 {
		a.ttl = rep.TTL()
	}
	if rep.Rehello {
		a.registered = false
	}
	a.mu.Unlock()
	a.applyCancels(rep.Cancel, errLeaseLost)
	a.short.reported(msg.FreeStorageBytes)
	if rep.Rehello {
		a.log.Info("agent: coordinator asked for a new hello")
		return false
	}
	return true
}

// applyCancels stops the current run when a notice names it. Notices from
// hello and heartbeat replies mean the lease is gone, so the run is not
// reported.
func (a *Agent) applyCancels(cs []protocol.CancelNotice, cause error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forgetUnreportedLocked(cs)
	for _, c := range cs {
		if r := a.current; r != nil && r.asg.RunID == c.RunID && r.asg.Token == c.Token {
			a.log.Info("agent: stopping run", "run_id", c.RunID, "reason", c.Reason)
			r.cancel(fmt.Errorf("%w: %s", cause, c.Reason))
		}
	}
}
