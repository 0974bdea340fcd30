package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// coord stands in for the coordinator over the real NATS protocol: it
// answers hellos and heartbeats, signs assignments and reads the streams.
type coord struct {
	t      *testing.T
	nc     *nats.Conn
	js     jetstream.JetStream
	pub    ed25519.PublicKey
	priv   ed25519.PrivateKey
	ttl    time.Duration
	silent atomic.Bool // stop answering heartbeats
	hellos atomic.Int32
	beats  atomic.Int32
	mu     sync.Mutex
	runs   []protocol.RunStatus // runs reported by the last heartbeat
}

func newCoord(t *testing.T, url string, ttl time.Duration) *coord {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pub, priv, _ := protocol.GenerateSigningKey()
	c := &coord{t: t, nc: nc, pub: pub, priv: priv, ttl: ttl}
	c.js, _ = jetstream.New(nc)
	ctx := context.Background()
	for name, subj := range map[string]string{protocol.StreamTelemetry: protocol.TelemetrySubjectPattern, protocol.StreamResults: protocol.ResultSubjectPattern} {
		if _, err := c.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	nc.Subscribe(protocol.HelloWildcard, func(m *nats.Msg) {
		h, err := protocol.DecodeHello(m.Data)
		if err != nil {
			t.Errorf("coordinator got a bad hello: %v", err)
			return
		}
		c.hellos.Add(1)
		data, _ := protocol.Encode(&protocol.HelloReply{DeviceID: h.DeviceID, Accepted: true, TTLMS: c.ttl.Milliseconds(),
			HeartbeatIntervalMS: (c.ttl / 4).Milliseconds(), SigningKey: c.pub, ServerTime: time.Now()})
		m.Respond(data)
	})
	nc.Subscribe(protocol.HeartbeatWildcard, func(m *nats.Msg) {
		if c.silent.Load() {
			return
		}
		hb, err := protocol.DecodeHeartbeat(m.Data)
		if err != nil {
			t.Errorf("coordinator got a bad heartbeat: %v", err)
			return
		}
		c.beats.Add(1)
		c.mu.Lock()
		c.runs = hb.Runs
		c.mu.Unlock()
		data, _ := protocol.Encode(&protocol.HeartbeatReply{TTLMS: c.ttl.Milliseconds(), ServerTime: time.Now()})
		m.Respond(data)
	})
	nc.Flush()
	return c
}

// assignment builds a valid assignment of spec for device, downloading the
// model from modelURL.
func assignment(spec *jobs.Spec, device string, runID, token int64, modelURL string) *protocol.Assignment {
	return &protocol.Assignment{
		RunID: runID, Token: token, Attempt: 1, DeviceID: device, JobID: 1, Suite: spec.SuiteName(), Build: "test",
		Spec: *spec, Configs: spec.Expand(),
		Artifact:       protocol.Artifact{URL: modelURL, SHA256: spec.Model.SHA256, Size: int64(spec.Model.Size), Name: spec.Model.Name},
		LeaseExpiresAt: time.Now().Add(time.Minute), Deadline: time.Now().Add(10 * time.Minute), IssuedAt: time.Now(),
	}
}

func (c *coord) sendRaw(device string, data []byte) *protocol.AssignReply {
	c.t.Helper()
	resp, err := c.nc.Request(protocol.AssignSubject(device), data, 5*time.Second)
	if err != nil {
		c.t.Fatalf("assign request: %v", err)
	}
	var rep protocol.AssignReply
	if err := json.Unmarshal(resp.Data, &rep); err != nil {
		c.t.Fatalf("assign reply %q: %v", resp.Data, err)
	}
	return &rep
}

func (c *coord) assign(a *protocol.Assignment) *protocol.AssignReply {
	c.t.Helper()
	data, err := protocol.SignAssignment(a, c.priv)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.sendRaw(a.DeviceID, data)
}

func (c *coord) cancel(device string, runID, token int64) *protocol.CancelReply {
	c.t.Helper()
	data, _ := protocol.Encode(&protocol.Cancel{RunID: runID, Token: token, Reason: "test cancel"})
	resp, err := c.nc.Request(protocol.CancelSubject(device), data, 5*time.Second)
	if err != nil {
		c.t.Fatalf("cancel: %v", err)
	}
	rep, err := protocol.DecodeCancelReply(resp.Data)
	if err != nil {
		c.t.Fatal(err)
	}
	return rep
}

// results returns every result in the RESULTS stream.
func (c *coord) results() []*protocol.Result {
	c.t.Helper()
	var out []*protocol.Result
	for _, data := range c.all(protocol.StreamResults) {
		r, err := protocol.DecodeResult(data)
		if err != nil {
			c.t.Fatalf("bad result in stream: %v", err)
		}
		out = append(out, r)
	}
	return out
}

func (c *coord) telemetry() []*protocol.TelemetryBatch {
	c.t.Helper()
	var out []*protocol.TelemetryBatch
	for _, data := range c.all(protocol.StreamTelemetry) {
		b, err := protocol.DecodeTelemetry(data)
		if err != nil {
			c.t.Fatalf("bad telemetry in stream: %v", err)
		}
		out = append(out, b)
	}
	return out
}

func (c *coord) all(stream string) [][]byte {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		c.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	var out [][]byte
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		out = append(out, m.Data)
	}
	return out
}

