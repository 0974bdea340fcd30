package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lesfarm/lesfarm/protocol"
)

// onAssign answers an assignment: an ack, or a refusal with a code and a
// reason. It never panics on bad input.
func (a *Agent) onAssign(m *nats.Msg) {
	rep := a.handleAssign(m.Data)
	if rep == nil {
		return // another agent session's: no reply, so that one's reply counts
	}
	if rep.Accepted {
		a.log.Info("agent: assignment accepted", "run_id", rep.RunID, "token", rep.Token)
	} else {
		a.log.Warn("agent: assignment refused", "run_id", rep.RunID, "code", rep.Code, "reason", rep.Reason)
	}
	rep.Reason = clipText(rep.Reason)
	data, err := protocol.Encode(rep)
	if err != nil {
		// Unaddressable (no run id could be read): answer anyway.
		rep.V = protocol.Version
		data, _ = json.Marshal(rep)
	}
	if err := m.Respond(data); err != nil {
		a.log.Warn("agent: assignment reply failed", "err", err)
	}
}

func refuse(runID, token int64, code, reason string) *protocol.AssignReply {
	return &protocol.AssignReply{RunID: runID, Token: token, Code: code, Reason: reason}
}

// helloReplyWait is how long an assignment that arrives before the reply
// to this agent's hello waits for it: the coordinator may offer a run as
// soon as it has recorded the hello, before its reply (with the signing key
// that verifies the assignment) has been read here.
const helloReplyWait = time.Second

// awaitSigningKey returns the coordinator's signing key, waiting up to d
// for the hello reply that carries it (keyKnown); nil if none came.
func (a *Agent) awaitSigningKey(d time.Duration) ed25519.PublicKey {
	a.mu.Lock()
	key := a.signingKey
	a.mu.Unlock()
	if len(key) != 0 {
		return key
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-a.keyKnown:
	case <-t.C:
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.signingKey
}

func (a *Agent) handleAssign(data []byte) (rep *protocol.AssignReply) {
	runID, token := protocol.PeekAssignment(data)
	defer func() {
		if p := recover(); p != nil {
			rep = refuse(runID, token, protocol.RefuseMalformed, fmt.Sprintf("agent failed to handle the assignment: %v", p))
		}
	}()
	key := a.awaitSigningKey(helloReplyWait)
	if len(key) == 0 {
		return refuse(runID, token, protocol.RefuseBadSignature, "no coordinator signing key known yet (hello not answered)")
	}
	asg, err := protocol.OpenAssignment(data, key)
	if err != nil {
		code := protocol.RefuseMalformed
		if protocol.RejectKind(err) == protocol.RejectSignature {
			code = protocol.RefuseBadSignature
		}
		return refuse(runID, token, code, err.Error())
	}
	if asg.Session != "" && asg.Session != a.session {
		a.log.Warn("agent: assignment for another agent session of this device id ignored", "run_id", asg.RunID, "session", a.session)
		return nil
	}
	if code, reason := a.check(asg); code != "" {
		a.short.noteRefusal(a.cache, asg)
		return refuse(asg.RunID, asg.Token, code, reason)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.stopping:
		return refuse(asg.RunID, asg.Token, protocol.RefuseShuttingDown, "agent is shutting down")
	case a.current != nil && a.current.asg.RunID == asg.RunID && a.current.asg.Token == asg.Token:
		return &protocol.AssignReply{RunID: asg.RunID, Token: asg.Token, Accepted: true} // redelivery
	case a.current != nil:
		return refuse(asg.RunID, asg.Token, protocol.RefuseBusy, fmt.Sprintf("already running run %d", a.current.asg.RunID))
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	var deadline time.Time
	if left, ok := a.runTimeLeftLocked(asg); ok {
		deadline = time.Now().Add(left)
		var c2 context.CancelFunc
		ctx, c2 = context.WithDeadlineCause(ctx, deadline, errors.New("run deadline passed"))
		inner := cancel
		cancel = func(err error) { inner(err); c2() }
	}
	r := &activeRun{asg: asg, cancel: cancel, done: make(chan struct{}), state: protocol.RunStateAccepted, deadline: deadline}
	a.current = r
	a.wg.Add(1)
	go a.execute(ctx, r)
	return &protocol.AssignReply{RunID: asg.RunID, Token: asg.Token, Accepted: true}
}

// onCancel stops the named run and reports it as cancelled.
func (a *Agent) onCancel(m *nats.Msg) {
	c, err := protocol.DecodeCancel(m.Data)
	if err != nil {
		a.log.Warn("agent: bad cancel", "err", err)
		return
	}
	known := false
	a.mu.Lock()
	if r := a.current; r != nil && r.asg.RunID == c.RunID && r.asg.Token == c.Token {
		known = true
		r.cancel(fmt.Errorf("%w: %s", errCancelled, c.Reason))
	}
	a.mu.Unlock()
	a.log.Info("agent: cancel received", "run_id", c.RunID, "known", known, "reason", c.Reason)
	if data, err := protocol.Encode(&protocol.CancelReply{RunID: c.RunID, Known: known}); err == nil {
		_ = m.Respond(data)
	}
}
