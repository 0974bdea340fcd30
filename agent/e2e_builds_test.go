package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	coordartifact "github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/runtime/expert"
)

// TestE2EBuildsUnderTest: a real coordinator, Postgres, NATS and two
// agents; two real builds compiled from this tree, the baseline and one
// linked with lookahead turned off (expert.LookaheadVariantFlag), pushed
// to the registry as executables. The exec agent downloads each build's
// executable and runs it as a child; the agent that runs its embedded
// build only is never offered them. Each result carries the sha256 of its
// own executable, and the lookahead-off build is measured predicting
// nothing and decoding slower on the emulated phone's clock. A third build,
// whose code panics as its runner starts, ends as build_failed with the
// panic in its stderr tail, never retried as infrastructure.
func TestE2EBuildsUnderTest(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end builds test skipped in -short mode")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIP: the `go` tool is not on PATH, so the builds under test cannot be compiled")
	}
	base := buildLesfarm(t, goBin)
	variant := buildLesfarmWith(t, goBin, "-ldflags", expert.LookaheadVariantFlag)
	crash := buildLesfarmWith(t, goBin, "-overlay", crashOverlay(t))
	f := newE2EFarm(t)
	ctx := context.Background()
	st := f.c.Store()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	shas := map[string]string{}
	for id, b := range map[string]*lesfarmBuild{"e2e-base": base, "e2e-nolookahead": variant, "e2e-crash": crash} {
		if err := b.wait(); err != nil {
			t.Fatal(err)
		}
		info := putExecutable(t, f, b.path)
		if _, _, err := st.CreateBuild(ctx, &store.CreateBuildParams{ID: id, Lineage: "e2e", PushedBy: "test",
			Executables: []store.Executable{{Platform: platform, SHA256: info.SHA256, Size: info.Size}}}); err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
		shas[id] = info.SHA256
	}
	if shas["e2e-base"] == shas["e2e-nolookahead"] || shas["e2e-base"] == shas["e2e-crash"] {
		t.Fatal("the two builds have one sha256: the variant is not different code")
	}
	startAgent(t, Config{NATSURL: f.url, Name: "e2e-embedded-only", NoExec: true, Profile: "phone-mid"})
	startAgent(t, Config{NATSURL: f.url, Name: "e2e-exec", Profile: "phone-mid"})

	spec := f.spec.Clone()
	spec.Matrix = jobs.Matrix{Modes: []jobs.Mode{jobs.ModeOnDemand, jobs.ModeLookahead}, Budgets: spec.Matrix.Budgets}
	spec.Repetitions = 2
	decode := map[string]float64{}
	for _, id := range []string{"e2e-base", "e2e-nolookahead"} {
		_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: id, Lineage: "e2e", Source: "test"})
		if err != nil || len(runs) != 1 {
			t.Fatalf("trigger %s: %v %v", id, runs, err)
		}
		done := f.waitRun(t, runs[0].ID, store.RunSucceeded, 4*time.Minute)
		if done.DeviceID != "e2e-exec" {
			t.Fatalf("run of %s ran on %s: only the agent that executes builds may take it", id, done.DeviceID)
		}
		p := done.Provenance
		if p != nil {
			t.Logf("run of %s: runner peak RSS %.1f MiB", id, float64(p.PeakRSSBytes)/(1<<20))
		}
		if p == nil || p.Build != id || p.ExecutableSHA256 != shas[id] || p.Embedded || p.RunnerProtocol == 0 {
			t.Fatalf("run of %s: provenance %+v, want build %s's executable %s run as a child", id, p, id, shas[id])
		}
		res, err := st.ListResults(ctx, &store.ListResultsParams{RunID: done.ID, Limit: 10})
		if err != nil || len(res) != 2 {
			t.Fatalf("run of %s: %d results, err %v", id, len(res), err)
		}
		for _, r := range res {
			if r.ExecutableSHA256 != shas[id] {
				t.Fatalf("result %s of %s carries executable %q, want %s", r.ConfigKey, id, r.ExecutableSHA256, shas[id])
			}
			if strings.HasPrefix(r.ConfigKey, string(jobs.ModeLookahead)) {
				decode[id] = r.DecodeTPS.Mean
				if id == "e2e-nolookahead" && r.Recall != 0 {
					t.Fatalf("the lookahead-off build predicted (recall %.3f)", r.Recall)
				}
				if id == "e2e-base" && r.Recall <= 0 {
					t.Fatalf("the baseline build's lookahead predicted nothing")
				}
			}
		}
	}
	t.Logf("lookahead decode on phone-mid's clock: baseline %.2f tok/s, lookahead-off build %.2f tok/s", decode["e2e-base"], decode["e2e-nolookahead"])
	if !(decode["e2e-nolookahead"] < decode["e2e-base"]) {
		t.Fatalf("the lookahead-off build decodes at %.2f tok/s, the baseline at %.2f: want it measured slower", decode["e2e-nolookahead"], decode["e2e-base"])
	}
	checkBuildFailure(t, f, spec, shas["e2e-crash"])
}

