package loadtest

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/protocol"
)

// simAgent is one simulated device: it speaks the agent's protocol over its
// own NATS connection with its own device credential (hello, heartbeats,
// signed assignments verified and acknowledged, telemetry batches and one
// result per run on the device-scoped JetStream subjects, replies under its
// own inbox prefix), but runs no model: a run is RunLength of telemetry at
// the configured rate.
type simAgent struct {
	lt     *loadRun
	id     string
	secret string
	nc     *nats.Conn
	js     jetstream.JetStream

	mu  sync.Mutex
	key ed25519.PublicKey
	// held are the runs the agent reports in its hellos and heartbeats:
	// the one it streams ("running") and the finished ones whose result
	// the coordinator has not committed yet ("finishing"), until a
	// heartbeat reply or a cancel says their lease is no longer active —
	// what the real agent does (agent/unreported.go). A finished run left
	// out would lose its lease while its result waits in JetStream for
	// ingest, be failed over and its result rejected as stale.
	held     map[int64]heldRun
	assigned chan *protocol.Assignment
	// lastResult is when the agent published its last result, until its
	// next assignment arrives (zero: no result waiting).
	lastResult time.Time
}

// heldRun is a run the agent still reports: its attempt's token and state.
type heldRun struct {
	token int64
	state string
}

func newSimAgent(lt *loadRun, id, secret string) *simAgent {
	return &simAgent{lt: lt, id: id, secret: secret, held: map[int64]heldRun{}, assigned: make(chan *protocol.Assignment, 4)}
}

// heldStatus lists the held runs for a hello or heartbeat.
func (a *simAgent) heldStatus() []protocol.RunStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	var runs []protocol.RunStatus
	for r, h := range a.held {
		p := 0.5
		if h.state == protocol.RunStateFinishing {
			p = 1
		}
		runs = append(runs, protocol.RunStatus{RunID: r, Token: h.token, State: h.state, Progress: p})
	}
	return runs
}

// connect opens the agent's NATS connection and subscribes to its assign
// and cancel subjects.
func (a *simAgent) connect() error {
	opts := []nats.Option{nats.Name("lesfarm loadtest " + a.id), nats.Token(a.secret),
		nats.CustomInboxPrefix(protocol.DeviceInboxPrefix(a.id)), nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond), nats.ReconnectJitter(250*time.Millisecond, 0),
		nats.Timeout(5 * time.Second), nats.ReconnectBufSize(8 << 20),
		nats.ReconnectHandler(func(*nats.Conn) { a.lt.reconnects.Add(1) })}
	opts = append(opts, a.lt.cfg.NATSOptions...)
	nc, err := nats.Connect(a.lt.cfg.NATSURL, opts...)
	if err != nil {
		return fmt.Errorf("agent %s: connect: %w", a.id, err)
	}
	a.nc = nc
	if a.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return fmt.Errorf("agent %s: jetstream: %w", a.id, err)
	}
	if _, err := nc.Subscribe(protocol.AssignSubject(a.id), a.onAssign); err != nil {
		nc.Close()
		return fmt.Errorf("agent %s: subscribe: %w", a.id, err)
	}
	if _, err := nc.Subscribe(protocol.CancelSubject(a.id), a.onCancel); err != nil {
		nc.Close()
		return fmt.Errorf("agent %s: subscribe: %w", a.id, err)
	}
	return nc.Flush()
}

func (a *simAgent) close() {
	if a.nc != nil {
		a.nc.Close()
	}
}