func (c *coord) waitResult(t *testing.T, runID int64, within time.Duration) *protocol.Result {
	t.Helper()
	var res *protocol.Result
	testenv.Eventually(t, within, 50*time.Millisecond, func() error {
		for _, r := range c.results() {
			if r.RunID == runID {
				res = r
				return nil
			}
		}
		return fmt.Errorf("no result for run %d", runID)
	})
	return res
}

// modelServer serves the trained fixture model with Range support.
func modelServer(t *testing.T, path string) (url string, spec *jobs.Spec) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "model.gguf", time.Unix(0, 0), strings.NewReader(string(data)))
	}))
	t.Cleanup(srv.Close)
	spec = smokeSpec(t)
	spec.Model.SHA256 = hex.EncodeToString(sum[:])
	spec.Model.Size = jobs.ByteSize(len(data))
	return srv.URL + "/model.gguf", spec
}

type runningAgent struct {
	a    *Agent
	stop context.CancelFunc
	done chan error
}

func startAgent(t *testing.T, cfg Config) *runningAgent {
	t.Helper()
	cfg.CacheDir = orStr(cfg.CacheDir, t.TempDir())
	cfg.Threads = 1
	cfg.Gate = ThermalGate{Disabled: true}
	cfg.BatchInterval = cmpDur(cfg.BatchInterval, 100*time.Millisecond)
	cfg.BatchEvents = 16
	cfg.ReconnectMin, cfg.ReconnectMax = 20*time.Millisecond, 200*time.Millisecond
	cfg.RequestTimeout = time.Second
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if testing.Verbose() {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{a: a, stop: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ra.done })
	waitFor(t, 10*time.Second, "agent registered", func() bool { return a.Status().Registered })
	return ra
}

func orStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func cmpDur(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

// waitFor waits (testenv.Eventually) until ok holds.
func waitFor(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	testenv.Eventually(t, within, 10*time.Millisecond, func() error {
		if !ok() {
			return fmt.Errorf("waiting for %s", what)
		}
		return nil
	})
}

// checkTelemetry asserts the run's batches are seq 0..n-1, each once, and
// match the result's counts.
func checkTelemetry(t *testing.T, c *coord, res *protocol.Result) {
	t.Helper()
	seen := map[uint64]int{}
	var samples uint64
	for _, b := range c.telemetry() {
		if b.RunID != res.RunID {
			continue
		}
		if b.Token != res.Token {
			t.Errorf("telemetry seq %d carries token %d, want %d", b.Seq, b.Token, res.Token)
		}
		seen[b.Seq]++
		samples += uint64(len(b.Samples))
	}
	for seq := range res.TelemetryBatches {
		if seen[seq] != 1 {
			t.Errorf("telemetry seq %d stored %d times", seq, seen[seq])
		}
	}
	if uint64(len(seen)) != res.TelemetryBatches || samples != res.TelemetrySamples {
		t.Errorf("stream has %d batches / %d samples, result says %d / %d", len(seen), samples, res.TelemetryBatches, res.TelemetrySamples)
	}
}

func TestAgentRunsSmokeAndReports(t *testing.T) {
	model := trainedModel(t)
	ns := testenv.NATS(t)
	c := newCoord(t, ns.ClientURL(), 5*time.Second)
	url, spec := modelServer(t, model)
	ra := startAgent(t, Config{NATSURL: ns.ClientURL(), Name: "host-1", Labels: map[string]string{"pool": "ci"}})

	rep := c.assign(assignment(spec, "host-1", 41, 7, url))
	if !rep.Accepted {
		t.Fatalf("refused: %+v", rep)
	}
	res := c.waitResult(t, 41, 60*time.Second)
	if res.Outcome != protocol.OutcomeSucceeded || res.Token != 7 || res.DeviceID != "host-1" || len(res.Configs) != 2 {
		t.Fatalf("result: %+v", res)
	}
	for _, cr := range res.Configs {
		if cr.Error != "" || !cr.Valid || cr.DecodeTPS.Mean <= 0 {
			t.Errorf("config %s: %+v", cr.ConfigKey, cr)
		}
	}
	waitFor(t, 5*time.Second, "telemetry flushed", func() bool { return ra.a.Status().Buffered == 0 })
	checkTelemetry(t, c, res)
	if res.TelemetrySamples == 0 {
		t.Fatal("no telemetry samples")
	}
	waitFor(t, 10*time.Second, "a heartbeat", func() bool { return c.beats.Load() > 0 })
	st := ra.a.Status()
	if st.State != StateIdle || st.RunsDone != 1 {
		t.Errorf("status after run: %+v", st)
	}
	// The model is now cached: a second run does not download again.
	if !ra.a.cache.Has(spec.Model.SHA256) {
		t.Error("model not in the artifact cache")
	}
}

func TestAgentRefusesBadAssignments(t *testing.T) {
	ns := testenv.NATS(t)
	c := newCoord(t, ns.ClientURL(), 5*time.Second)
	spec := smokeSpec(t)
	url := "http://127.0.0.1:1/model.gguf"
	ra := startAgent(t, Config{NATSURL: ns.ClientURL(), Name: "host-2"})

	good := assignment(spec, "host-2", 10, 1, url)
	signedByOther := func() []byte {
		_, priv, _ := protocol.GenerateSigningKey()
		d, _ := protocol.SignAssignment(good, priv)
		return d
	}()
	unsigned := func() []byte {
		payload, _ := protocol.Encode(good)
		d, _ := json.Marshal(map[string]any{"v": 1, "assignment": json.RawMessage(payload)})
		return d
	}()
	hugeSpec := spec.Clone()
	hugeSpec.Model.Size = 1 << 50
	huge := assignment(hugeSpec, "host-2", 12, 1, url)
	badProfile := spec.Clone()
	badProfile.Matrix.Profiles = []string{"no-such-phone"}
	wrongDevice := assignment(spec, "someone-else", 14, 1, url)

	for _, tc := range []struct {
		name string
		send func() *protocol.AssignReply
		code string
		in   string
	}{
		{"garbage", func() *protocol.AssignReply { return c.sendRaw("host-2", []byte("{not json")) }, protocol.RefuseMalformed, "malformed"},
		{"unsigned", func() *protocol.AssignReply { return c.sendRaw("host-2", unsigned) }, protocol.RefuseMalformed, "sig"},
		{"wrong key", func() *protocol.AssignReply { return c.sendRaw("host-2", signedByOther) }, protocol.RefuseBadSignature, "signature"},
		{"too much memory", func() *protocol.AssignReply { return c.assign(huge) }, protocol.RefuseInsufficientRAM, "RAM"},
		{"unknown profile", func() *protocol.AssignReply { return c.assign(assignment(badProfile, "host-2", 13, 1, url)) }, protocol.RefuseUnsupported, "no-such-phone"},
		{"wrong device", func() *protocol.AssignReply {
			d, _ := protocol.SignAssignment(wrongDevice, c.priv)
			return c.sendRaw("host-2", d)
		}, protocol.RefuseWrongDevice, "someone-else"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := tc.send()
			if rep.Accepted || rep.Code != tc.code || !strings.Contains(rep.Reason, tc.in) {
				t.Fatalf("reply %+v, want refusal %s mentioning %q", rep, tc.code, tc.in)
			}
		})
	}
	if st := ra.a.Status(); st.State != StateIdle || !st.Registered {
		t.Fatalf("agent unhealthy after bad input: %+v", st)
	}
}

