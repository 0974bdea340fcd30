package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	secret string // API token (reads of fencing tokens need one)
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
	f.secret = secret
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

	proxy := startFaultProxy(t, f.natsHP)
	agentArgs := func(natsURL string) []string {
		return []string{"agent", "--nats-url", natsURL, "--name", device, "--cache-dir", cache, "--labels", "pool=" + device,
			"--batch-ms", "100", "--no-thermal-gate", "--threads", "1", "--log-level", "debug"}
	}
	a1 := startAgentProcess(t, bin, "first", agentArgs(proxy.url())...)
	pollUntil(t, 30*time.Second, "first agent registered", func() (bool, string) {
		d, err := st.GetDevice(ctx, device)
		return err == nil && d.State == "online", fmt.Sprintf("device %+v err %v; %s", d, err, a1.status())
	})

	set, err := f.cl.TriggerRuns(ctx, &client.TriggerRequest{Suite: "kill", // no build: the agent's embedded one
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
		var m *protocol.MsgID
		if err == nil {
			m, err = protocol.ParseMsgID(msgID)
		}
		if err != nil || m.Kind != protocol.MsgIDTelemetry || m.DeviceID != device || m.RunID != id || m.Token != t1 || !strings.HasSuffix(rec, ".d") {
			t.Fatalf("buffer record %s left by the killed agent: msg id %q, err %v; want a whole telemetry batch t/%s/%d/%d/<seq>/<nonce>", rec, msgID, err, device, id, t1)
		}
		spilledSeqs = append(spilledSeqs, m.Seq)
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
		// before the TTL ran out. That is certain when the hello came
		// within the device TTL (2 s) less a heartbeat interval of the
		// kill; a process start slower than that on a loaded host may
		// find the lease expired already, which is also right.
		wantT1 = "agent_restarted"
		if wire.hellosBetween(device, killedAt, killedAt.Add(1300*time.Millisecond)) == 0 {
			if st := f.leaseEnd(t, id, t1); st == "expired" {
				t.Logf("the restarted agent said hello more than 1.3 s after the kill: attempt 1's lease expired first")
				wantT1 = "expired"
			}
		}
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
