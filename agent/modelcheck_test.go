package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/agent/device"
	"github.com/lesfarm/lesfarm/coordinator"
	coordartifact "github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/coordinatortest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// countingServer serves data and counts every request it receives.
type countingServer struct {
	url  string
	hits atomic.Int64
}

func newCountingServer(t *testing.T, data []byte) *countingServer {
	t.Helper()
	cs := &countingServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.hits.Add(1)
		http.ServeContent(w, r, "model.gguf", time.Unix(0, 0), bytes.NewReader(data))
	}))
	t.Cleanup(srv.Close)
	cs.url = srv.URL + "/model.gguf"
	return cs
}

// llama4Model writes a GGUF whose header claims an architecture this
// agent does not run.
func llama4Model(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gguf.NewWriter(&buf)
	w.AddKV("general.architecture", "llama4")
	w.AddKV("llama4.expert_count", uint32(16))
	dims := []uint64{256, 8, 16}
	if err := w.AddTensor("blk.0.ffn_up_exps.weight", tensor.Q4_K, dims); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteHeader(); err != nil {
		t.Fatal(err)
	}
	size, _ := gguf.TensorSize(tensor.Q4_K, dims)
	if err := w.WriteTensor("blk.0.ffn_up_exps.weight", make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// synthMoE writes a small random-weight qwen3moe with runtime/model's
// synth writer, runnable without the shared fixtures.
func synthMoE(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := model.WriteSynthetic(&buf, model.SynthConfig{Layers: 2, Experts: 4, ExpertsUsed: 2, Hidden: 64, ExpertFFN: 32, Heads: 2, Vocab: 300, Type: tensor.Q8_0, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func facts(t *testing.T, data []byte) *protocol.ModelFacts {
	t.Helper()
	f, err := coordartifact.ReadModelFacts(bytes.NewReader(data), int64(len(data)))
	if err != nil || f == nil {
		t.Fatalf("facts %+v err %v", f, err)
	}
	return f
}

func specFor(t *testing.T, data []byte, url string) *jobs.Spec {
	t.Helper()
	spec := smokeSpec(t)
	sum := sha256.Sum256(data)
	spec.Model = jobs.Model{Name: "model.gguf", URL: url, SHA256: hex.EncodeToString(sum[:]), Size: jobs.ByteSize(len(data)), Layout: jobs.LayoutAsIs}
	return spec
}

func TestCheckModelSupport(t *testing.T) {
	t.Parallel()
	for _, arch := range []string{"qwen3moe", "qwen35moe", "qwen3"} {
		ok := &protocol.ModelFacts{Architecture: arch, TensorTypes: []string{"F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"}}
		if code, reason := CheckModelSupport(ok); code != "" {
			t.Fatalf("supported %s model refused: %s %s", arch, code, reason)
		}
	}
	for _, tc := range []struct {
		name string
		f    protocol.ModelFacts
		in   string
	}{
		{"architecture", protocol.ModelFacts{Architecture: "llama4", TensorTypes: []string{"F32"}}, "architecture llama4 (this agent runs "},
		{"tensor type without kernel", protocol.ModelFacts{Architecture: "qwen3", TensorTypes: []string{"F32", "Q8_1"}}, "tensor type Q8_1 (this agent computes F32, F16"},
		{"tensor type unknown to this build", protocol.ModelFacts{Architecture: "qwen3", TensorTypes: []string{"IQ9_Z"}}, "tensor type IQ9_Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, reason := CheckModelSupport(&tc.f)
			if code != protocol.RefuseUnsupported || !strings.Contains(reason, tc.in) {
				t.Fatalf("got %s %q, want unsupported mentioning %q", code, reason, tc.in)
			}
		})
	}
}

func TestRequiredModelRAM(t *testing.T) {
	t.Parallel()
	f := &protocol.ModelFacts{Architecture: "qwen3moe", TotalBytes: 1000 << 20, ExpertBytes: 800 << 20, ResidentBytes: 200 << 20}
	for _, tc := range []struct {
		c    jobs.Config
		want int64
	}{
		{jobs.Config{Mode: jobs.ModeResident}, 1000<<20 + ModelRAMOverhead},
		{jobs.Config{Mode: "on-demand", Budget: jobs.Budget{Fraction: 0.25}}, 200<<20 + 200<<20 + ModelRAMOverhead},
		{jobs.Config{Mode: "on-demand", Budget: jobs.Budget{Bytes: 100 << 20}}, 200<<20 + 100<<20 + ModelRAMOverhead},
		{jobs.Config{Mode: "on-demand", Budget: jobs.Budget{Bytes: 5 << 30}}, 1000<<20 + ModelRAMOverhead}, // capped at all experts
	} {
		if got, why := RequiredModelRAM(f, tc.c); got != tc.want || why == "" {
			t.Errorf("%+v: %d (%s), want %d", tc.c, got, why, tc.want)
		}
	}
	// qwen35moe: the recurrent state of one sequence comes on top, in
	// every mode. The published 35B-A3B: 30 DeltaNet layers, conv 4 over
	// 2×16×128 + 32×128 = 8192 channels, 32 state heads of 128×128.
	q35 := &protocol.ModelFacts{Architecture: "qwen35moe", TotalBytes: 1000 << 20, ExpertBytes: 800 << 20, ResidentBytes: 200 << 20,
		Recurrent: &protocol.RecurrentFacts{Layers: 30, ConvKernel: 4, ConvChannels: 8192, Heads: 32, StateSize: 128}}
	// per layer: 2 states of 32×128² + 2 conv windows of 3×8192 + 16
	// rollback positions of 2×8192 + 2×32 floats, 4 bytes each.
	state := int64(4 * 30 * (2*32*128*128 + 2*3*8192 + 16*(2*8192+2*32)))
	if got := RecurrentStateBytes(q35); got != state {
		t.Fatalf("35B-A3B recurrent state %d bytes, want %d", got, state)
	}
	t.Logf("35B-A3B recurrent state per sequence: %s", fmtBytes(state))
	for _, tc := range []struct {
		c    jobs.Config
		want int64
	}{
		{jobs.Config{Mode: jobs.ModeResident}, 1000<<20 + state + ModelRAMOverhead},
		{jobs.Config{Mode: "scheduled", Budget: jobs.Budget{Fraction: 0.25}}, 200<<20 + 200<<20 + state + ModelRAMOverhead},
	} {
		got, why := RequiredModelRAM(q35, tc.c)
		if got != tc.want || !strings.Contains(why, "recurrent state 155.7 MiB") {
			t.Errorf("qwen35moe %+v: %d (%s), want %d with the recurrent state named", tc.c, got, why, tc.want)
		}
	}
	dense := &protocol.ModelFacts{Architecture: "qwen3", TotalBytes: 300 << 20, ResidentBytes: 300 << 20}
	if got, _ := RequiredModelRAM(dense, jobs.Config{Mode: "on-demand", Budget: jobs.Budget{Fraction: 0.1}}); got != 300<<20+ModelRAMOverhead {
		t.Errorf("dense model in a streaming mode: %d", got)
	}
}

// TestAgentRefusesUnrunnableModelBeforeDownload: with model facts in the
// assignment, an unknown architecture, an unsupported tensor type or too
// little RAM is refused in the assign reply and the artifact server never
// sees a request.
func TestAgentRefusesUnrunnableModelBeforeDownload(t *testing.T) {
	ns := testenv.NATS(t)
	c := newCoord(t, ns.ClientURL(), 5*time.Second)
	data := llama4Model(t)
	srv := newCountingServer(t, data)
	spec := specFor(t, data, srv.url)
	ra := startAgent(t, Config{NATSURL: ns.ClientURL(), Name: "facts-1", DeviceOptions: &device.Options{RAMBytes: 256 << 20}})

	llama := assignment(spec, "facts-1", 20, 1, srv.url)
	llama.Model = facts(t, data)
	q81 := assignment(spec, "facts-1", 21, 1, srv.url)
	q81.Model = &protocol.ModelFacts{Architecture: "qwen3moe", TensorTypes: []string{"F32", "Q8_1"}, TotalBytes: 10, ResidentBytes: 10}
	big := assignment(spec, "facts-1", 22, 1, srv.url)
	// 1 GiB of weights, of which 900 MiB experts: the resident config
	// needs all of it and the streaming one 124 MiB + half the experts,
	// both more than the device's 256 MiB.
	big.Model = &protocol.ModelFacts{Architecture: "qwen3moe", MoE: true, TensorTypes: []string{"F32"}, TotalBytes: 1 << 30, ExpertBytes: 900 << 20, ResidentBytes: 1<<30 - 900<<20}
	for _, tc := range []struct {
		name string
		a    *protocol.Assignment
		code string
		in   []string
	}{
		{"unknown architecture", llama, protocol.RefuseUnsupported, []string{"architecture llama4 (this agent runs "}},
		{"tensor type", q81, protocol.RefuseUnsupported, []string{"tensor type Q8_1"}},
		{"insufficient RAM", big, protocol.RefuseInsufficientRAM, []string{"has 256.0 MiB", "config on-demand"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := c.assign(tc.a)
			if rep.Accepted || rep.Code != tc.code {
				t.Fatalf("reply %+v, want refusal %s", rep, tc.code)
			}
			for _, s := range tc.in {
				if !strings.Contains(rep.Reason, s) {
					t.Fatalf("reason %q does not mention %q", rep.Reason, s)
				}
			}
		})
	}
	if n := srv.hits.Load(); n != 0 {
		t.Fatalf("artifact server got %d requests for refused assignments", n)
	}
	if st := ra.a.Status(); st.State != StateIdle || st.RunState != "" {
		t.Fatalf("agent not idle after refusals: %+v", st)
	}
}

// factsFarm is a real coordinator (Postgres, NATS) whose artifact store
// holds one model with its recorded facts; the run's spec downloads it
// from a counting server.
type factsFarm struct {
	c    *coordinator.Coordinator
	url  string
	srv  *countingServer
	spec *jobs.Spec
}

// newFactsFarm stores data in the coordinator's artifact store. With
// analyse, its facts are recorded as an upload does; without, the artifact
// looks stored before migration 00024 and the dispatcher must analyse it.
func newFactsFarm(t *testing.T, data []byte, analyse bool) *factsFarm {
	t.Helper()
	dbURL := testenv.MigratedPostgresURL(t)
	ns := testenv.NATS(t)
	artDir := t.TempDir()
	files, err := coordartifact.New(coordartifact.Config{Dir: artDir})
	if err != nil {
		t.Fatal(err)
	}
	info, err := files.Put(bytes.NewReader(data), coordartifact.PutOptions{Size: int64(len(data))})
	if err != nil {
		t.Fatal(err)
	}
	c := startCoordinator(t, coordinatortest.Config(t, coordinator.Config{Name: "c1", ArtifactDir: artDir,
		DispatchInterval: 100 * time.Millisecond}, dbURL, ns.ClientURL()))
	ctx := context.Background()
	if _, err := c.Store().PutArtifact(ctx, info.SHA256, info.Size, "model.gguf"); err != nil {
		t.Fatal(err)
	}
	if analyse {
		if f, err := coordartifact.RecordModelFacts(ctx, c.Store(), files, info.SHA256); err != nil || f == nil {
			t.Fatalf("record facts: %+v %v", f, err)
		}
	}
	srv := newCountingServer(t, data)
	spec := specFor(t, data, srv.url)
	spec.Devices = jobs.Selector{Labels: map[string]string{"pool": "facts"}}
	spec.Retry.MaxAttempts = 1
	return &factsFarm{c: c, url: ns.ClientURL(), srv: srv, spec: spec}
}

type leaseRow struct {
	device, outcome string
}

func (f *factsFarm) leases(t *testing.T, run int64) []leaseRow {
	t.Helper()
	rows, err := f.c.Store().Pool().Query(context.Background(), `SELECT device_id, outcome FROM leases WHERE run_id = $1 ORDER BY token`, run)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []leaseRow
	for rows.Next() {
		var l leaseRow
		if err := rows.Scan(&l.device, &l.outcome); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

func (f *factsFarm) createRun(t *testing.T) int64 {
	t.Helper()
	_, runs, err := f.c.Store().CreateRuns(context.Background(), &store.CreateRunsParams{Spec: f.spec, Build: "facts", Source: "test"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v err %v", runs, err)
	}
	f.c.Wake()
	return runs[0].ID
}

// TestE2EUnknownArchitectureRefusedBeforeDownload: the coordinator reads
// the facts of an artifact stored before uploads were analysed and sends
// them; the agent refuses the llama4
// model without fetching a byte; the run goes back to the queue with its
// attempt given back and is not offered to that device again.
func TestE2EUnknownArchitectureRefusedBeforeDownload(t *testing.T) {
	f := newFactsFarm(t, llama4Model(t), false) // analysed by the dispatcher
	startAgent(t, Config{NATSURL: f.url, Name: "facts-arch", Labels: map[string]string{"pool": "facts"}})
	id := f.createRun(t)
	waitFor(t, 30*time.Second, "the refusal", func() bool {
		ls := f.leases(t, id)
		return len(ls) == 1 && ls[0].outcome != ""
	})
	if ls := f.leases(t, id); ls[0].outcome != "unfit" || ls[0].device != "facts-arch" {
		t.Fatalf("lease %+v, want outcome unfit on facts-arch", ls[0])
	}
	r, err := f.c.Store().GetRun(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != store.RunQueued || r.Attempts != 0 || !strings.Contains(r.Error, "architecture llama4 (this agent runs ") {
		t.Fatalf("run after the refusal: state %s attempts %d error %q; want queued, 0 attempts, the reason", r.State, r.Attempts, r.Error)
	}
	// Many dispatch rounds later (and past the requeue backoff) the run
	// has not been offered to the same device again. No event marks an
	// offer that did not happen, and the dispatcher counts no rounds: the
	// claim is about a span, so the test watches one.
	time.Sleep(2500 * time.Millisecond)
	if ls := f.leases(t, id); len(ls) != 1 {
		t.Fatalf("run re-offered to the device that refused it: leases %+v", ls)
	}
	if r, _ := f.c.Store().GetRun(context.Background(), id); r.State != store.RunQueued || r.Attempts != 0 {
		t.Fatalf("run later: state %s attempts %d", r.State, r.Attempts)
	}
	if n := f.srv.hits.Load(); n != 0 {
		t.Fatalf("the artifact server got %d requests", n)
	}
	a, err := f.c.Store().GetArtifact(context.Background(), f.spec.Model.SHA256)
	if err != nil || a.Model == nil || a.Model.Architecture != "llama4" || a.ModelCheckedAt == nil {
		t.Fatalf("artifact after the dispatcher analysed it: %+v %v", a, err)
	}
}

// TestE2EInsufficientRAMGoesElsewhere: a device too small for the model
// refuses before downloading; the run, attempt given back, goes to a
// device that fits and succeeds there.
func TestE2EInsufficientRAMGoesElsewhere(t *testing.T) {
	f := newFactsFarm(t, synthMoE(t), true)
	startAgent(t, Config{NATSURL: f.url, Name: "facts-small", Labels: map[string]string{"pool": "facts"},
		DeviceOptions: &device.Options{RAMBytes: 16 << 20}})
	id := f.createRun(t)
	waitFor(t, 30*time.Second, "the refusal", func() bool {
		ls := f.leases(t, id)
		return len(ls) == 1 && ls[0].outcome != ""
	})
	r, err := f.c.Store().GetRun(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if ls := f.leases(t, id); ls[0].outcome != "unfit" || r.State != store.RunQueued || r.Attempts != 0 ||
		!strings.Contains(r.Error, "insufficient_ram") || !strings.Contains(r.Error, "has 16.0 MiB") {
		t.Fatalf("after the refusal: leases %+v, run state %s attempts %d error %q", ls, r.State, r.Attempts, r.Error)
	}
	if n := f.srv.hits.Load(); n != 0 {
		t.Fatalf("the artifact server got %d requests from the refusing device", n)
	}
	startAgent(t, Config{NATSURL: f.url, Name: "facts-big", Labels: map[string]string{"pool": "facts"}})
	var done *store.Run
	waitFor(t, 3*time.Minute, "the run to finish on facts-big", func() bool {
		done, err = f.c.Store().GetRun(context.Background(), id)
		return err == nil && (done.State == store.RunSucceeded || done.State == store.RunFailed)
	})
	if done.State != store.RunSucceeded || done.DeviceID != "facts-big" || done.Attempts != 1 {
		t.Fatalf("run ended %s on %s after %d attempts (max 1): %s", done.State, done.DeviceID, done.Attempts, done.Error)
	}
	if ls := f.leases(t, id); len(ls) != 2 || ls[0].device != "facts-small" || ls[1].device != "facts-big" {
		t.Fatalf("leases %+v", ls)
	}
	if f.srv.hits.Load() == 0 {
		t.Fatal("the device that ran the model never downloaded it")
	}
}

// TestE2EResidentSkippedOnSmallDevice: on a device that holds the
// streaming configs but not the whole model, the run goes ahead: the
// resident config is stored invalid with the skip's reason and the
// streaming one is measured (issue 31, item 4: the ladder runs where the
// model does not fit).
func TestE2EResidentSkippedOnSmallDevice(t *testing.T) {
	data := synthMoE(t)
	f := newFactsFarm(t, data, true)
	fa := facts(t, data)
	var whole, stream int64
	for _, c := range f.spec.Expand() {
		need, _ := RequiredModelRAM(fa, c)
		if c.Mode == jobs.ModeResident {
			whole = need
		} else {
			stream = max(stream, need)
		}
	}
	if whole == 0 || stream == 0 || stream >= whole {
		t.Fatalf("smoke needs %d bytes resident and %d streaming; the test needs a resident config that needs more", whole, stream)
	}
	startAgent(t, Config{NATSURL: f.url, Name: "facts-mid", Labels: map[string]string{"pool": "facts"},
		DeviceOptions: &device.Options{RAMBytes: stream}})
	id := f.createRun(t)
	ctx := context.Background()
	var done *store.Run
	waitFor(t, 3*time.Minute, "the run to finish", func() bool {
		var err error
		done, err = f.c.Store().GetRun(ctx, id)
		return err == nil && (done.State == store.RunSucceeded || done.State == store.RunFailed)
	})
	if done.State != store.RunSucceeded || done.DeviceID != "facts-mid" {
		t.Fatalf("run ended %s on %s: %s", done.State, done.DeviceID, done.Error)
	}
	res, err := f.c.Store().ListResults(ctx, &store.ListResultsParams{RunID: id, Limit: 10})
	if err != nil || len(res) != len(f.spec.Expand()) {
		t.Fatalf("results %+v (%v), want one per config", res, err)
	}
	for _, r := range res {
		skipped := strings.HasPrefix(r.InvalidReason, "skipped: the device cannot hold the whole model")
		if resident := strings.HasPrefix(r.ConfigKey, string(jobs.ModeResident)); resident != skipped || resident == r.Valid {
			t.Errorf("config %s: valid %v, reason %q", r.ConfigKey, r.Valid, r.InvalidReason)
		}
	}
}
