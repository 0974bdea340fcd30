package dashboard_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// builtFarm is what seedBuilds registered and ran.
type builtFarm struct {
	exe                map[string]string // build id → its linux/arm64 executable's sha256
	okRun, failedRun   int64             // a succeeded run of ci-5002, a build_failed run of ci-5001.1
	gitFix             string            // ci-5001.1's git sha
	stderrTail         string            // the failed run's stderr tail
	succeededPeakRSS   int64
	succeededRunnerRev string
}

func fakeSHA(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// seedBuilds registers three builds of main: ci-5001, ci-5002 (dirty,
// two platforms) and ci-5001.1, pushed last but placed after ci-5001, so
// build order (5001, 5001.1, 5002) differs from the order they ran. A
// Pixel 8 that executes linux/arm64 builds ran ci-5002 as a child
// (succeeded) and ci-5001.1, which crashed (build_failed, with a stderr
// tail holding markup). Decode series points exist for all three, in the
// order they ran.
func (f *farm) seedBuilds(t *testing.T) *builtFarm {
	t.Helper()
	ctx := context.Background()
	st := f.st
	bf := &builtFarm{exe: map[string]string{}, gitFix: "f1e2d3c4b5a6978812345678901234567890abcd",
		stderrTail:       "panic: runtime error: index out of range [3] with length 3\n<script>window.pwned = 1</script>\ngoroutine 1 [running]:",
		succeededPeakRSS: 734003200, succeededRunnerRev: "9813d69a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"}
	push := func(id, after, git string, dirty bool, platforms ...string) {
		t.Helper()
		var exes []store.Executable
		for _, pl := range platforms {
			sha := fakeSHA(id + " " + pl)
			if _, err := st.PutArtifact(ctx, sha, 41943040, id); err != nil {
				t.Fatal(err)
			}
			goos, goarch, _ := strings.Cut(pl, "/")
			exes = append(exes, store.Executable{Platform: pl, SHA256: sha, Size: 41943040, GoVersion: "go1.26.8", Revision: git, Modified: dirty,
				ModulePath: "github.com/lesfarm/lesfarm", MainPath: "github.com/lesfarm/lesfarm/cmd/lesfarm",
				Settings: map[string]string{"GOOS": goos, "GOARCH": goarch, "CGO_ENABLED": "0", "-trimpath": "true", "-ldflags": "-X main.variant=<nolookahead>"}})
			if pl == "linux/arm64" {
				bf.exe[id] = sha
			}
		}
		if _, _, err := st.CreateBuild(ctx, &store.CreateBuildParams{ID: id, After: after, GitSHA: git, Dirty: dirty, PushedBy: "ci", Executables: exes}); err != nil {
			t.Fatalf("push %s: %v", id, err)
		}
	}
	push("ci-5001", "", "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678", false, "linux/arm64")
	push("ci-5002", "", "b1b2c3d4e5f60718293a4b5c6d7e8f9012345678", true, "android/arm64", "linux/arm64")
	push("ci-5001.1", "ci-5001", bf.gitFix, false, "linux/arm64")

	ram := int64(12 << 30)
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "pixel8-x", TTL: time.Minute, Coordinator: "test",
		Fingerprint: protocol.Fingerprint{Platform: "linux", DeviceModel: "Pixel 8", OSVersion: "14", Cores: 8, RAMBytes: &ram, ExecPlatform: "linux/arm64"}}); err != nil {
		t.Fatal(err)
	}
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	run := func(build string, outcome string, prov protocol.Provenance, errText string, configs []protocol.ConfigResult) int64 {
		t.Helper()
		_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: build, Selector: &jobs.Selector{DeviceModel: "Pixel 8"}})
		if err != nil {
			t.Fatal(err)
		}
		g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "pixel8-x", RunIDs: []int64{runs[0].ID}, LeaseTTL: time.Minute, Coordinator: "test"})
		if err != nil || g == nil {
			t.Fatalf("claim %s: %v", build, err)
		}
		if err := st.AckAssignment(ctx, g.Run.ID, g.Token); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if _, err := st.CompleteRun(ctx, &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: "pixel8-x", Outcome: outcome, Error: errText,
			StartedAt: now.Add(-time.Minute), FinishedAt: now, Configs: configs, Provenance: &prov}); err != nil {
			t.Fatalf("complete %s: %v", build, err)
		}
		return g.Run.ID
	}
	bf.okRun = run("ci-5002", protocol.OutcomeSucceeded, protocol.Provenance{Build: "ci-5002", ExecutableSHA256: bf.exe["ci-5002"], Platform: "linux/arm64",
		RunnerRevision: bf.succeededRunnerRev, RunnerGoVersion: "go1.26.8", RunnerProtocol: 1, AgentBuild: "v0.9.0 9813d69a0b1c", PeakRSSBytes: bf.succeededPeakRSS}, "",
		[]protocol.ConfigResult{{ConfigIndex: 0, ConfigKey: "resident", DecodeTPS: protocol.Stat{N: 3, Mean: 30, Stddev: 0.5}, Repetitions: 3, Valid: true}})
	bf.failedRun = run("ci-5001.1", protocol.OutcomeBuildFailed, protocol.Provenance{Build: "ci-5001.1", ExecutableSHA256: bf.exe["ci-5001.1"], Platform: "linux/arm64",
		RunnerRevision: bf.gitFix, RunnerGoVersion: "go1.26.8", RunnerProtocol: 1, AgentBuild: "v0.9.0 9813d69a0b1c", PeakRSSBytes: 52428800, StderrTail: bf.stderrTail},
		"build ci-5001.1: the runner exited with status 2", nil)

	var ps []store.AddRegressPointParams
	for i, b := range []string{"ci-5001", "ci-5002", "ci-5001.1"} {
		key := fmt.Sprint(9000 + i)
		if b == "ci-5002" {
			key = fmt.Sprint(bf.okRun)
		}
		ps = append(ps, store.AddRegressPointParams{
			Series: store.RegressSeries{Suite: "smoke", Config: "resident", Metric: "decode_tps", DeviceModel: "Pixel 8", OSMajor: "14", Lineage: "main"},
			Point:  store.RegressPoint{Seq: int64(i + 1), RunKey: key, Value: float64(30 + i), Stddev: 0.5, N: 3, Build: b}})
	}
	if _, err := st.AddRegressPoints(ctx, ps); err != nil {
		t.Fatal(err)
	}
	return bf
}

