package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lesfarm/lesfarm/coordinator/scheduler"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// liveness handles hello and heartbeat requests and keeps one timer per
// device (nomad style): a device that misses its TTL is marked lost and its
// runs are failed over. The timer is the fast path; the sweeper is the
// safety net for devices whose timer lived in a coordinator that died.

// respond encodes and sends a reply, logging failures.
func (c *Coordinator) respond(m *nats.Msg, reply protocol.Message) {
	data, err := protocol.Encode(reply)
	if err != nil {
		c.log.Error("coordinator: encode reply", "type", reply.MessageType(), "err", err)
		return
	}
	if err := m.Respond(data); err != nil {
		c.log.Warn("coordinator: send reply", "type", reply.MessageType(), "err", err)
	}
}

func (c *Coordinator) handleHello(m *nats.Msg) {
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	id, _, err := protocol.ParseDeviceSubject(m.Subject)
	h, derr := protocol.DecodeHello(m.Data)
	if derr == nil && len(h.Session) > protocol.MaxSession {
		derr = fmt.Errorf("session of %d bytes, over %d", len(h.Session), protocol.MaxSession)
	}
	if derr != nil || err != nil || h.DeviceID != id {
		c.rejects.Observe(derr)
		if derr == nil || !errors.As(derr, new(*protocol.DecodeError)) {
			c.rejects.Add("hello", protocol.RejectInvalid)
		}
		c.logs.warn(ctx, c.log, "hello-rejected:"+m.Subject, "coordinator: hello rejected", "subject", m.Subject, "err", rejectReason(derr, err, id, bodyID(h)))
		if id != "" {
			c.respond(m, &protocol.HelloReply{DeviceID: id, Accepted: false, Reason: "malformed hello", ServerTime: time.Now()})
		}
		return
	}
	ttl := c.cfg.HeartbeatTTL
	if _, err := c.store.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: id, Fingerprint: h.Fingerprint, Labels: h.Labels, TTL: ttl, Coordinator: c.cfg.Name}); err != nil {
		c.log.ErrorContext(ctx, "coordinator: register device", "device_id", id, "err", err)
		c.respond(m, &protocol.HelloReply{DeviceID: id, Accepted: false, Reason: "coordinator error, retry", ServerTime: time.Now()})
		return
	}
	if err := c.claimSession(ctx, id, h.Session); err != nil {
		c.respond(m, &protocol.HelloReply{DeviceID: id, Accepted: false, Reason: "coordinator error, retry", ServerTime: time.Now()})
		return
	}
	c.registerEmbedded(ctx, id, &h.Fingerprint)
	cancels, lost, err := c.store.ReconcileHello(ctx, id, h.Runs, c.cfg.LeaseTTL)
	if err != nil {
		c.log.ErrorContext(ctx, "coordinator: reconcile hello", "device_id", id, "err", err)
	}
	for _, l := range lost {
		c.log.InfoContext(ctx, "coordinator: run failed over, agent restarted", "run_id", l.RunID, "device_id", id, "requeued", l.Requeued)
	}
	c.resetTimer(id, ttl)
	c.log.InfoContext(ctx, "coordinator: device hello", "device_id", id, "platform", h.Fingerprint.Platform,
		"model", h.Fingerprint.DeviceModel, "emulated", h.Fingerprint.Emulated, "held_runs", len(h.Runs))
	c.respond(m, &protocol.HelloReply{DeviceID: id, Accepted: true, TTLMS: ttl.Milliseconds(),
		HeartbeatIntervalMS: scheduler.HeartbeatInterval(ttl).Milliseconds(), SigningKey: c.signPub,
		Cancel: cancels, ServerTime: time.Now()})
	c.Wake()
}