// crashOverlay writes a go build -overlay that adds one file to the
// command line package: a runner that panics as it starts, the way a
// build with a bug in its job code crashes. It returns the overlay's path.
func crashOverlay(t *testing.T) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "zz_crash.go")
	code := "package cli\n\nimport \"os\"\n\n// A planted bug: the runner dies on every job.\nfunc init() {\n\tif len(os.Args) > 1 && os.Args[1] == \"runner\" {\n\t\tgo func() { panic(\"planted crash in the build under test\") }()\n\t}\n}\n"
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "overlay.json")
	js := fmt.Sprintf(`{"Replace":{%q:%q}}`, filepath.Join(root, "internal", "cli", "zz_crash.go"), src)
	if err := os.WriteFile(overlay, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	return overlay
}

// checkBuildFailure: a build whose code crashes (crashOverlay) ends as
// build_failed, the build's failure: one attempt, not retried as
// infrastructure, its error and stderr tail naming the panic, its
// provenance the executable that ran.
func checkBuildFailure(t *testing.T, f *e2eFarm, spec *jobs.Spec, sha string) {
	t.Helper()
	ctx := context.Background()
	_, runs, err := f.c.Store().CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "e2e-crash", Lineage: "e2e", Source: "test"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("trigger the crashing build: %v %v", runs, err)
	}
	var done *store.Run
	testenv.Eventually(t, 3*time.Minute, 10*time.Millisecond, func() error {
		r, err := f.c.Store().GetRun(ctx, runs[0].ID)
		if err != nil {
			return err
		}
		one := []store.Run{*r}
		if err := f.c.Store().FillWaitingReasons(ctx, one); err != nil {
			return err
		}
		if done = &one[0]; !store.TerminalState(done.State) {
			return fmt.Errorf("the crashing build's run is %s (%s%s)", done.State, done.WaitingReason, done.Error)
		}
		return nil
	})
	if done.State != store.RunBuildFailed || done.Attempts != 1 {
		t.Fatalf("the crashing build's run ended %s after %d attempt(s) (%s), want build_failed after one", done.State, done.Attempts, done.Error)
	}
	p := done.Provenance
	if p == nil || p.ExecutableSHA256 != sha || !strings.Contains(p.StderrTail, "planted crash") {
		t.Errorf("build failure provenance %+v, want executable %s and the panic in its stderr tail", p, sha)
	}
	t.Logf("crashing build: %s", done.Error)
}

// putExecutable stores the file at path in the farm's artifact store.
func putExecutable(t *testing.T, f *e2eFarm, path string) coordartifact.Info {
	t.Helper()
	files, err := coordartifact.New(coordartifact.Config{Dir: f.cfg.ArtifactDir})
	if err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	info, err := files.Put(r, coordartifact.PutOptions{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Store().PutArtifact(context.Background(), info.SHA256, info.Size, "lesfarm"); err != nil {
		t.Fatal(err)
	}
	return info
}

// variantBuilds are the lesfarm binaries linked with extra -ldflags, one
// per value, built once per test process beside sharedBuild.
var variantBuilds struct {
	sync.Mutex
	m map[string]*lesfarmBuild
}

// buildLesfarmWith builds ./cmd/lesfarm linked with ldflags, once per test
// process (the Go build cache makes it a link step after buildLesfarm).
// Its directory goes when the test ends.
func buildLesfarmWith(t *testing.T, goBin string, buildArgs ...string) *lesfarmBuild {
	t.Helper()
	variantBuilds.Lock()
	defer variantBuilds.Unlock()
	key := strings.Join(buildArgs, "\x00")
	if b := variantBuilds.m[key]; b != nil {
		return b
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b := &lesfarmBuild{path: filepath.Join(dir, "lesfarm"), done: make(chan struct{})}
	if variantBuilds.m == nil {
		variantBuilds.m = map[string]*lesfarmBuild{}
	}
	variantBuilds.m[key] = b
	t.Cleanup(func() {
		variantBuilds.Lock()
		delete(variantBuilds.m, key)
		variantBuilds.Unlock()
	})
	go func() {
		defer close(b.done)
		start := time.Now()
		args := append(append([]string{"build"}, buildArgs...), "-o", b.path, "./cmd/lesfarm")
		cmd := exec.Command(goBin, args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		b.took = time.Since(start)
	}()
	return b
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for root := wd; ; root = filepath.Dir(root) {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			return root, nil
		}
		if filepath.Dir(root) == root {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
	}
}