// request sends a request, retrying while nobody answers (coordinator
// starting, NATS node failing over) until ctx ends.
func (a *simAgent) request(ctx context.Context, subject string, m protocol.Message) ([]byte, error) {
	data, err := protocol.Encode(m)
	if err != nil {
		return nil, err
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msg, err := a.nc.RequestWithContext(rctx, subject, data)
		cancel()
		if err == nil {
			return msg.Data, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("agent %s: %s: %w", a.id, subject, err)
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// hello registers the device; it returns the heartbeat interval.
func (a *simAgent) hello(ctx context.Context) (time.Duration, error) {
	ram := int64(12 << 30)
	runs := a.heldStatus()
	data, err := a.request(ctx, protocol.HelloSubject(a.id), &protocol.Hello{DeviceID: a.id, Labels: map[string]string{LabelKey: a.lt.session},
		Runs: runs, SentAt: time.Now(), Fingerprint: protocol.Fingerprint{Platform: "android", DeviceModel: "loadtest-phone", Cores: 8,
			RAMBytes: &ram, Emulated: true, Profile: "phone-flagship", AgentBuild: "loadtest", RuntimeBuild: "loadtest"}})
	if err != nil {
		return 0, err
	}
	rep, err := protocol.DecodeHelloReply(data)
	if err != nil {
		return 0, fmt.Errorf("agent %s: hello reply: %w", a.id, err)
	}
	if !rep.Accepted {
		return 0, fmt.Errorf("agent %s: hello refused: %s", a.id, rep.Reason)
	}
	a.mu.Lock()
	a.key = rep.SigningKey
	a.mu.Unlock()
	return rep.HeartbeatInterval(), nil
}

// heartbeats renews the device and its lease until ctx ends.
func (a *simAgent) heartbeats(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var seq uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		seq++
		data, err := protocol.Encode(&protocol.Heartbeat{DeviceID: a.id, Seq: seq, Runs: a.heldStatus(), SentAt: time.Now()})
		if err != nil {
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		msg, err := a.nc.RequestWithContext(hctx, protocol.HeartbeatSubject(a.id), data)
		cancel()
		if err != nil {
			a.lt.heartbeatErrors.Add(1)
			continue
		}
		rep, err := protocol.DecodeHeartbeatReply(msg.Data)
		if err != nil {
			continue
		}
		if rep.Rehello {
			if _, err := a.hello(ctx); err != nil {
				a.lt.heartbeatErrors.Add(1)
			}
		}
		for _, c := range rep.Cancel {
			if a.drop(c.RunID, c.Token) == protocol.RunStateRunning {
				a.lt.cancelled.Add(1)
			}
		}
	}
}

// drop forgets the run's attempt with token (a newer one stays) and
// returns the state it was in ("" if not held).
func (a *simAgent) drop(run, token int64) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	h, ok := a.held[run]
	if !ok || h.token != token {
		return ""
	}
	delete(a.held, run)
	return h.state
}

// finishing marks the run's attempt as finished, its result on its way.
func (a *simAgent) finishing(run, token int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h, ok := a.held[run]; ok && h.token == token {
		a.held[run] = heldRun{token: token, state: protocol.RunStateFinishing}
	}
}

func (a *simAgent) onAssign(m *nats.Msg) {
	now := time.Now()
	a.mu.Lock()
	key := a.key
	a.mu.Unlock()
	as, err := protocol.OpenAssignment(m.Data, key)
	reply := &protocol.AssignReply{}
	if err != nil {
		reply.RunID, reply.Token = protocol.PeekAssignment(m.Data)
		reply.Code, reply.Reason = protocol.RefuseBadSignature, err.Error()
		a.lt.badAssignments.Add(1)
	} else {
		reply.RunID, reply.Token, reply.Accepted = as.RunID, as.Token, true
		a.mu.Lock()
		a.held[as.RunID] = heldRun{token: as.Token, state: protocol.RunStateRunning}
		a.mu.Unlock()
	}
	data, _ := protocol.Encode(reply)
	_ = m.Respond(data)
	if reply.Accepted {
		a.lt.noteAssigned(a, as.RunID, now)
		a.assigned <- as
	}
}

func (a *simAgent) onCancel(m *nats.Msg) {
	c, err := protocol.DecodeCancel(m.Data)
	if err != nil {
		return
	}
	known := a.drop(c.RunID, c.Token) != ""
	a.lt.cancelled.Add(1)
	data, _ := protocol.Encode(&protocol.CancelReply{RunID: c.RunID, Known: known})
	_ = m.Respond(data)
}

// loop runs assignments until ctx ends or the load run says it is over.
func (a *simAgent) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.lt.over:
			return
		case as := <-a.assigned:
			a.runOne(ctx, as)
		}
	}
}