func (c *Coordinator) handleHeartbeat(m *nats.Msg) {
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	id, _, err := protocol.ParseDeviceSubject(m.Subject)
	hb, derr := protocol.DecodeHeartbeat(m.Data)
	if derr != nil || err != nil || hb.DeviceID != id {
		c.rejects.Observe(derr)
		if derr == nil {
			c.rejects.Add("heartbeat", protocol.RejectInvalid)
		}
		c.logs.warn(ctx, c.log, "heartbeat-rejected:"+m.Subject, "coordinator: heartbeat rejected", "subject", m.Subject, "err", rejectReason(derr, err, id, bodyID(hb)))
		return
	}
	ttl := c.cfg.HeartbeatTTL
	if hb.Session != "" {
		err = c.store.TouchDeviceSession(ctx, id, hb.Session, ttl, c.cfg.Name)
	} else {
		err = c.store.TouchDevice(ctx, id, ttl, c.cfg.Name)
	}
	c.db.observe(err)
	if errors.Is(err, store.ErrSuperseded) {
		// Another agent with this device id said hello since: this one is
		// fenced and must stop, not say hello again (which would take the
		// device back, and so on for ever).
		c.logs.warn(ctx, c.log, "superseded:"+id+":"+hb.Session, "coordinator: heartbeat of a superseded agent session, fenced", "device_id", id, "session", hb.Session)
		c.respond(m, &protocol.HeartbeatReply{TTLMS: ttl.Milliseconds(), ServerTime: time.Now(),
			Superseded: fmt.Sprintf("device id %s was taken over by another agent (a newer hello): one connection per device", id)})
		return
	}
	if errors.Is(err, store.ErrNotFound) {
		// Unknown or already declared lost: the agent must say hello again
		// (which reconciles the runs it still holds).
		c.respond(m, &protocol.HeartbeatReply{TTLMS: ttl.Milliseconds(), Rehello: true, ServerTime: time.Now()})
		return
	}
	if err != nil {
		c.log.ErrorContext(ctx, "coordinator: heartbeat", "device_id", id, "err", err)
		return // no reply: the agent retries
	}
	c.resetTimer(id, ttl)
	renewed, cancels, err := c.store.RenewLeases(ctx, &store.RenewLeasesParams{DeviceID: id, Runs: hb.Runs, TTL: c.cfg.LeaseTTL})
	if err != nil {
		c.log.ErrorContext(ctx, "coordinator: renew leases", "device_id", id, "err", err)
		return
	}
	if hb.FreeStorageBytes != nil {
		// Before the reply: the agent stops reporting once answered.
		if err := c.store.SetDeviceFreeStorage(ctx, id, *hb.FreeStorageBytes); err != nil {
			c.log.WarnContext(ctx, "coordinator: free storage not recorded", "device_id", id, "err", err)
		} else {
			c.logs.warn(ctx, c.log, "short-of-storage:"+id, "coordinator: device short of storage", "device_id", id, "free_storage_bytes", *hb.FreeStorageBytes)
		}
	}
	c.respond(m, &protocol.HeartbeatReply{TTLMS: ttl.Milliseconds(), Renewed: renewed, Cancel: cancels, ServerTime: time.Now()})
	c.recordDeviceState(ctx, id, renewed, hb.State)
	if len(hb.Runs) == 0 {
		c.Wake() // an idle device: maybe work is waiting
	}
}

// resetTimer (re)arms the device's liveness timer.
func (c *Coordinator) resetTimer(id string, ttl time.Duration) {
	c.timersMu.Lock()
	defer c.timersMu.Unlock()
	if c.stopping {
		return
	}
	if t, ok := c.timers[id]; ok {
		t.Reset(ttl + c.cfg.LostGrace)
		return
	}
	c.timers[id] = time.AfterFunc(ttl+c.cfg.LostGrace, func() { c.deviceTimeout(id) })
}

