package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/api/client"
	"github.com/lesfarm/lesfarm/coordinator/coordinatortest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestE2EAgentProcessSIGKILL proves that a killed agent process loses
// nothing. It builds the real lesfarm binary, runs `lesfarm agent` as a
// child process against a real coordinator (Postgres, NATS with JetStream,
// REST API), triggers a run through the API, and SIGKILLs the agent mid-run:
//
//   - connected: killed while streaming telemetry; restarted after the
//     coordinator noticed the loss;
//   - partitioned: its network is cut first (through a TCP proxy the test
//     owns), so it spills telemetry of the doomed attempt to its on-disk
//     buffer, then killed; restarted after the loss was noticed;
//   - fast-restart: killed while streaming and restarted at once, as a
//     supervisor would, before the TTL runs out.
//
// Then it checks the design's invariants (docs/protocol.md, "Liveness,
// leases and fencing"; store.endLease; store.InsertTelemetry):
//
//  1. the coordinator fails the attempt over: it marks the device lost after
//     its TTL (attempt 1's lease ends "expired"), or the restarted agent's
//     hello says it no longer holds the run ("agent_restarted"); the token
//     is cleared and the attempt's partial samples and results are deleted;
//  2. the old fencing token is rejected: a zombie's telemetry batch and
//     result published with it, both while the run waits in the queue and
//     after attempt 2 succeeded (and, partitioned, the killed agent's own
//     spilled batches, drained by the restarted process), are terminated by
//     ingest as stale and change nothing;
//  3. the restarted process (same name, same cache dir, so the same disk
//     buffer) opens its buffer cleanly, drains it, and completes the run
//     as attempt 2;
//  4. the final rows are exactly attempt 2's: one result per config, and
//     the samples table holds precisely the (seq, idx) rows of the batches
//     attempt 2 published, with attempt 2's values, as many as its result
//     says it produced, and as the spec implies.
func TestE2EAgentProcessSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level agent kill test skipped in -short mode")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIP: the `go` tool is not on PATH, so the lesfarm binary cannot be built for the SIGKILL test")
	}
	bin := buildLesfarm(t, goBin)
	f := newKillFarm(t)
	if err := bin.wait(); err != nil {
		t.Fatal(err)
	}
	for _, sc := range []killScenario{
		{name: "connected"},
		{name: "partitioned", partition: true},
		{name: "fast-restart", fastRestart: true},
	} {
		t.Run(sc.name, func(t *testing.T) { f.run(t, bin.path, sc) })
	}
}

// killSpecYAML is the job: two configs, the cooldown makes a run last a
// few seconds so the kill lands mid-run, and retries allow a requeue.
const killSpecYAML = `name: kill
suite: kill
description: SIGKILL end-to-end test of the agent process.
model:
  name: kill-moe-f16.gguf
  sha256: %s
  size: %d
prompts:
  set: smoke
prefill_tokens: 8
decode_tokens: 8
matrix:
  modes: [resident, on-demand]
  budgets: [50%%]
warmup: 0
repetitions: 4
cooldown: 300ms
timeout: 2m
retry:
  max_attempts: 3
`

type killFarm struct {
	c      *coordinator.Coordinator
	base   string // http://host:port
	cl     *client.Client
	natsHP string // host:port of NATS
	nc     *nats.Conn
	js     jetstream.JetStream
	spec   *jobs.Spec
	logs   *lockedBuffer
}

// newKillFarm starts a coordinator with short liveness timings (device TTL
// 2 s, lease TTL 3 s so the lost-device path requeues first), uploads a
// synthetic MoE through the REST API and stores the "kill" suite.
func newKillFarm(t *testing.T) *killFarm {
	t.Helper()
	ctx := context.Background()
	dbURL := testenv.MigratedPostgresURL(t)
	ns := testenv.NATS(t)
	logs := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("coordinator log (tail):\n%s", tail(logs.String(), 120))
		}
	})
	c := startCoordinator(t, coordinatortest.Config(t, coordinator.Config{Name: "kill-c",
		ArtifactDir: t.TempDir(), LeaseTTL: 3 * time.Second, NoRegress: true,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}, dbURL, ns.ClientURL()))
	f := &killFarm{c: c, base: "http://" + c.HTTPAddr(), logs: logs, natsHP: strings.TrimPrefix(ns.ClientURL(), "nats://")}
	secret, _, err := c.Store().CreateAPIToken(ctx, "kill-test")
	if err != nil {
		t.Fatal(err)
	}
	if f.cl, err = client.New(f.base, secret); err != nil {
		t.Fatal(err)
	}
	if f.nc, err = nats.Connect(ns.ClientURL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.nc.Close)
	if f.js, err = jetstream.New(f.nc); err != nil {
		t.Fatal(err)
	}

	path, sum, size := writeKillModel(t)
	mf, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	if _, _, err := f.cl.UploadArtifact(ctx, mf, size, filepath.Base(path), sum); err != nil {
		t.Fatalf("upload the model through the API: %v", err)
	}
	text := fmt.Sprintf(killSpecYAML, sum, size)
	if f.spec, err = jobs.Parse([]byte(text), jobs.FormatYAML); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]string{"spec_text": text})
	req, _ := http.NewRequest(http.MethodPut, f.base+"/v1/suites/kill", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("PUT /v1/suites/kill: %s: %s", resp.Status, b)
	}
	return f
}