// runOne streams the run's telemetry at the configured rate and publishes
// its result; a sample counts as sent once JetStream acknowledged its batch.
func (a *simAgent) runOne(ctx context.Context, as *protocol.Assignment) {
	cfg := &a.lt.cfg
	tpl := a.lt.template
	t := time.NewTicker(cfg.BatchInterval)
	defer t.Stop()
	started := time.Now()
	var seq uint64
	var sent int64
	buf := make([]byte, 0, len(tpl)+256)
	for range a.lt.batchesPerRun {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		buf = appendBatch(buf[:0], as.RunID, as.Token, a.id, seq, tpl)
		if err := a.publish(ctx, protocol.DeviceTelemetrySubject(a.id, as.RunID), buf); err != nil {
			return
		}
		seq++
		sent += int64(cfg.SamplesPerBatch)
		a.lt.samplesSent.Add(int64(cfg.SamplesPerBatch))
	}
	res := &protocol.Result{RunID: as.RunID, Token: as.Token, DeviceID: a.id, Outcome: protocol.OutcomeSucceeded,
		TelemetryBatches: seq, TelemetrySamples: uint64(sent), StartedAt: started, FinishedAt: time.Now()}
	for _, c := range as.Configs {
		res.Configs = append(res.Configs, protocol.ConfigResult{ConfigIndex: c.Index, ConfigKey: c.Key, Valid: true, Repetitions: 1,
			DecodeTPS: protocol.Stat{N: 1, Mean: 20, Median: 20, Min: 20, Max: 20}, PrefillTPS: protocol.Stat{N: 1, Mean: 80, Median: 80, Min: 80, Max: 80},
			TTFTMS: protocol.Stat{N: 1, Mean: 150, Median: 150, Min: 150, Max: 150}, HitRate: 0.6, PredictorRecall: 0.8})
	}
	data, err := protocol.Encode(res)
	if err != nil {
		a.lt.fail(fmt.Errorf("agent %s: encode result: %w", a.id, err))
		return
	}
	a.lt.noteSent(as.RunID, as.Token, sent)
	a.finishing(as.RunID, as.Token)
	resultAt := time.Now()
	if err := a.publish(ctx, protocol.DeviceResultSubject(a.id, as.RunID), data); err != nil {
		return
	}
	a.lt.noteResult(a, as.RunID, resultAt)
}

// publish publishes to JetStream until acknowledged (a batch is re-sent
// after a timeout, as the agent's disk buffer does; ingest stores it once)
// or ctx ends.
func (a *simAgent) publish(ctx context.Context, subject string, data []byte) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := a.js.Publish(pctx, subject, data)
		cancel()
		if err == nil {
			return nil
		}
		a.lt.publishRetries.Add(1)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return err
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// sampleTemplate returns the JSON of the samples field of a batch of n
// per-token samples with layers per-layer counts each, encoded by the
// protocol package (varint rows, base64): what an agent on a MoE model of
// that depth sends per batch. Every batch reuses it; the store keys samples
// by (run, seq, index), not by content.
func sampleTemplate(n, layers, configs int) (json.RawMessage, error) {
	b := &protocol.TelemetryBatch{V: protocol.Version, RunID: 1, Token: 1, DeviceID: "x", SentAt: time.Now()}
	for i := range n {
		lc := &protocol.LayerCounts{Hits: make([]int32, layers), Misses: make([]int32, layers), PrefetchUsed: make([]int32, layers), PrefetchWasted: make([]int32, layers)}
		for l := range layers {
			lc.Hits[l] = int32(3 + (i+l)%6)
			lc.Misses[l] = int32((i * l) % 4)
			lc.PrefetchUsed[l] = int32((i + 2*l) % 3)
			lc.PrefetchWasted[l] = int32((i + l) % 2)
		}
		b.Samples = append(b.Samples, protocol.Sample{ConfigIndex: i % max(configs, 1), Step: i, Phase: protocol.PhaseDecode, Pos: 16 + i, Tokens: 1,
			DurationNS: 48e6 + int64(i%7)*1e6, StallNS: 11e6 + int64(i%5)*1e6, BytesRead: 9<<20 + int64(i%11)<<16, CacheBytes: 16 << 20, Layers: lc}) // within the smoke model's 33 MB: ingest bounds byte counts by the model (protocol.RunBounds)
	}
	data, err := protocol.Encode(b)
	if err != nil {
		return nil, err
	}
	var wire struct {
		Samples json.RawMessage `json:"samples"`
	}
	if err := json.Unmarshal(data, &wire); err != nil {
		return nil, err
	}
	return wire.Samples, nil
}

// appendBatch appends the JSON of a TelemetryBatch whose samples field is
// tpl (see sampleTemplate).
func appendBatch(b []byte, runID, token int64, deviceID string, seq uint64, tpl json.RawMessage) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, protocol.Version, 10)
	b = append(b, `,"run_id":`...)
	b = strconv.AppendInt(b, runID, 10)
	b = append(b, `,"token":`...)
	b = strconv.AppendInt(b, token, 10)
	b = append(b, `,"device_id":"`...)
	b = append(b, deviceID...) // a valid device id needs no escaping
	b = append(b, `","seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"samples":`...)
	b = append(b, tpl...)
	b = append(b, `,"sent_at":"`...)
	b = time.Now().UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, `"}`...)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
