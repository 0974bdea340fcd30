package dispatch

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
func (dp *Dispatcher) respond(m *nats.Msg, reply protocol.Message) {
	data, err := protocol.Encode(reply)
	if err != nil {
		dp.log.Error("dispatch: encode reply", "type", reply.MessageType(), "err", err)
		return
	}
	if err := m.Respond(data); err != nil {
		dp.log.Warn("dispatch: send reply", "type", reply.MessageType(), "err", err)
	}
}

func (dp *Dispatcher) handleHello(m *nats.Msg) {
	ctx, cancel := context.WithTimeout(dp.ctx, 10*time.Second)
	defer cancel()
	id, _, err := protocol.ParseDeviceSubject(m.Subject)
	h, derr := protocol.DecodeHello(m.Data)
	if derr == nil && len(h.Session) > protocol.MaxSession {
		derr = fmt.Errorf("session of %d bytes, over %d", len(h.Session), protocol.MaxSession)
	}
	if derr != nil || err != nil || h.DeviceID != id {
		dp.rejects.Observe(derr)
		if derr == nil || !errors.As(derr, new(*protocol.DecodeError)) {
			dp.rejects.Add("hello", protocol.RejectInvalid)
		}
		dp.logs.warn(ctx, dp.log, "hello-rejected:"+m.Subject, "dispatch: hello rejected", "subject", m.Subject, "err", rejectReason(derr, err, id, bodyID(h)))
		if id != "" {
			dp.respond(m, &protocol.HelloReply{DeviceID: id, Accepted: false, Reason: "malformed hello", ServerTime: time.Now()})
		}
		return
	}
	ttl := dp.cfg.HeartbeatTTL
	if _, err := dp.store.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: id, Fingerprint: h.Fingerprint, Labels: h.Labels, TTL: ttl, Coordinator: dp.cfg.Name}); err != nil {
		dp.log.ErrorContext(ctx, "dispatch: register device", "device_id", id, "err", err)
		dp.respond(m, &protocol.HelloReply{DeviceID: id, Accepted: false, Reason: "coordinator error, retry", ServerTime: time.Now()})
		return
	}
	if err := dp.claimSession(ctx, id, h.Session); err != nil {
		dp.respond(m, &protocol.HelloReply{DeviceID: id, Accepted: false, Reason: "coordinator error, retry", ServerTime: time.Now()})
		return
	}
	dp.registerEmbedded(ctx, id, &h.Fingerprint)
	cancels, lost, err := dp.store.ReconcileHello(ctx, id, h.Runs, dp.cfg.LeaseTTL)
	if err != nil {
		dp.log.ErrorContext(ctx, "dispatch: reconcile hello", "device_id", id, "err", err)
	}
	for _, l := range lost {
		dp.log.InfoContext(ctx, "dispatch: run failed over, agent restarted", "run_id", l.RunID, "device_id", id, "requeued", l.Requeued)
	}
	dp.resetTimer(id, ttl)
	dp.log.InfoContext(ctx, "dispatch: device hello", "device_id", id, "platform", h.Fingerprint.Platform,
		"model", h.Fingerprint.DeviceModel, "emulated", h.Fingerprint.Emulated, "held_runs", len(h.Runs))
	dp.respond(m, &protocol.HelloReply{DeviceID: id, Accepted: true, TTLMS: ttl.Milliseconds(),
		HeartbeatIntervalMS: scheduler.HeartbeatInterval(ttl).Milliseconds(), SigningKey: dp.signPub,
		Cancel: cancels, ServerTime: time.Now()})
	dp.Wake()
}

