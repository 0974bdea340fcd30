package coordinator_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// driver stands in for an agent: it speaks the real protocol over NATS
// (hello, heartbeats, signed assignments, cancels, telemetry and results on
// JetStream) without running any model.
type driver struct {
	t   testing.TB
	id  string
	nc  *nats.Conn
	js  jetstream.JetStream
	key ed25519.PublicKey
	ttl time.Duration

	assigned chan *protocol.Assignment
	cancels  chan protocol.CancelNotice

	mu       sync.Mutex
	held     map[int64]int64 // run -> token
	refuse   string          // refusal code, "" accepts
	silent   bool            // stop heartbeating (a dead device)
	stopHB   chan struct{}
	hbDone   chan struct{}
	received []time.Time // when each assignment arrived
}

func newDriver(t testing.TB, natsURL, id string) *driver {
	t.Helper()
	nc, err := nats.Connect(natsURL, nats.Name("driver "+id))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	d := &driver{t: t, id: id, nc: nc, js: js, assigned: make(chan *protocol.Assignment, 64), cancels: make(chan protocol.CancelNotice, 64),
		held: map[int64]int64{}, stopHB: make(chan struct{}), hbDone: make(chan struct{})}
	if _, err := nc.Subscribe(protocol.AssignSubject(id), d.onAssign); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe(protocol.CancelSubject(id), d.onCancel); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.close)
	return d
}

func (d *driver) close() {
	select {
	case <-d.stopHB:
	default:
		close(d.stopHB)
	}
	d.nc.Close()
}

func (d *driver) request(subject string, m protocol.Message) []byte {
	d.t.Helper()
	data, err := protocol.Encode(m)
	if err != nil {
		d.t.Fatal(err)
	}
	var msg *nats.Msg
	// Until the coordinator subscribes (starting), a request has no
	// responders and fails at once.
	testenv.Eventually(d.t, 30*time.Second, 50*time.Millisecond, func() error {
		msg, err = d.nc.Request(subject, data, 5*time.Second)
		if err != nil {
			return fmt.Errorf("%s: %w", subject, err)
		}
		return nil
	})
	return msg.Data
}

// hello registers the device and starts heartbeating.
func (d *driver) hello(labels map[string]string) *protocol.HelloReply {
	d.t.Helper()
	ram := int64(8 << 30)
	rep, err := protocol.DecodeHelloReply(d.request(protocol.HelloSubject(d.id), &protocol.Hello{DeviceID: d.id, Labels: labels, SentAt: time.Now(),
		Fingerprint: protocol.Fingerprint{Platform: "linux", DeviceModel: "test-host", RAMBytes: &ram, Emulated: true, Profile: "phone-flagship", Cores: 2}}))
	if err != nil || !rep.Accepted {
		d.t.Fatalf("hello: %v %+v", err, rep)
	}
	d.mu.Lock()
	d.key, d.ttl = rep.SigningKey, rep.TTL()
	d.mu.Unlock()
	go d.heartbeats(rep.HeartbeatInterval())
	return rep
}

func (d *driver) heartbeats(every time.Duration) {
	defer close(d.hbDone)
	t := time.NewTicker(every)
	defer t.Stop()
	var seq uint64
	for {
		select {
		case <-d.stopHB:
			return
		case <-t.C:
		}
		d.mu.Lock()
		if d.silent {
			d.mu.Unlock()
			continue
		}
		var runs []protocol.RunStatus
		for r, tok := range d.held {
			runs = append(runs, protocol.RunStatus{RunID: r, Token: tok, State: protocol.RunStateRunning})
		}
		d.mu.Unlock()
		seq++
		data, _ := protocol.Encode(&protocol.Heartbeat{DeviceID: d.id, Seq: seq, Runs: runs, SentAt: time.Now()})
		msg, err := d.nc.Request(protocol.HeartbeatSubject(d.id), data, 2*time.Second)
		if err != nil {
			continue
		}
		rep, err := protocol.DecodeHeartbeatReply(msg.Data)
		if err != nil {
			continue
		}
		for _, c := range rep.Cancel {
			d.drop(c.RunID)
			d.cancels <- c
		}
	}
}

func (d *driver) drop(run int64) {
	d.mu.Lock()
	delete(d.held, run)
	d.mu.Unlock()
}

// die stops heartbeats and answers, like a device that lost power.
func (d *driver) die() {
	d.mu.Lock()
	d.silent = true
	d.mu.Unlock()
	d.nc.Close()
}

