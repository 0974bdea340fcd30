package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/agent/adb/adbtest"
	coordartifact "github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestE2EPhonesOverADB: a real coordinator, Postgres and NATS; two fake
// phones behind the fake adb (internal/fakeadb), driven by RunPhones; a
// linux/arm64 build cross-compiled from this tree runs on them under
// qemu-aarch64. Phone A is unplugged mid-run: its run is aborted as an
// infrastructure failure and requeued, the phone is rediscovered when it
// returns and the run succeeds with exactly one attempt's samples. Phone
// B starts overheated: its config waits until the test cools it, and the
// result records the cool-down and the phone's state.
func TestE2EPhonesOverADB(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end phones test skipped in -short mode")
	}
	adbtest.RequireQEMU(t)
	trainedModel(t) // skips first when the fixture model is missing
	adbtest.PrebuildLesfarmARM64()
	f := newE2EFarm(t)
	exe := adbtest.BuildLesfarmARM64(t)
	phones := adbtest.NewFarm(t)
	ctx := context.Background()
	st := f.c.Store()
	info := putExecutable(t, f, exe)
	if _, _, err := st.CreateBuild(ctx, &store.CreateBuildParams{ID: "e2e-arm64", Lineage: "e2e", PushedBy: "test",
		Executables: []store.Executable{{Platform: "linux/arm64", SHA256: info.SHA256, Size: info.Size}}}); err != nil {
		t.Fatal(err)
	}
	phones.AddPhone(t, "PHA", adbtest.Phone{Model: "Fake A"})
	phones.AddPhone(t, "PHB", adbtest.Phone{Model: "Fake B", ThermalStatus: 3})

	var mu sync.Mutex
	var last []PhoneStatus
	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	base := Config{NATSURL: f.url, Name: "ph", CacheDir: t.TempDir(), Threads: 1, Gate: ThermalGate{Disabled: true},
		BatchInterval: 100 * time.Millisecond, BatchEvents: 16, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
		RequestTimeout: time.Second, ShutdownTimeout: 5 * time.Second, Logger: testLogger()}
	go func() {
		done <- RunPhones(pctx, PhonesConfig{Base: base, ADB: phones.Client, Poll: 100 * time.Millisecond,
			Phone:    PhoneConfig{Hygiene: PhoneHygiene{CooldownPoll: 50 * time.Millisecond, RefIters: 2000, ThrottleRatio: 1000, Pin: PinBig}},
			OnChange: func(s []PhoneStatus) { mu.Lock(); last = s; mu.Unlock() }})
	}()
	t.Cleanup(func() { stop(); <-done })
	online := func(id string) bool {
		d, err := st.GetDevice(ctx, id)
		return err == nil && d.State == store.DeviceOnline
	}
	waitFor(t, time.Minute, "both phones online", func() bool { return online("ph-PHA") && online("ph-PHB") })
	d, _ := st.GetDevice(ctx, "ph-PHA")
	if d.Fingerprint.Platform != "android" || d.DeviceModel != "Fake A" || d.Fingerprint.ExecPlatform != "linux/arm64" || d.Fingerprint.EmbeddedBuild != "" {
		t.Fatalf("phone A registered as %+v", d.Fingerprint)
	}
	if d.AgentLabels[PhoneClocksLabel] != protocol.ClocksFixedPerformance {
		t.Fatalf("phone A's labels %v lack clocks=fixed-performance (neither phone is rooted)", d.AgentLabels)
	}

	// One config of the les-ladder suite (lookahead at one budget), cut
	// short, on a tiny synthetic MoE: a forward step under qemu costs about
	// 20× native, and each phone downloads, pushes and hashes the model.
	// The cool-down between repetitions keeps phone A's runner going for
	// seconds after its first samples, so the unplug lands mid-run however
	// fast the host decodes.
	spec, err := jobs.Builtin("les-ladder")
	if err != nil {
		t.Fatal(err)
	}
	spec.Model = putPhoneModel(t, f)
	spec.Matrix = jobs.Matrix{Modes: []jobs.Mode{jobs.ModeLookahead}, Budgets: spec.Matrix.Budgets[1:2]} // a phone reads its own flash: no emulated profile
	spec.Prompts = jobs.Prompts{Inline: []string{"In the beginning God created"}}
	spec.PrefillTokens, spec.DecodeTokens, spec.Repetitions, spec.Warmup = 4, 8, 3, 0
	spec.Cooldown = jobs.Duration(2 * time.Second)
	spec.Retry.MaxAttempts = 3
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "e2e-arm64", Lineage: "e2e", Fanout: true, Source: "test"})
	if err != nil || len(runs) != 2 {
		t.Fatalf("fanout: %v %v", runs, err)
	}
	byDev := map[string]int64{}
	waitFor(t, time.Minute, "both runs leased", func() bool {
		for _, r := range runs {
			if g, err := st.GetRun(ctx, r.ID); err == nil && g.DeviceID != "" {
				byDev[g.DeviceID] = g.ID
			}
		}
		return len(byDev) == 2
	})
	runA, runB := byDev["ph-PHA"], byDev["ph-PHB"]
	if runA == 0 || runB == 0 {
		t.Fatalf("runs by device %v", byDev)
	}
	// A run that requires locked clocks is placed on neither phone, and
	// its waiting reason says why.
	_, lockedRuns, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "e2e-arm64", Lineage: "e2e", Source: "test",
		Selector: &jobs.Selector{Labels: map[string]string{PhoneClocksLabel: protocol.ClocksLocked}}})
	if err != nil || len(lockedRuns) != 1 {
		t.Fatalf("locked-clocks run: %v %v", lockedRuns, err)
	}
	defer func() {
		r, err := st.GetRun(ctx, lockedRuns[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		lr := []store.Run{*r}
		if err := st.FillWaitingReasons(ctx, lr); err != nil || lr[0].State != store.RunQueued || !strings.Contains(lr[0].WaitingReason, "label clocks=locked missing") {
			t.Errorf("the locked-clocks run: state %s, waiting reason %q, err %v", lr[0].State, lr[0].WaitingReason, err)
		}
	}()

	// Phone B waits, too hot, until the test cools it.
	waitFor(t, time.Minute, "phone B cooling down", func() bool { return phones.Calls(`"PHB" "shell" "echo @@battery`) >= 3 })

	// Phone A is unplugged once its runner streams telemetry.
	first, _ := st.GetRun(ctx, runA)
	waitFor(t, 90*time.Second, "phone A's telemetry", func() bool {
		n, err := st.CountSamples(ctx, runA)
		return err == nil && n > 0
	})
	phones.Unplug(t, "PHA")
	waitFor(t, 30*time.Second, "run A requeued", func() bool {
		r, err := st.GetRun(ctx, runA)
		return err == nil && (r.State == store.RunQueued || r.Token != first.Token)
	})
	waitFor(t, 30*time.Second, "phone A seen gone", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(last, func(s PhoneStatus) bool { return s.Serial == "PHA" && s.State == "gone" })
	})
	phones.SetThermal(t, "PHB", 0)
	phones.Replug(t, "PHA")

	want := expectedSamples(spec)
	for dev, id := range byDev {
		r := f.waitRun(t, id, store.RunSucceeded, 3*time.Minute)
		res, err := st.ListResults(ctx, &store.ListResultsParams{RunID: id, Limit: 10})
		if err != nil || len(res) != 1 {
			t.Fatalf("%s: %d results err %v", dev, len(res), err)
		}
		waitFor(t, 30*time.Second, "samples ingested", func() bool {
			n, err := st.CountSamples(ctx, id)
			return err == nil && n == want
		})
		if dev == "ph-PHA" && (r.Attempts < 2 || r.Token == first.Token) {
			t.Fatalf("run A after the unplug: attempts %d token %d (first %d)", r.Attempts, r.Token, first.Token)
		}
		if p := r.Provenance; p == nil || p.ExecutableSHA256 != info.SHA256 || p.RunnerProtocol == 0 || p.Platform != "linux/arm64" {
			t.Fatalf("%s: provenance %+v", dev, p)
		}
		cr := resultOf(t, f, id)
		ps := cr.PhoneState
		if ps.Pin != PinBig || !slices.Equal(ps.PinnedCPUs, []int{4, 5, 6, 7}) || !strings.Contains(phones.Taskset(strings.TrimPrefix(dev, "ph-")), "f0 "+info.SHA256) {
			t.Fatalf("%s: pinned %s %v; the phone ran under taskset: %q", dev, ps.Pin, ps.PinnedCPUs, phones.Taskset(strings.TrimPrefix(dev, "ph-")))
		}
		if ps.Clocks != protocol.ClocksFixedPerformance || ps.Start == nil || ps.End == nil || ps.Start.BatteryPercent == nil || len(ps.End.Clusters) != 2 || ps.RefBeforeNS <= 0 {
			t.Fatalf("%s: phone state %+v", dev, ps)
		}
		// The runner evicted the model from the phone's page cache before
		// the config (posix_fadvise under qemu), and measured it.
		if ps.Eviction != protocol.EvictionFadvise || cr.Extra["page_cache_evicted"] != 1 ||
			cr.Extra["model_resident_after_evict"] > cr.Extra["model_resident_before_evict"] {
			t.Fatalf("%s: eviction %q, extra %v", dev, ps.Eviction, cr.Extra)
		}
		if dev == "ph-PHB" && (!slices.Contains(ps.Flags, protocol.PhoneFlagCooledDown) || ps.CooldownMS <= 0 || *ps.Start.ThermalStatus != 0) {
			t.Fatalf("phone B's state does not show its cool-down: %+v", ps)
		}
		if dev == "ph-PHB" {
			// Heartbeats carried the phone's own thermal state, not the host's.
			pts, _, err := st.DeviceTrace(ctx, id, 1000)
			if err != nil || !slices.ContainsFunc(pts, func(p store.DeviceStatePoint) bool {
				return p.ThermalStatus == "severe" && p.BatteryPercent != nil && *p.BatteryPercent == 80
			}) {
				t.Fatalf("phone B's device trace never showed it severe at 80%% battery: %+v err %v", pts, err)
			}
		}
		t.Logf("%s: attempts %d, %d samples, cool-down %d ms, ref before/after %v/%v", dev, r.Attempts, want, ps.CooldownMS,
			time.Duration(ps.RefBeforeNS), time.Duration(ps.RefAfterNS))
	}
}