// writeKillModel writes a small synthetic MoE (so the test needs nothing
// from ../shared) and returns its path, sha256 and size.
func writeKillModel(t *testing.T) (string, string, int64) {
	t.Helper()
	cfg := model.SynthConfig{Arch: "qwen3moe", Layers: 4, Experts: 16, ExpertsUsed: 4, Hidden: 128, ExpertFFN: 128,
		Heads: 4, KVHeads: 2, Vocab: 1024, Context: 256, Type: tensor.F16, Seed: 11}
	if err := cfg.Defaults(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kill-moe-f16.gguf")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	w := bufio.NewWriter(io.MultiWriter(out, h))
	if err := model.WriteSynthetic(w, cfg); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, hex.EncodeToString(h.Sum(nil)), st.Size()
}

// killScenario is one way of killing and restarting the agent.
type killScenario struct {
	name string
	// partition cuts the agent's network before the kill, so the doomed
	// attempt's telemetry is in its disk buffer.
	partition bool
	// fastRestart restarts the agent right after the kill instead of after
	// the coordinator noticed the loss.
	fastRestart bool
}

// run runs one kill-and-restart cycle on its own device.
func (f *killFarm) run(t *testing.T, bin string, sc killScenario) {
	ctx := context.Background()
	st := f.c.Store()
	name, partition := sc.name, sc.partition
	device := "kill-" + name
	cache := t.TempDir()
	bufDir := filepath.Join(cache, "telemetry")
	configs := f.spec.Expand()
	wantSamples := int64(len(f.spec.ResolvePrompts()) * f.spec.DecodeTokens * len(configs) * (f.spec.Warmup + f.spec.Repetitions))
	wire := f.tap(t)

	proxy := startNATSProxy(t, f.natsHP)
	agentArgs := func(natsURL string) []string {
		return []string{"agent", "--nats-url", natsURL, "--name", device, "--cache-dir", cache, "--labels", "pool=" + device,
			"--batch-ms", "100", "--no-thermal-gate", "--threads", "1", "--log-level", "debug"}
	}
	a1 := startAgentProcess(t, bin, "first", agentArgs("nats://"+proxy.addr())...)
	pollUntil(t, 30*time.Second, "first agent registered", func() (bool, string) {
		d, err := st.GetDevice(ctx, device)
		return err == nil && d.State == "online", fmt.Sprintf("device %+v err %v; %s", d, err, a1.status())
	})

	set, err := f.cl.TriggerRuns(ctx, &client.TriggerRequest{Suite: "kill", Build: "kill-" + name,
		Devices: &jobs.Selector{Labels: map[string]string{"pool": device}}, Fanout: true})
	if err != nil {
		t.Fatalf("trigger through the API: %v", err)
	}
	if len(set.Trigger.RunIDs) != 1 {
		t.Fatalf("trigger made runs %v, want one on %s", set.Trigger.RunIDs, device)
	}
	id := set.Trigger.RunIDs[0]

	// Mid-run: running on this agent, and some of its telemetry in Postgres.
	var first api.RunDetail
	pollUntil(t, 30*time.Second, "run running with telemetry ingested", func() (bool, string) {
		first = f.getRun(t, id)
		n, _ := st.CountSamples(ctx, id)
		return first.State == store.RunRunning && first.DeviceID == device && n > 0,
			fmt.Sprintf("run state %s device %q attempts %d samples %d; %s", first.State, first.DeviceID, first.Attempts, n, a1.status())
	})
	t1 := first.Token
	if first.Attempts != 1 || t1 == 0 {
		t.Fatalf("first attempt: attempts %d token %d", first.Attempts, t1)
	}

	if partition {
		// Cut the agent off; the telemetry it keeps producing must go to
		// its disk buffer. Kill it as soon as some has.
		proxy.cut()
		pollUntil(t, 15*time.Second, "telemetry spilled to the disk buffer", func() (bool, string) {
			recs, _ := bufferFiles(bufDir)
			return len(recs) > 0, a1.status()
		})
	}
	if r := f.getRun(t, id); r.State != store.RunRunning || r.Token != t1 {
		t.Fatalf("the run ended before the kill (state %s, token %d): make the job longer", r.State, r.Token)
	}
	a1.kill(t)
	killedAt := time.Now()
	// One process, one connection, one hello: a second one would report no
	// run while the coordinator may be assigning one, and fail it over.
	if n := wire.hellosBetween(device, time.Time{}, killedAt); n != 1 {
		t.Fatalf("the first agent sent %d hellos on one connection, want 1", n)
	}
	spilled, torn := bufferFiles(bufDir)
	t.Logf("SIGKILLed agent pid %d mid-run (run %d token %d); its disk buffer holds %d records (%d torn .tmp)",
		a1.cmd.Process.Pid, id, t1, len(spilled), torn)
	if partition && len(spilled) == 0 {
		t.Fatal("the partitioned agent left no buffered records")
	}
	// Every record the SIGKILL left on disk is whole (CRC) and is a
	// telemetry batch of the killed attempt (it never reported a result).
	var spilledSeqs []uint64
	for _, rec := range spilled {
		msgID, err := readBufferRecord(filepath.Join(bufDir, rec))
		var run, tok int64
		var seq uint64
		if err == nil {
			_, err = fmt.Sscanf(msgID, "t/%d/%d/%d", &run, &tok, &seq)
		}
		if err != nil || run != id || tok != t1 || !strings.HasSuffix(rec, ".d") {
			t.Fatalf("buffer record %s left by the killed agent: msg id %q, err %v; want a whole telemetry batch t/%d/%d/<seq>", rec, msgID, err, id, t1)
		}
		spilledSeqs = append(spilledSeqs, seq)
	}

	restartAt := time.Now()
	staleBeforeRestart := f.c.IngestStats().Stale
	var a2 *agentProcess
	if sc.fastRestart {
		a2 = startAgentProcess(t, bin, "restarted", agentArgs("nats://"+f.natsHP)...)
	} else {
		f.waitRequeued(t, id, t1, device, killedAt)
		restartAt = time.Now()
		staleBeforeRestart = f.c.IngestStats().Stale
		// 3. The restarted process, same identity and cache, finishes the
		// run. It connects directly: the partition is not healed for the
		// dead one.
		a2 = startAgentProcess(t, bin, "restarted", agentArgs("nats://"+f.natsHP)...)
	}
	var done api.RunDetail
	pollUntil(t, 60*time.Second, "run succeeded after the restart", func() (bool, string) {
		done = f.getRun(t, id)
		if store.TerminalState(done.State) {
			return true, ""
		}
		return false, fmt.Sprintf("run state %s token %d attempts %d progress %.2f; %s", done.State, done.Token, done.Attempts, done.Progress, a2.status())
	})
	restartToSuccess := time.Since(restartAt).Round(10 * time.Millisecond)
	if done.State != store.RunSucceeded {
		t.Fatalf("run ended %s (%q), want succeeded", done.State, done.Error)
	}
	t2 := done.Token
	if done.Attempts != 2 || t2 <= t1 || done.DeviceID != device {
		t.Fatalf("finished run: attempts %d token %d device %s; want attempt 2 with a token newer than %d on %s",
			done.Attempts, t2, done.DeviceID, t1, device)
	}
	wantT1 := "expired"
	if sc.fastRestart {
		// The restarted agent's hello said it holds no run: failed over
		// before the TTL ran out.
		wantT1 = "agent_restarted"
	}
	f.checkLeases(t, id, t1, wantT1, t2)

	// 4. Exactly attempt 2's rows.
	if len(done.Results) != len(configs) {
		t.Fatalf("%d results, want one per config (%d)", len(done.Results), len(configs))
	}
	for i, r := range done.Results {
		if r.ConfigIndex != i || r.ConfigKey != configs[i].Key || r.Error != "" || r.Repetitions != f.spec.Repetitions || r.DeviceID != device {
			t.Fatalf("result %d: %+v, want config %q with %d repetitions and no error", i, r, configs[i].Key, f.spec.Repetitions)
		}
	}
	res := wire.result(t, id, t2)
	if res == nil {
		t.Fatalf("attempt 2's result (token %d) was never published", t2)
	}
	if int64(res.TelemetrySamples) != wantSamples || res.TelemetryDropped != 0 {
		t.Fatalf("attempt 2 reports %d samples (%d dropped), the spec implies %d", res.TelemetrySamples, res.TelemetryDropped, wantSamples)
	}
	pollUntil(t, 30*time.Second, "attempt 2's samples ingested", func() (bool, string) {
		n, err := st.CountSamples(ctx, id)
		return err == nil && n >= wantSamples, fmt.Sprintf("%d of %d samples (err %v); ingest %+v", n, wantSamples, err, f.c.IngestStats())
	})
	want := wire.samples(t, id, t2, res.TelemetryBatches)
	if int64(len(want)) != wantSamples {
		t.Fatalf("attempt 2 published %d samples on the wire, its result says %d", len(want), wantSamples)
	}
	exactlyAttempt2 := func(when string) {
		t.Helper()
		got := f.sampleRows(t, id)
		if len(got) != len(want) {
			t.Fatalf("%s: samples table holds %d rows of run %d, attempt 2 published %d", when, len(got), id, len(want))
		}
		for k, w := range want {
			if g, ok := got[k]; !ok || g != w {
				t.Fatalf("%s: sample (seq %d, idx %d): stored %+v (present %v), attempt 2 published %+v", when, k[0], k[1], g, ok, w)
			}
		}
	}
	exactlyAttempt2("after the run succeeded")

	// The disk buffer of the killed process was reused and drained: its
	// records went out with the dead token and were rejected as stale.
	pollUntil(t, 20*time.Second, "disk buffer drained and stale batches rejected", func() (bool, string) {
		recs, torn := bufferFiles(bufDir)
		s := f.c.IngestStats()
		return len(recs) == 0 && torn == 0 && f.pendingMsgs(t) == 0 && s.Stale >= staleBeforeRestart+uint64(len(spilled)),
			fmt.Sprintf("buffer %d records %d torn; ingest %+v (stale before restart %d, spilled %d)", len(recs), torn, s, staleBeforeRestart, len(spilled))
	})
	redrained := map[uint64]bool{}
	for _, seq := range wire.batchesSince(id, restartAt, t1) {
		redrained[seq] = true
	}
	for _, seq := range spilledSeqs {
		if !redrained[seq] {
			t.Fatalf("buffered batch seq %d of the killed attempt was not re-published by the restarted agent (re-published: %v)", seq, redrained)
		}
	}
	exactlyAttempt2("after the disk buffer drain")

	// 2 (again). A zombie of attempt 1 reporting after attempt 2 succeeded
	// changes nothing either.
	f.rejectZombie(t, id, t1, device, configs, "late")
	if r := f.getRun(t, id); r.State != store.RunSucceeded || r.Token != t2 || len(r.Results) != len(configs) {
		t.Fatalf("a late stale-token result changed the finished run: state %s token %d results %d", r.State, r.Token, len(r.Results))
	}
	exactlyAttempt2("after a late zombie batch")
	if n := wire.hellosBetween(device, restartAt, time.Now()); n != 1 {
		t.Fatalf("the restarted agent sent %d hellos on one connection, want 1", n)
	}
	if bad := a2.logLines("level=ERROR", "corrupt"); len(bad) > 0 {
		t.Fatalf("the restarted agent logged errors:\n%s", strings.Join(bad, "\n"))
	}
	a2.stop(t)
	t.Logf("run %d: attempt 1 (token %d) killed, attempt 2 (token %d) complete with %d results and %d samples; %d buffered batches of the dead attempt rejected; restart to success %v",
		id, t1, t2, len(done.Results), wantSamples, len(spilled), restartToSuccess)
}

// waitRequeued waits until the coordinator marked the device lost and
// requeued the run, then checks the lost attempt was fenced off and its
// rows deleted, and that a zombie reporting with its token changes nothing.
func (f *killFarm) waitRequeued(t *testing.T, id, t1 int64, device string, killedAt time.Time) {
	t.Helper()
	ctx := context.Background()
	st := f.c.Store()
	var queued api.RunDetail
	pollUntil(t, 15*time.Second, "device lost and run requeued", func() (bool, string) {
		d, _ := st.GetDevice(ctx, device)
		queued = f.getRun(t, id)
		return d != nil && d.State == "lost" && queued.State == store.RunQueued,
			fmt.Sprintf("device %+v; run state %s token %d attempts %d error %q", d, queued.State, queued.Token, queued.Attempts, queued.Error)
	})
	t.Logf("requeued %v after the kill: %q", time.Since(killedAt).Round(10*time.Millisecond), queued.Error)
	if queued.Token != 0 || queued.Attempts != 1 || queued.Error == "" {
		t.Fatalf("requeued run: token %d (want cleared) attempts %d error %q", queued.Token, queued.Attempts, queued.Error)
	}
	if out := leaseOutcome(t, st, t1); out != "expired" {
		t.Fatalf("the killed attempt's lease (token %d) ended %q, want expired", t1, out)
	}
	f.wantNoRows(t, id, "after the requeue")

	// 2. The stale token is rejected: a zombie's batch and result change
	// nothing (the store and ingest both fence on the token).
	f.rejectZombie(t, id, t1, device, f.spec.Expand(), "queued")
	if err := st.AckAssignment(ctx, id, t1); !errors.Is(err, store.ErrStaleToken) {
		t.Fatalf("acking with the killed attempt's token: %v, want ErrStaleToken", err)
	}
	if r := f.getRun(t, id); r.State != store.RunQueued || r.Token != 0 {
		t.Fatalf("a stale-token result moved the run: state %s token %d", r.State, r.Token)
	}
	f.wantNoRows(t, id, "after the zombie's messages")
}

// rejectZombie publishes a zombie's batch and result with the dead token
// and waits until ingest has terminated both as stale.
func (f *killFarm) rejectZombie(t *testing.T, id, token int64, device string, configs []jobs.Config, phase string) {
	t.Helper()
	stale0 := f.c.IngestStats().Stale
	f.publishZombie(t, id, token, device, configs, phase)
	pollUntil(t, 15*time.Second, "zombie telemetry and result processed ("+phase+")", func() (bool, string) {
		s := f.c.IngestStats()
		n := f.pendingMsgs(t)
		return s.Stale >= stale0+2 && n == 0, fmt.Sprintf("ingest %+v, %d messages pending", s, n)
	})
}

func (f *killFarm) getRun(t *testing.T, id int64) api.RunDetail {
	t.Helper()
	var r api.RunDetail
	resp, err := http.Get(fmt.Sprintf("%s/v1/runs/%d", f.base, id))
	if err != nil {
		t.Fatalf("GET run %d: %v", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET run %d: %s %s", id, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("GET run %d: %v", id, err)
	}
	return r
}

// wantNoRows checks the run holds no samples and no results.
func (f *killFarm) wantNoRows(t *testing.T, id int64, when string) {
	t.Helper()
	n, err := f.c.Store().CountSamples(context.Background(), id)
	if err != nil || n != 0 {
		t.Fatalf("%s: run %d has %d samples (err %v), want none: the killed attempt's rows must be gone", when, id, n, err)
	}
	res, err := f.c.Store().ListResults(context.Background(), &store.ListResultsParams{RunID: id, Limit: 10})
	if err != nil || len(res) != 0 {
		t.Fatalf("%s: run %d has %d results (err %v), want none", when, id, len(res), err)
	}
}

// publishZombie publishes what a killed agent that came back would send
// with its dead token: a telemetry batch and a succeeded result.
func (f *killFarm) publishZombie(t *testing.T, id, token int64, device string, configs []jobs.Config, phase string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A seq no attempt reaches, so an accepted zombie batch adds rows.
	tb := &protocol.TelemetryBatch{RunID: id, Token: token, DeviceID: device, Seq: 1 << 20, SentAt: time.Now(),
		Samples: []protocol.Sample{{ConfigIndex: 0, Step: 0, Phase: protocol.PhaseDecode, Pos: 1, Tokens: 1, DurationNS: 4242}}}
	res := &protocol.Result{RunID: id, Token: token, DeviceID: device, Outcome: protocol.OutcomeSucceeded,
		StartedAt: time.Now().Add(-time.Second), FinishedAt: time.Now(), TelemetryBatches: 1, TelemetrySamples: 1}
	for i, c := range configs {
		res.Configs = append(res.Configs, protocol.ConfigResult{ConfigIndex: i, ConfigKey: c.Key, Repetitions: 1, Valid: true})
	}
	for _, m := range []struct {
		subject string
		msg     protocol.Message
	}{{protocol.TelemetrySubject(id), tb}, {protocol.ResultSubject(id), res}} {
		data, err := protocol.Encode(m.msg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.js.Publish(ctx, m.subject, data, jetstream.WithMsgID(fmt.Sprintf("zombie/%d/%d/%s/%s", id, token, phase, m.msg.MessageType()))); err != nil {
			t.Fatalf("publish zombie %s: %v", m.msg.MessageType(), err)
		}
	}
}

// pendingMsgs is the number of messages still in the TELEMETRY and RESULTS
// work queues (ingest removes a message once it is acked or terminated).
func (f *killFarm) pendingMsgs(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n uint64
	for _, name := range []string{protocol.StreamTelemetry, protocol.StreamResults} {
		s, err := f.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n += info.State.Msgs
	}
	return n
}

// checkLeases checks the run's lease history: the killed attempt's lease
// ended with t1Outcome, the last one succeeded, and any lease in between was given back
// without starting the run (an assignment the dead agent could not answer).
func (f *killFarm) checkLeases(t *testing.T, id, t1 int64, t1Outcome string, t2 int64) {
	t.Helper()
	rows, err := f.c.Store().Pool().Query(context.Background(), `SELECT token, outcome, released_at IS NOT NULL FROM leases WHERE run_id = $1 ORDER BY token`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var hist []string
	var tokens []int64
	for rows.Next() {
		var tok int64
		var outcome string
		var released bool
		if err := rows.Scan(&tok, &outcome, &released); err != nil {
			t.Fatal(err)
		}
		hist = append(hist, fmt.Sprintf("%d:%s", tok, outcome))
		tokens = append(tokens, tok)
		switch {
		case !released:
			t.Fatalf("lease %d of run %d was never released (history %v)", tok, id, hist)
		case tok == t1 && outcome != t1Outcome, tok == t2 && outcome != "succeeded":
			t.Fatalf("lease %d ended %q (history %v)", tok, outcome, hist)
		case tok != t1 && tok != t2 && outcome != "unreachable" && outcome != "busy":
			t.Fatalf("unexpected lease %d %q of run %d (history %v)", tok, outcome, id, hist)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(tokens) < 2 || tokens[0] != t1 || tokens[len(tokens)-1] != t2 {
		t.Fatalf("lease history of run %d: %v, want %d first and %d last", id, hist, t1, t2)
	}
	t.Logf("lease history of run %d: %v", id, hist)
}

func leaseOutcome(t *testing.T, st *store.Store, token int64) string {
	t.Helper()
	var out string
	if err := st.Pool().QueryRow(context.Background(), `SELECT outcome FROM leases WHERE token = $1 AND released_at IS NOT NULL`, token).Scan(&out); err != nil {
		t.Fatalf("lease %d: %v", token, err)
	}
	return out
}

// sampleRow is the part of a stored sample compared with the wire.
type sampleRow struct {
	Cfg, Rep, Step, Pos int
	DurationNS          int64
	BytesRead           int64
}

func (f *killFarm) sampleRows(t *testing.T, id int64) map[[2]int]sampleRow {
	t.Helper()
	rows, err := f.c.Store().Pool().Query(context.Background(),
		`SELECT seq, idx, config_index, repetition, step, pos, duration_ns, bytes_read FROM samples WHERE run_id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[[2]int]sampleRow{}
	for rows.Next() {
		var seq int32
		var idx, cfg, rep int16
		var step, pos int32
		var r sampleRow
		if err := rows.Scan(&seq, &idx, &cfg, &rep, &step, &pos, &r.DurationNS, &r.BytesRead); err != nil {
			t.Fatal(err)
		}
		r.Cfg, r.Rep, r.Step, r.Pos = int(cfg), int(rep), int(step), int(pos)
		out[[2]int{int(seq), int(idx)}] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// wireTap records every telemetry batch and result published on NATS (a
// plain subscriber sees the JetStream publishes too), with arrival time.
type wireTap struct {
	mu      sync.Mutex
	batches []tappedBatch
	results []*protocol.Result
	hellos  []tappedHello
}

type tappedHello struct {
	at     time.Time
	device string
}

type tappedBatch struct {
	at time.Time
	b  *protocol.TelemetryBatch
}

func (f *killFarm) tap(t *testing.T) *wireTap {
	t.Helper()
	w := &wireTap{}
	sub, err := f.nc.Subscribe("lesfarm.v1.>", func(m *nats.Msg) {
		switch {
		case strings.HasPrefix(m.Subject, "lesfarm.v1.device.") && strings.HasSuffix(m.Subject, ".hello"):
			if h, err := protocol.DecodeHello(m.Data); err == nil {
				w.mu.Lock()
				w.hellos = append(w.hellos, tappedHello{at: time.Now(), device: h.DeviceID})
				w.mu.Unlock()
			}
		case strings.HasPrefix(m.Subject, "lesfarm.v1.telemetry."):
			if b, err := protocol.DecodeTelemetry(m.Data); err == nil {
				w.mu.Lock()
				w.batches = append(w.batches, tappedBatch{at: time.Now(), b: b})
				w.mu.Unlock()
			}
		case strings.HasPrefix(m.Subject, "lesfarm.v1.result."):
			if r, err := protocol.DecodeResult(m.Data); err == nil {
				w.mu.Lock()
				w.results = append(w.results, r)
				w.mu.Unlock()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return w
}

func (w *wireTap) result(t *testing.T, id, token int64) *protocol.Result {
	t.Helper()
	var found *protocol.Result
	pollUntil(t, 10*time.Second, "result seen on the wire", func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, r := range w.results {
			if r.RunID == id && r.Token == token {
				found = r
			}
		}
		return found != nil, fmt.Sprintf("%d results seen", len(w.results))
	})
	return found
}

// samples returns the samples attempt token published, keyed (seq, idx).
// Seqs must run 0..batches-1 without gaps, and a batch seen twice (a
// re-send) must be identical.
func (w *wireTap) samples(t *testing.T, id, token int64, batches uint64) map[[2]int]sampleRow {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	bySeq := map[uint64]*protocol.TelemetryBatch{}
	for _, tb := range w.batches {
		b := tb.b
		if b.RunID != id || b.Token != token {
			continue
		}
		if prev, ok := bySeq[b.Seq]; ok && len(prev.Samples) != len(b.Samples) {
			t.Fatalf("batch seq %d of token %d seen twice with different samples", b.Seq, token)
		}
		bySeq[b.Seq] = b
	}
	seqs := make([]uint64, 0, len(bySeq))
	for s := range bySeq {
		seqs = append(seqs, s)
	}
	slices.Sort(seqs)
	if uint64(len(seqs)) != batches || (len(seqs) > 0 && seqs[len(seqs)-1] != batches-1) {
		t.Fatalf("attempt %d published batch seqs %v, its result says %d batches", token, seqs, batches)
	}
	out := map[[2]int]sampleRow{}
	for _, s := range seqs {
		for i, smp := range bySeq[s].Samples {
			out[[2]int{int(s), i}] = sampleRow{Cfg: smp.ConfigIndex, Rep: smp.Repetition, Step: smp.Step, Pos: smp.Pos,
				DurationNS: smp.DurationNS, BytesRead: smp.BytesRead}
		}
	}
	return out
}

// hellosBetween counts the hellos of device seen in [from, to).
func (w *wireTap) hellosBetween(device string, from, to time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, h := range w.hellos {
		if h.device == device && !h.at.Before(from) && h.at.Before(to) {
			n++
		}
	}
	return n
}

// batchesSince returns the (token, seq) of batches of the run with the
// given token seen after since.
func (w *wireTap) batchesSince(id int64, since time.Time, token int64) []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []uint64
	for _, tb := range w.batches {
		if tb.b.RunID == id && tb.b.Token == token && tb.at.After(since) {
			out = append(out, tb.b.Seq)
		}
	}
	return out
}

// bufferFiles lists the record files of an agent's telemetry buffer and
// counts torn temporary files.
func bufferFiles(dir string) (records []string, torn int) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0
	}
	for _, de := range des {
		switch n := de.Name(); {
		case strings.HasSuffix(n, ".tmp"):
			torn++
		case strings.HasSuffix(n, ".d"), strings.HasSuffix(n, ".s"):
			records = append(records, n)
		}
	}
	return records, torn
}

// readBufferRecord checks one record file of the agent's disk buffer
// (agent/telemetry.Buffer: u32 subject length, subject, u32 msg id length,
// msg id, data, u32 CRC-32 of everything before) without touching it, and
// returns its msg id.
func readBufferRecord(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if len(b) < 12 {
		return "", errors.New("short record")
	}
	body := b[:len(b)-4]
	if crc32.ChecksumIEEE(body) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return "", errors.New("CRC mismatch: torn record")
	}
	n := int(binary.LittleEndian.Uint32(body))
	if n > len(body)-8 {
		return "", errors.New("bad subject length")
	}
	body = body[4+n:]
	m := int(binary.LittleEndian.Uint32(body))
	if m > len(body)-4 {
		return "", errors.New("bad msg id length")
	}
	return string(body[4 : 4+m]), nil
}

// lesfarmBuild is the lesfarm binary being built in the background.
type lesfarmBuild struct {
	path string
	done chan struct{}
	err  error
	took time.Duration
}

func (b *lesfarmBuild) wait() error { <-b.done; return b.err }

// sharedBuild is the one lesfarm binary of this test process: the
// process-level tests (agent kill, agent restart, serve kill) share it
// instead of linking it once each (tens of seconds on a loaded machine).
// TestMain removes its directory.
var sharedBuild struct {
	sync.Mutex
	b   *lesfarmBuild
	dir string
}

// removeSharedBuild deletes the shared binary, after every test ran.
func removeSharedBuild() {
	sharedBuild.Lock()
	defer sharedBuild.Unlock()
	if sharedBuild.b != nil {
		<-sharedBuild.b.done
		os.RemoveAll(sharedBuild.dir)
	}
}

// buildLesfarm returns the build of ./cmd/lesfarm of this module, started
// in the background by the first caller (the Go build cache makes it quick
// after the first time).
func buildLesfarm(t *testing.T, goBin string) *lesfarmBuild {
	t.Helper()
	sharedBuild.Lock()
	defer sharedBuild.Unlock()
	if b := sharedBuild.b; b != nil {
		return b
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := wd
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			t.Fatalf("no go.mod above %s", wd)
		}
		root = parent
	}
	dir, err := os.MkdirTemp("", "lesfarm-agent-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	b := &lesfarmBuild{path: filepath.Join(dir, "lesfarm"), done: make(chan struct{})}
	sharedBuild.b, sharedBuild.dir = b, dir
	go func() {
		defer close(b.done)
		start := time.Now()
		cmd := exec.Command(goBin, "build", "-o", b.path, "./cmd/lesfarm")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build ./cmd/lesfarm in %s: %v\n%s", root, err, out)
			return
		}
		b.took = time.Since(start)
	}()
	return b
}

// agentProcess is a `lesfarm agent` child process.
type agentProcess struct {
	label string
	cmd   *exec.Cmd
	out   *lockedBuffer
	done  chan struct{}
	err   error
}

func startAgentProcess(t *testing.T, bin, label string, args ...string) *agentProcess {
	t.Helper()
	p := &agentProcess{label: label, out: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s agent: %v", label, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s agent (pid %d, %s) output (tail):\n%s", p.label, p.cmd.Process.Pid, p.cmd.ProcessState, tail(p.out.String(), 150))
		}
	})
	return p
}

func (p *agentProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// status is a line for poll diagnostics.
func (p *agentProcess) status() string {
	if p.exited() {
		return fmt.Sprintf("%s agent EXITED (%v)", p.label, p.err)
	}
	return p.label + " agent alive"
}

// kill sends SIGKILL and checks the process died of it.
func (p *agentProcess) kill(t *testing.T) {
	t.Helper()
	if p.exited() {
		t.Fatalf("%s agent exited before the kill: %v", p.label, p.err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s agent did not die of SIGKILL", p.label)
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("%s agent ended with %v, want killed by SIGKILL", p.label, p.cmd.ProcessState)
	}
}

// stop sends SIGTERM and expects a clean exit.
func (p *agentProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s agent did not stop within 20s of SIGTERM", p.label)
	}
	if p.err != nil {
		t.Fatalf("%s agent exited with %v after SIGTERM", p.label, p.err)
	}
}

// logLines returns the output lines containing any of the needles.
func (p *agentProcess) logLines(needles ...string) []string {
	var out []string
	for _, l := range strings.Split(p.out.String(), "\n") {
		for _, n := range needles {
			if strings.Contains(l, n) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// natsProxy forwards TCP to NATS until cut, after which it refuses
// connections: a network partition of the clients behind it.
type natsProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

func startNATSProxy(t *testing.T, target string) *natsProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &natsProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.cut)
	return p
}

func (p *natsProxy) addr() string { return p.ln.Addr().String() }

func (p *natsProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			up.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.wg.Add(2)
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

// cut closes the listener and every forwarded connection and waits for the
// forwarding goroutines. It is idempotent.
func (p *natsProxy) cut() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	p.wg.Wait()
}

// pollUntil polls ok every 25 ms until it holds or within passes; the
// failure shows ok's last diagnostic.
func pollUntil(t *testing.T, within time.Duration, what string, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		done, diag := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", within, what, diag)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers and readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = append([]string{fmt.Sprintf("... (%d earlier lines)", len(ls)-lines)}, ls[len(ls)-lines:]...)
	}
	return strings.Join(ls, "\n")
}