func (c *Coordinator) deviceTimeout(id string) {
	c.timersMu.Lock()
	delete(c.timers, id)
	stopping := c.stopping
	c.timersMu.Unlock()
	if stopping {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	if !c.mayFailOver(ctx) {
		// Just started or the database just came back: the device's
		// heartbeats may have failed here, not on its side. Look again
		// after another TTL.
		c.resetTimer(id, c.cfg.HeartbeatTTL)
		return
	}
	lost, runs, err := c.store.MarkDeviceLost(ctx, id, c.cfg.LostGrace)
	c.db.observe(err)
	if err != nil {
		c.log.ErrorContext(ctx, "coordinator: mark device lost", "device_id", id, "err", err)
		return
	}
	if !lost {
		return // seen by another coordinator in time
	}
	c.log.WarnContext(ctx, "coordinator: device lost", "device_id", id, "runs", len(runs))
	c.noteLost(ctx, runs)
}

func (c *Coordinator) noteLost(ctx context.Context, runs []store.LostRun) {
	for _, r := range runs {
		c.log.WarnContext(ctx, "coordinator: run failed over", "run_id", r.RunID, "device_id", r.DeviceID, "token", r.Token, "requeued", r.Requeued)
	}
	if len(runs) > 0 {
		c.Wake()
	}
}

func (c *Coordinator) stopTimers() {
	c.timersMu.Lock()
	defer c.timersMu.Unlock()
	c.stopping = true
	for id, t := range c.timers {
		t.Stop()
		delete(c.timers, id)
	}
}

// rejectReason says why a hello or heartbeat was rejected: the decode
// error, the subject error, or a body naming another device than its
// subject (which left both errors nil and logged "err=<nil>").
func rejectReason(derr, serr error, subjectID, bodyID string) error {
	if err := errors.Join(derr, serr); err != nil {
		return err
	}
	return fmt.Errorf("body device_id %q differs from the subject's %q", bodyID, subjectID)
}

// bodyID is the device id a decoded hello or heartbeat names ("" if none).
func bodyID[M *protocol.Hello | *protocol.Heartbeat](m M) string {
	switch v := any(m).(type) {
	case *protocol.Hello:
		if v != nil {
			return v.DeviceID
		}
	case *protocol.Heartbeat:
		if v != nil {
			return v.DeviceID
		}
	}
	return ""
}

// recordDeviceState keeps the thermal and battery state a heartbeat
// reported for each run whose lease it renewed (the run's device trace).
// A failure is logged, not fatal: the trace is best effort.
func (c *Coordinator) recordDeviceState(ctx context.Context, id string, renewed []protocol.LeaseRenewal, st *protocol.DeviceState) {
	if len(renewed) == 0 || !store.DeviceStateReported(st) {
		return
	}
	ids := make([]int64, len(renewed))
	for i, r := range renewed {
		ids[i] = r.RunID
	}
	if err := c.store.RecordDeviceState(ctx, ids, st); err != nil {
		c.log.WarnContext(ctx, "coordinator: device state not recorded", "device_id", id, "err", err)
	}
}

// registerEmbedded registers the agent's embedded runtime as a build
// (store.EnsureEmbeddedBuild), once per build, platform and sha256 for this
// coordinator. A refusal (the id is registered with another sha256: two
// binaries from one revision) is logged, not fatal to the hello: runs of
// that build then reject this device's results by their sha256.
func (c *Coordinator) registerEmbedded(ctx context.Context, deviceID string, fp *protocol.Fingerprint) {
	if fp.EmbeddedBuild == "" || fp.EmbeddedSHA256 == "" {
		return
	}
	platform := fp.Platform + "/" + fp.Arch
	key := fp.EmbeddedBuild + " " + platform + " " + fp.EmbeddedSHA256
	if _, done := c.embedded.Load(key); done {
		return
	}
	_, err := c.store.EnsureEmbeddedBuild(ctx, &store.EmbeddedBuildParams{ID: fp.EmbeddedBuild, Platform: platform,
		SHA256: fp.EmbeddedSHA256, GoVersion: fp.GoVersion})
	if err != nil {
		c.log.WarnContext(ctx, "coordinator: embedded build not registered", "device_id", deviceID, "build", fp.EmbeddedBuild, "err", err)
		return
	}
	c.embedded.Store(key, true)
}

// claimSession records the hello's agent session as the device's: the
// newest hello takes the device over (one connection per device,
// docs/protocol.md). The previous session's runs are failed over by the
// hello's reconcile (they are not among this hello's runs), its
// heartbeats get HeartbeatReply.Superseded and its agent ignores
// assignments, which name the new session.
func (c *Coordinator) claimSession(ctx context.Context, id, session string) error {
	prev, err := c.store.ClaimDeviceSession(ctx, id, session)
	if err != nil {
		c.log.ErrorContext(ctx, "coordinator: claim device session", "device_id", id, "err", err)
		return err
	}
	if prev != "" {
		c.rejects.Add("hello", RejectTakenOver)
		c.log.WarnContext(ctx, "coordinator: device taken over by a new agent session; the previous one is fenced", "device_id", id,
			"session", session, "previous_session", prev)
	}
	return nil
}

// RejectTakenOver counts hellos that took a device over from another
// live agent session (lesfarm_protocol_rejected_total{type="hello"}).
const RejectTakenOver = "taken_over"

// deviceSession is the agent session an assignment to device id names
// ("" when unknown: any agent of the device may take it).
func (c *Coordinator) deviceSession(ctx context.Context, id string) string {
	s, err := c.store.DeviceSession(ctx, id)
	if err != nil {
		c.log.WarnContext(ctx, "coordinator: device session unknown, assignment names none", "device_id", id, "err", err)
	}
	return s
}