// resultOf reads a run's one stored config result, which must carry the
// phone's state.
func resultOf(t *testing.T, f *e2eFarm, runID int64) *protocol.ConfigResult {
	t.Helper()
	res, err := f.c.Store().ListResults(context.Background(), &store.ListResultsParams{RunID: runID, Limit: 1})
	if err != nil || len(res) != 1 {
		t.Fatalf("results of %d: %v", runID, err)
	}
	var cr protocol.ConfigResult
	if err := json.Unmarshal(res[0].Stats, &cr); err != nil {
		t.Fatalf("stats of run %d: %v", runID, err)
	}
	if cr.PhoneState == nil {
		t.Fatalf("run %d's result has no phone_state", runID)
	}
	return &cr
}

// putPhoneModel stores a tiny synthetic MoE (2 layers of width 128, 8
// experts, Q8_0: about 1 MB) as an artifact of f's coordinator and
// returns the model of a spec that runs it.
func putPhoneModel(t *testing.T, f *e2eFarm) jobs.Model {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tiny-phone.gguf")
	w, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := model.WriteSynthetic(w, model.SynthConfig{Layers: 2, Experts: 8, ExpertsUsed: 2, Hidden: 128, ExpertFFN: 64, Heads: 4, KVHeads: 2,
		Vocab: 300, Context: 64, Type: tensor.Q8_0, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := coordartifact.New(coordartifact.Config{Dir: f.cfg.ArtifactDir})
	if err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	info, err := files.Put(r, coordartifact.PutOptions{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Store().PutArtifact(context.Background(), info.SHA256, info.Size, "tiny-phone.gguf"); err != nil {
		t.Fatal(err)
	}
	return jobs.Model{Name: "tiny-phone.gguf", SHA256: info.SHA256, Size: jobs.ByteSize(info.Size), Layout: jobs.LayoutAsIs}
}