func TestAgentCancelAndBusy(t *testing.T) {
	model := trainedModel(t)
	ns := testenv.NATS(t)
	c := newCoord(t, ns.ClientURL(), 5*time.Second)
	url, spec := modelServer(t, model)
	spec.Repetitions = 1000
	ra := startAgent(t, Config{NATSURL: ns.ClientURL(), Name: "host-3"})

	if rep := c.assign(assignment(spec, "host-3", 20, 3, url)); !rep.Accepted {
		t.Fatalf("refused: %+v", rep)
	}
	waitFor(t, 30*time.Second, "run running", func() bool { return ra.a.Status().RunState == protocol.RunStateRunning })
	if rep := c.assign(assignment(spec, "host-3", 20, 3, url)); !rep.Accepted {
		t.Errorf("redelivered assignment refused: %+v", rep)
	}
	if rep := c.assign(assignment(spec, "host-3", 21, 1, url)); rep.Accepted || rep.Code != protocol.RefuseBusy {
		t.Errorf("second run: %+v, want busy", rep)
	}
	if rep := c.cancel("host-3", 20, 2); rep.Known {
		t.Error("cancel with a stale token was applied")
	}
	if rep := c.cancel("host-3", 20, 3); !rep.Known {
		t.Fatal("cancel not known")
	}
	res := c.waitResult(t, 20, 30*time.Second)
	if res.Outcome != protocol.OutcomeCancelled || res.Token != 3 {
		t.Fatalf("result %+v", res)
	}
	waitFor(t, 5*time.Second, "idle", func() bool { return ra.a.Status().State == StateIdle })
}

// TestAgentSurvivesNATSRestartMidRun restarts the NATS server while a run
// streams telemetry: the agent reconnects, the run completes, and every
// telemetry batch arrives exactly once with no gap in sequence numbers.
func TestAgentSurvivesNATSRestartMidRun(t *testing.T) {
	model := trainedModel(t)
	storeDir := t.TempDir()
	ns, err := testenv.StartNATS(storeDir, -1)
	if err != nil {
		t.Fatal(err)
	}
	port := ns.Addr().(*net.TCPAddr).Port
	var cur atomic.Pointer[server.Server]
	cur.Store(ns)
	t.Cleanup(func() { cur.Load().Shutdown() })
	c := newCoord(t, ns.ClientURL(), 20*time.Second)
	url, spec := modelServer(t, model)
	spec.Repetitions = 40 // long enough to span the restart
	if raceEnabled {
		spec.Repetitions = 16 // the race detector slows the model ~10x; still spans the restart
	}
	ra := startAgent(t, Config{NATSURL: ns.ClientURL(), Name: "host-4", BatchInterval: 50 * time.Millisecond})

	if rep := c.assign(assignment(spec, "host-4", 30, 5, url)); !rep.Accepted {
		t.Fatalf("refused: %+v", rep)
	}
	waitFor(t, 30*time.Second, "telemetry flowing", func() bool {
		st := ra.a.Status()
		return st.RunState == protocol.RunStateRunning && st.Published > 1
	})
	ns.Shutdown()
	ns.WaitForShutdown()
	// The run keeps going; its batches go to the disk buffer.
	waitFor(t, 30*time.Second, "telemetry spilled to disk while NATS is down", func() bool { return ra.a.Status().Buffered > 0 })
	ns2, err := testenv.StartNATS(storeDir, port)
	if err != nil {
		t.Fatal(err)
	}
	cur.Store(ns2)
	res := c.waitResult(t, 30, 90*time.Second)
	if res.Outcome != protocol.OutcomeSucceeded {
		t.Fatalf("result %+v", res)
	}
	waitFor(t, 10*time.Second, "buffer drained", func() bool { return ra.a.Status().Buffered == 0 })
	checkTelemetry(t, c, res)
	// One hello at start, one after the reconnect (the reconnect's may come
	// after the result: wait for it).
	waitFor(t, 10*time.Second, "a hello after the reconnect", func() bool { return c.hellos.Load() >= 2 })
}