// TestDashboardBuilds: the builds page lists every build with its
// lineage, position, git sha, dirty flag, executables and counts; a
// build's page shows each executable's Go build settings and its runs;
// a run's page shows which code ran, with a build failure's stderr as
// text; the series are plotted in build order with the sha on hover.
func TestDashboardBuilds(t *testing.T) {
	f := newFarm(t)
	bf := f.seedBuilds(t)
	b := newBrowser(t)

	t.Run("list", func(t *testing.T) {
		b.open(t, f.url, "/builds")
		if got := eval[string](t, b, `[...document.querySelectorAll('table.builds-table tbody tr')].map((r) => r.dataset.build).join(',')`); got != "ci-5002,ci-5001.1,ci-5001" {
			t.Fatalf("builds %q, want newest position first: ci-5002,ci-5001.1,ci-5001", got)
		}
		row := b.text(t, `tr[data-build="ci-5002"]`)
		for _, want := range []string{"main", "#3", "b1b2c3d4e5", "dirty", "android/arm64 · " + fakeSHA("ci-5002 android/arm64")[:12], "linux/arm64 · " + bf.exe["ci-5002"][:12] + " · 40.0 MiB", "by ci"} {
			if !strings.Contains(row, want) {
				t.Errorf("ci-5002 row %q lacks %q", row, want)
			}
		}
		if got := b.text(t, `tr[data-build="ci-5002"] td.runs`); got != "1" {
			t.Errorf("ci-5002 runs %q, want 1", got)
		}
		if n := b.count(t, `tr[data-build="ci-5001.1"] .badge.warn`); n != 0 {
			t.Errorf("clean build ci-5001.1 flagged dirty")
		}
		if got := eval[string](t, b, `document.querySelector('nav.tabs a.active').dataset.nav`); got != "builds" {
			t.Errorf("active tab %q", got)
		}
		b.screenshot(t, "builds")
	})

	t.Run("detail", func(t *testing.T) {
		b.do(t, "open ci-5001.1 from the list", chromedp.Click(chromedp.CSS(`tr[data-build="ci-5001.1"] td a`)),
			chromedp.WaitVisible(chromedp.CSS(`body[data-ready="/builds/ci-5001.1"] section.executable`)))
		if got := b.text(t, ".view-head"); !strings.Contains(got, "Build ci-5001.1") || !strings.Contains(got, "#2 in lineage main") {
			t.Errorf("head %q", got)
		}
		if got := b.text(t, "dl.build-meta"); !strings.Contains(got, bf.gitFix) || !strings.Contains(got, "clean") || !strings.Contains(got, "by ci") {
			t.Errorf("meta %q", got)
		}
		exe := `section.executable[data-platform="linux/arm64"]`
		if got := b.text(t, exe+" dd.sha"); got != bf.exe["ci-5001.1"] {
			t.Errorf("sha256 %q", got)
		}
		if got := b.text(t, exe+` table.settings tr[data-key="-ldflags"]`); !strings.Contains(got, "-X main.variant=<nolookahead>") {
			t.Errorf("settings row -ldflags %q", got)
		}
		if got := b.text(t, exe+` table.settings tr[data-key="CGO_ENABLED"]`); !strings.Contains(got, "0") {
			t.Errorf("settings row CGO_ENABLED %q", got)
		}
		row := fmt.Sprintf(`section.build-runs tr[data-run-id="%d"]`, bf.failedRun)
		if got := b.text(t, row+" .badge.state"); got != "build failed" {
			t.Errorf("run state %q", got)
		}
		if tip := eval[string](t, b, `document.querySelector('`+row+` .badge.state').title`); !strings.Contains(tip, "build’s own failure") {
			t.Errorf("build_failed tooltip %q", tip)
		}
		if got := b.text(t, "section.build-runs"); strings.Contains(got, "null") || strings.Contains(got, "undefined") {
			t.Errorf("runs section %q", got)
		}
		if got := b.text(t, "section.build-alerts"); !strings.Contains(got, "No regression alert groups") {
			t.Errorf("alerts %q", got)
		}
		b.screenshot(t, "build")
		// A run of the list links to its page.
		b.do(t, "open the failed run", chromedp.Click(chromedp.CSS(row+" td a")),
			chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`body[data-ready="/runs/%d"] section.provenance`, bf.failedRun))))
	})

	t.Run("failed run", func(t *testing.T) {
		b.open(t, f.url, fmt.Sprintf("/runs/%d", bf.failedRun))
		pv := "section.provenance "
		if got := b.text(t, pv+"dd.exe-sha"); got != bf.exe["ci-5001.1"] {
			t.Errorf("executable %q", got)
		}
		for css, want := range map[string]string{"dd.platform": "linux/arm64", "dd.ran-as": "a child process (the build’s own executable)",
			"dd.revision": bf.gitFix, "dd.go-version": "go1.26.8", "dd.peak-rss": "50.0 MiB"} {
			if got := b.text(t, pv+css); got != want {
				t.Errorf("%s %q, want %q", css, got, want)
			}
		}
		// The stderr tail is text: its markup is shown, never run.
		if got := eval[string](t, b, `document.querySelector('pre.stderr-tail').textContent`); got != bf.stderrTail {
			t.Errorf("stderr tail %q", got)
		}
		if n := eval[int](t, b, `document.querySelectorAll('pre.stderr-tail *').length + (window.pwned ? 100 : 0)`); n != 0 {
			t.Errorf("the stderr tail became markup (%d)", n)
		}
		if got := b.text(t, ".view-head .badge.state"); got != "build failed" {
			t.Errorf("state badge %q", got)
		}
		colors := eval[[]string](t, b, `(() => {
			const bf = getComputedStyle(document.querySelector('.view-head .badge.state')).backgroundColor;
			const x = document.createElement('span'); x.className = 'badge state state-infra_failed'; document.body.append(x);
			const inf = getComputedStyle(x).backgroundColor; x.remove(); return [bf, inf];
		})()`)
		if colors[0] == colors[1] {
			t.Errorf("build_failed and infra_failed share the colour %s", colors[0])
		}
		b.screenshot(t, "run-build-failed")
	})

	t.Run("succeeded run", func(t *testing.T) {
		b.open(t, f.url, fmt.Sprintf("/runs/%d", bf.okRun))
		pv := "section.provenance "
		for css, want := range map[string]string{"dd.exe-sha": bf.exe["ci-5002"], "dd.revision": bf.succeededRunnerRev, "dd.peak-rss": "700 MiB"} {
			if got := b.text(t, pv+css); got != want {
				t.Errorf("%s %q, want %q", css, got, want)
			}
		}
		if n := b.count(t, "pre.stderr-tail"); n != 0 {
			t.Errorf("a succeeded run shows a stderr tail")
		}
	})

	t.Run("states", func(t *testing.T) {
		b.open(t, f.url, "/runs?lineage=*&state=build_failed")
		if got := eval[string](t, b, `[...document.querySelectorAll('select[name=state] option')].map((o) => o.value).join(',')`); got != ",active,queued,assigned,running,succeeded,failed,cancelled,infra_failed,build_failed" {
			t.Errorf("state filter options %q", got)
		}
		if got := eval[string](t, b, `[...document.querySelectorAll('table.runs-table tbody tr')].map((r) => r.dataset.runId).join(',')`); got != fmt.Sprint(bf.failedRun) {
			t.Errorf("build_failed runs %q, want %d", got, bf.failedRun)
		}
	})

	t.Run("queued run", func(t *testing.T) {
		spec, err := jobs.Builtin("smoke")
		if err != nil {
			t.Fatal(err)
		}
		_, runs, err := f.st.CreateRuns(context.Background(), &store.CreateRunsParams{Spec: spec, Build: "ci-5001", Selector: &jobs.Selector{DeviceModel: "Galaxy S24"}})
		if err != nil {
			t.Fatal(err)
		}
		b.open(t, f.url, fmt.Sprintf("/runs/%d", runs[0].ID))
		if n := b.count(t, "section.provenance"); n != 0 {
			t.Errorf("a queued run shows provenance")
		}
		if got := b.text(t, "#view"); strings.Contains(got, "null") || strings.Contains(got, "undefined") {
			t.Errorf("queued run page %q", got)
		}
	})

	t.Run("series in build order", func(t *testing.T) {
		b.open(t, f.url, "/series?suite=smoke&metric=decode_tps&lineage=main")
		if got := eval[string](t, b, `document.querySelector('.chart-card .chart').slots.join(',')`); got != "ci-5001,ci-5001.1,ci-5002" {
			t.Fatalf("x slots %q, want build order ci-5001,ci-5001.1,ci-5002 (they ran 5001, 5002, 5001.1)", got)
		}
		// Hover the last slot (ci-5002): its git sha and its run's executable.
		at := eval[[]float64](t, b, `(() => { const u = document.querySelector('.chart-card .chart').plot, r = u.over.getBoundingClientRect();
			return [r.left + u.valToPos(2, 'x') - 3, r.top + r.height / 2]; })()`)
		b.do(t, "hover ci-5002", chromedp.MouseEvent(chromedp.MouseMoved, at[0], at[1]), chromedp.WaitVisible(chromedp.CSS(".chart-card .tooltip")))
		tip := b.text(t, ".chart-card .tooltip")
		for _, want := range []string{"build ci-5002", "#3", "git b1b2c3d4e5", "exe " + bf.exe["ci-5002"][:12]} {
			if !strings.Contains(tip, want) {
				t.Errorf("tooltip %q lacks %q", tip, want)
			}
		}
		b.screenshot(t, "series-build-order")
	})
}