func (d *driver) onAssign(m *nats.Msg) {
	d.mu.Lock()
	key := d.key
	d.mu.Unlock()
	a, err := protocol.OpenAssignment(m.Data, key)
	reply := &protocol.AssignReply{}
	switch {
	case err != nil:
		reply.RunID, reply.Token = protocol.PeekAssignment(m.Data)
		reply.Code, reply.Reason = protocol.RefuseBadSignature, err.Error()
	default:
		reply.RunID, reply.Token = a.RunID, a.Token
		d.mu.Lock()
		reply.Code = d.refuse
		if reply.Code == "" {
			reply.Accepted = true
			d.held[a.RunID] = a.Token
			d.received = append(d.received, time.Now())
		} else {
			reply.Reason = "test refusal"
		}
		d.mu.Unlock()
	}
	data, _ := protocol.Encode(reply)
	_ = m.Respond(data)
	if reply.Accepted {
		d.assigned <- a
	}
}

func (d *driver) onCancel(m *nats.Msg) {
	c, err := protocol.DecodeCancel(m.Data)
	if err != nil {
		return
	}
	d.mu.Lock()
	_, known := d.held[c.RunID]
	delete(d.held, c.RunID)
	d.mu.Unlock()
	data, _ := protocol.Encode(&protocol.CancelReply{RunID: c.RunID, Known: known})
	_ = m.Respond(data)
	d.cancels <- protocol.CancelNotice{RunID: c.RunID, Token: c.Token, Reason: c.Reason}
}

func (d *driver) waitAssignment(timeout time.Duration) *protocol.Assignment {
	d.t.Helper()
	select {
	case a := <-d.assigned:
		return a
	case <-time.After(timeout):
		d.t.Fatalf("%s: no assignment within %s", d.id, timeout)
	}
	return nil
}

func (d *driver) waitCancel(timeout time.Duration) protocol.CancelNotice {
	d.t.Helper()
	select {
	case c := <-d.cancels:
		return c
	case <-time.After(timeout):
		d.t.Fatalf("%s: no cancel within %s", d.id, timeout)
	}
	return protocol.CancelNotice{}
}

// telemetry publishes batches seq 0..n-1 of per samples each; dupEvery > 0
// republishes every dupEvery-th batch (an agent resending after reconnect).
func (d *driver) telemetry(a *protocol.Assignment, n, per, dupEvery int) {
	d.t.Helper()
	for s := range n {
		b := &protocol.TelemetryBatch{RunID: a.RunID, Token: a.Token, DeviceID: d.id, Seq: uint64(s), SentAt: time.Now()}
		for i := range per {
			b.Samples = append(b.Samples, protocol.Sample{ConfigIndex: i % len(a.Configs), Step: s*per + i, Phase: protocol.PhaseDecode, Tokens: 1,
				DurationNS: 5e6, BytesRead: 1 << 17, Layers: &protocol.LayerCounts{Hits: []int32{1, 2}, Misses: []int32{0, 1}, PrefetchUsed: []int32{0, 0}, PrefetchWasted: []int32{0, 1}}})
		}
		d.publish(protocol.TelemetrySubject(a.RunID), b)
		if dupEvery > 0 && s%dupEvery == 0 {
			d.publish(protocol.TelemetrySubject(a.RunID), b)
		}
	}
}

func (d *driver) result(a *protocol.Assignment, outcome string, batches, samples int) {
	d.t.Helper()
	r := &protocol.Result{RunID: a.RunID, Token: a.Token, DeviceID: d.id, Outcome: outcome, TelemetryBatches: uint64(batches),
		TelemetrySamples: uint64(samples), StartedAt: time.Now(), FinishedAt: time.Now()}
	if outcome == protocol.OutcomeFailed {
		r.Error = "test failure"
	}
	for _, c := range a.Configs {
		r.Configs = append(r.Configs, protocol.ConfigResult{ConfigIndex: c.Index, ConfigKey: c.Key, Valid: true, Repetitions: a.Spec.Repetitions,
			DecodeTPS: protocol.Stat{N: 1, Mean: 40, Median: 40}, HitRate: 0.5})
	}
	d.publish(protocol.ResultSubject(a.RunID), r)
	d.drop(a.RunID)
}

func (d *driver) publish(subject string, m protocol.Message) {
	d.t.Helper()
	data, err := protocol.Encode(m)
	if err != nil {
		d.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := d.js.Publish(ctx, subject, data); err != nil {
		d.t.Fatal(err)
	}
}