func (dp *Dispatcher) handleHeartbeat(m *nats.Msg) {
	ctx, cancel := context.WithTimeout(dp.ctx, 10*time.Second)
	defer cancel()
	id, _, err := protocol.ParseDeviceSubject(m.Subject)
	hb, derr := protocol.DecodeHeartbeat(m.Data)
	if derr != nil || err != nil || hb.DeviceID != id {
		dp.rejects.Observe(derr)
		if derr == nil {
			dp.rejects.Add("heartbeat", protocol.RejectInvalid)
		}
		dp.logs.warn(ctx, dp.log, "heartbeat-rejected:"+m.Subject, "dispatch: heartbeat rejected", "subject", m.Subject, "err", rejectReason(derr, err, id, bodyID(hb)))
		return
	}
	ttl := dp.cfg.HeartbeatTTL
	if hb.Session != "" {
		err = dp.store.TouchDeviceSession(ctx, id, hb.Session, ttl, dp.cfg.Name)
	} else {
		err = dp.store.TouchDevice(ctx, id, ttl, dp.cfg.Name)
	}
	dp.db.observe(err)
	if errors.Is(err, store.ErrSuperseded) {
		// Another agent with this device id said hello since: this one is
		// fenced and must stop, not say hello again (which would take the
		// device back, and so on for ever).
		dp.logs.warn(ctx, dp.log, "superseded:"+id+":"+hb.Session, "dispatch: heartbeat of a superseded agent session, fenced", "device_id", id, "session", hb.Session)
		dp.respond(m, &protocol.HeartbeatReply{TTLMS: ttl.Milliseconds(), ServerTime: time.Now(),
			Superseded: fmt.Sprintf("device id %s was taken over by another agent (a newer hello): one connection per device", id)})
		return
	}
	if errors.Is(err, store.ErrNotFound) {
		// Unknown or already declared lost: the agent must say hello again
		// (which reconciles the runs it still holds).
		dp.respond(m, &protocol.HeartbeatReply{TTLMS: ttl.Milliseconds(), Rehello: true, ServerTime: time.Now()})
		return
	}
	if err != nil {
		dp.log.ErrorContext(ctx, "dispatch: heartbeat", "device_id", id, "err", err)
		return // no reply: the agent retries
	}
	dp.resetTimer(id, ttl)
	renewed, cancels, err := dp.store.RenewLeases(ctx, &store.RenewLeasesParams{DeviceID: id, Runs: hb.Runs, TTL: dp.cfg.LeaseTTL})
	if err != nil {
		dp.log.ErrorContext(ctx, "dispatch: renew leases", "device_id", id, "err", err)
		return
	}
	if hb.FreeStorageBytes != nil {
		// Before the reply: the agent stops reporting once answered.
		if err := dp.store.SetDeviceFreeStorage(ctx, id, *hb.FreeStorageBytes); err != nil {
			dp.log.WarnContext(ctx, "dispatch: free storage not recorded", "device_id", id, "err", err)
		} else {
			dp.logs.warn(ctx, dp.log, "short-of-storage:"+id, "dispatch: device short of storage", "device_id", id, "free_storage_bytes", *hb.FreeStorageBytes)
		}
	}
	dp.respond(m, &protocol.HeartbeatReply{TTLMS: ttl.Milliseconds(), Renewed: renewed, Cancel: cancels, ServerTime: time.Now()})
	dp.recordDeviceState(ctx, id, renewed, hb.State)
	if len(hb.Runs) == 0 {
		dp.Wake() // an idle device: maybe work is waiting
	}
}

// resetTimer (re)arms the device's liveness timer.
func (dp *Dispatcher) resetTimer(id string, ttl time.Duration) {
	dp.timersMu.Lock()
	defer dp.timersMu.Unlock()
	if dp.stopping {
		return
	}
	if t, ok := dp.timers[id]; ok {
		t.Reset(ttl + dp.cfg.LostGrace)
		return
	}
	dp.timers[id] = time.AfterFunc(ttl+dp.cfg.LostGrace, func() { dp.deviceTimeout(id) })
}

func (dp *Dispatcher) deviceTimeout(id string) {
	dp.timersMu.Lock()
	delete(dp.timers, id)
	stopping := dp.stopping
	dp.timersMu.Unlock()
	if stopping {
		return
	}
	ctx, cancel := context.WithTimeout(dp.ctx, 10*time.Second)
	defer cancel()
	if !dp.mayFailOver(ctx) {
		// Just started or the database just came back: the device's
		// heartbeats may have failed here, not on its side. Look again
		// after another TTL.
		dp.resetTimer(id, dp.cfg.HeartbeatTTL)
		return
	}
	lost, runs, err := dp.store.MarkDeviceLost(ctx, id, dp.cfg.LostGrace)
	dp.db.observe(err)
	if err != nil {
		dp.log.ErrorContext(ctx, "dispatch: mark device lost", "device_id", id, "err", err)
		return
	}
	if !lost {
		return // seen by another coordinator in time
	}
	dp.log.WarnContext(ctx, "dispatch: device lost", "device_id", id, "runs", len(runs))
	dp.noteLost(ctx, runs)
}