// TestAgentStopsWhenCutOff: when the coordinator stops answering for longer
// than the TTL, the agent stops the run and does not report into the lease.
func TestAgentStopsWhenCutOff(t *testing.T) {
	model := trainedModel(t)
	ns := testenv.NATS(t)
	c := newCoord(t, ns.ClientURL(), 800*time.Millisecond)
	url, spec := modelServer(t, model)
	spec.Repetitions = 1000
	ra := startAgent(t, Config{NATSURL: ns.ClientURL(), Name: "host-5"})
	if rep := c.assign(assignment(spec, "host-5", 40, 9, url)); !rep.Accepted {
		t.Fatalf("refused: %+v", rep)
	}
	waitFor(t, 30*time.Second, "running", func() bool { return ra.a.Status().RunState == protocol.RunStateRunning })
	c.silent.Store(true)
	waitFor(t, 10*time.Second, "run stopped", func() bool { return ra.a.Status().RunID == 0 })
	// A report would have been handed to the outbox before the run
	// stopped; once the outbox is flushed (NATS is up, only heartbeats go
	// unanswered) it would be in the stream.
	ra.a.mu.Lock()
	ob := ra.a.outbox
	ra.a.mu.Unlock()
	fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ob.Flush(fctx); err != nil {
		t.Fatalf("outbox flush: %v", err)
	}
	for _, r := range c.results() {
		if r.RunID == 40 {
			t.Fatalf("agent reported into a lost lease: %+v", r)
		}
	}
	// Once the coordinator answers again the agent registers again.
	c.silent.Store(false)
	waitFor(t, 10*time.Second, "re-registered", func() bool { return ra.a.Status().State == StateIdle })
}

// TestAgentGracefulShutdownReportsRun: stopping the agent mid-run aborts the
// run and reports it as aborted (the coordinator requeues it), then Run
// returns.
func TestAgentGracefulShutdownReportsRun(t *testing.T) {
	model := trainedModel(t)
	ns := testenv.NATS(t)
	c := newCoord(t, ns.ClientURL(), 5*time.Second)
	url, spec := modelServer(t, model)
	spec.Repetitions = 1000
	ra := startAgent(t, Config{NATSURL: ns.ClientURL(), Name: "host-6"})
	if rep := c.assign(assignment(spec, "host-6", 50, 2, url)); !rep.Accepted {
		t.Fatalf("refused: %+v", rep)
	}
	waitFor(t, 30*time.Second, "running", func() bool { return ra.a.Status().RunState == protocol.RunStateRunning })
	ra.stop()
	select {
	case err := <-ra.done:
		if err != nil {
			t.Fatal(err)
		}
		ra.done <- nil
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not shut down")
	}
	res := c.waitResult(t, 50, 5*time.Second)
	if res.Outcome != protocol.OutcomeAborted || !strings.Contains(res.Error, "shutting down") {
		t.Fatalf("result %+v", res)
	}
	if st := ra.a.Status(); st.State != StateStopped {
		t.Fatalf("state %s", st.State)
	}
}