func (dp *Dispatcher) noteLost(ctx context.Context, runs []store.LostRun) {
	for _, r := range runs {
		dp.log.WarnContext(ctx, "dispatch: run failed over", "run_id", r.RunID, "device_id", r.DeviceID, "token", r.Token, "requeued", r.Requeued)
	}
	if len(runs) > 0 {
		dp.Wake()
	}
}

func (dp *Dispatcher) stopTimers() {
	dp.timersMu.Lock()
	defer dp.timersMu.Unlock()
	dp.stopping = true
	for id, t := range dp.timers {
		t.Stop()
		delete(dp.timers, id)
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
func (dp *Dispatcher) recordDeviceState(ctx context.Context, id string, renewed []protocol.LeaseRenewal, st *protocol.DeviceState) {
	if len(renewed) == 0 || !store.DeviceStateReported(st) {
		return
	}
	ids := make([]int64, len(renewed))
	for i, r := range renewed {
		ids[i] = r.RunID
	}
	if err := dp.store.RecordDeviceState(ctx, ids, st); err != nil {
		dp.log.WarnContext(ctx, "dispatch: device state not recorded", "device_id", id, "err", err)
	}
}

// registerEmbedded registers the agent's embedded runtime as a build
// (store.EnsureEmbeddedBuild), once per build, platform and sha256 for this
// coordinator. A refusal (the id is registered with another sha256: two
// binaries from one revision) is logged, not fatal to the hello: runs of
// that build then reject this device's results by their sha256.
func (dp *Dispatcher) registerEmbedded(ctx context.Context, deviceID string, fp *protocol.Fingerprint) {
	if fp.EmbeddedBuild == "" || fp.EmbeddedSHA256 == "" {
		return
	}
	platform := fp.Platform + "/" + fp.Arch
	key := fp.EmbeddedBuild + " " + platform + " " + fp.EmbeddedSHA256
	if _, done := dp.embedded.Load(key); done {
		return
	}
	_, err := dp.store.EnsureEmbeddedBuild(ctx, &store.EmbeddedBuildParams{ID: fp.EmbeddedBuild, Platform: platform,
		SHA256: fp.EmbeddedSHA256, GoVersion: fp.GoVersion})
	if err != nil {
		dp.log.WarnContext(ctx, "dispatch: embedded build not registered", "device_id", deviceID, "build", fp.EmbeddedBuild, "err", err)
		return
	}
	dp.embedded.Store(key, true)
}

// claimSession records the hello's agent session as the device's: the
// newest hello takes the device over (one connection per device,
// docs/protocol.md). The previous session's runs are failed over by the
// hello's reconcile (they are not among this hello's runs), its
// heartbeats get HeartbeatReply.Superseded and its agent ignores
// assignments, which name the new session.
func (dp *Dispatcher) claimSession(ctx context.Context, id, session string) error {
	prev, err := dp.store.ClaimDeviceSession(ctx, id, session)
	if err != nil {
		dp.log.ErrorContext(ctx, "dispatch: claim device session", "device_id", id, "err", err)
		return err
	}
	if prev != "" {
		dp.rejects.Add("hello", RejectTakenOver)
		dp.log.WarnContext(ctx, "dispatch: device taken over by a new agent session; the previous one is fenced", "device_id", id,
			"session", session, "previous_session", prev)
	}
	return nil
}

// RejectTakenOver counts hellos that took a device over from another
// live agent session (lesfarm_protocol_rejected_total{type="hello"}).
const RejectTakenOver = "taken_over"

// deviceSession is the agent session an assignment to device id names
// ("" when unknown: any agent of the device may take it).
func (dp *Dispatcher) deviceSession(ctx context.Context, id string) string {
	s, err := dp.store.DeviceSession(ctx, id)
	if err != nil {
		dp.log.WarnContext(ctx, "dispatch: device session unknown, assignment names none", "device_id", id, "err", err)
	}
	return s
}
