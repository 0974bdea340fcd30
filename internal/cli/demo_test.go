package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/pglocal"
	"github.com/lesfarm/lesfarm/protocol"
)

// syncBuffer is a bytes.Buffer safe for the demo's writes and the test's
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDemoCatchesPlantedRegression runs README's main job in-process, as
// `make demo` does but with two phones instead of three: a real
// coordinator (embedded NATS, local PostgreSQL), emulated phones on this
// host taking turns, the les-demo suite over eight builds compiled from
// this checkout: builds 1-4 the baseline executable, builds 5-8 the one
// linked with lookahead turned off. Every phone runs the executable of the
// build it is asked for, so the coordinator's detector must raise exactly
// one alert group: a global regression at build 5 of the lookahead and
// scheduled decode (the rungs that prefetch) on both phones, attributed to
// the LES metrics that moved, and nothing on the rungs that do not
// prefetch. The group may hold those rungs' prefill and TTFT too (on the
// device clock the prompt's pass waits for its experts as well); never an
// improvement, nor a figure of the other rungs: no host load reaches a
// device-timed figure. Then the A/B gate of build 5 against build 4 fails, and the
// bisection of the alert across the eight builds names build 5 (their runs
// feed no series: the group stays the only one). The dashboard is served
// and the regressions API it reads answers with that group.
func TestDemoCatchesPlantedRegression(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end demo skipped in -short mode")
	}
	if _, err := pglocal.FindBinDir(os.Getenv("PATH")); err != nil {
		t.Fatalf("the demo needs PostgreSQL binaries: %v", err)
	}
	base, err := os.MkdirTemp("", "lesfarm-demo-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil { // reachable by the postgres user when root
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	type farm struct{ base, lineage string }
	ready := make(chan farm, 1)
	o := &demoOptions{dataDir: filepath.Join(base, "farm"), httpAddr: "127.0.0.1:0",
		profiles: []string{"phone-flagship", "phone-mid"}, builds: 8, regressBuild: 5,
		timeout: 12 * time.Minute, ready: func(b, l string) { ready <- farm{b, l} }}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- runDemo(&Env{Ctx: ctx, Stdout: &out, Stderr: &errOut}, o) }()
	var f farm
	select {
	case f = <-ready:
	case err := <-done:
		t.Fatalf("demo ended before serving: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	t.Logf("demo output:\n%s", out.String())
	text := out.String()
	for _, want := range []string{"coordinator up", "on emu-phone-mid-2: succeeded in ", "lookahead/budget=25%", "scheduled/budget=25%",
		"× on-demand", "compiled both builds", "compiled with lookahead turned off", "sha256 ", "regression at build b5", "on every device model",
		"lookahead/budget=25% decode on emulated:phone-mid: ", "moved with it: ", "why (the planted change)", "dashboard: http://", "API token for this farm",
		// The last act: the gate fails on b5, the bisection names b5.
		"A/B verdict after ", ": regression: emu-phone-mid-2 lookahead/budget=25% decode_tps -", "the gate failed (exit 1): build b5 is slower than b4",
		"step 1 (verify, ", "is good: ", "is bad: ", "the bisection named the culprit: build b5 (first bad, ", "after b4 (last good)"} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if strings.Contains(text, " on : ") {
		t.Error("demo progress lines without a device name")
	}
	// Without lookahead the rungs that prefetch stall more: every
	// attribution line says so (the figures depend on the model's routing).
	stalls := regexp.MustCompile(`stall fraction (\d+)% → (\d+)%`).FindAllStringSubmatch(text, -1)
	if len(stalls) == 0 {
		t.Error("no attribution line names the stall fraction")
	}
	for _, m := range stalls {
		before, _ := strconv.Atoi(m[1])
		after, _ := strconv.Atoi(m[2])
		if after <= before {
			t.Errorf("stall fraction %s%% → %s%%: want it to rise without lookahead", m[1], m[2])
		}
	}

	// The regressions API the dashboard reads: one group, the planted one.
	var list struct {
		Items []store.AlertGroup `json:"items"`
	}
	q := url.Values{"lineage": {f.lineage}}
	if err := getJSON(ctx, f.base+"/v1/alerts?"+q.Encode(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d alert groups on the demo's lineage, want exactly the planted one: %+v", len(list.Items), list.Items)
	}
	var g store.AlertGroup
	if err := getJSON(ctx, fmt.Sprintf("%s/v1/alerts/%d", f.base, list.Items[0].ID), &g); err != nil {
		t.Fatal(err)
	}
	if !g.Regression || g.Scope != "global" || g.Suite != demoSuite || !strings.HasSuffix(g.Build, "-b5") {
		t.Errorf("alert group: regression %v, scope %q (%q), suite %s, build %q; want a global regression at build 5",
			g.Regression, g.Scope, g.ScopeDetail, g.Suite, g.Build)
	}
	configs, decodeConfigs, devices := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, a := range g.Alerts {
		configs[a.Series.Config] = true
		ok := a.Direction == "regression"
		switch a.Series.Metric {
		case "decode_tps":
			ok = ok && a.RelativeChange < -0.1
			decodeConfigs[a.Series.Config] = true
			devices[a.Series.DeviceModel] = true
		case "prefill_tps", "ttft_ms":
		default:
			ok = false
		}
		if !ok {
			t.Errorf("alert %d: %s %s on %s, %s %.3f; want a decode_tps regression beyond 10%%, or a prefill_tps or ttft_ms regression",
				a.ID, a.Series.Config, a.Series.Metric, a.Series.DeviceModel, a.Direction, float64(a.RelativeChange))
		}
		var attrs []struct {
			Metric string `json:"metric"`
		}
		if err := json.Unmarshal(a.Attribution, &attrs); err != nil || len(attrs) == 0 {
			t.Errorf("alert %d has no attribution (%s, %v)", a.ID, a.Attribution, err)
		}
		if !strings.Contains(a.Summary, "stall fraction") {
			t.Errorf("alert %d summary %q does not name the stall that moved with it", a.ID, a.Summary)
		}
	}
	if !decodeConfigs["lookahead/budget=25%"] || !decodeConfigs["scheduled/budget=25%"] || len(configs) != 2 {
		t.Errorf("decode alerts on configs %v, alerts on %v; want both on lookahead and scheduled (the rungs that prefetch)", decodeConfigs, configs)
	}
	if !devices["emulated:phone-flagship"] || !devices["emulated:phone-mid"] {
		t.Errorf("decode alerts on devices %v, want both phones: both ran the lookahead-off executable", devices)
	}
	checkDemoProvenance(ctx, t, f.base, f.lineage)
	// The dashboard itself is served next to the API.
	resp, err := http.Get(f.base + "/?lineage=" + f.lineage)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("dashboard: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("demo: %v", err)
	}
}

// checkDemoProvenance checks that every run of builds 1 and 5 of the
// demo's lineage proves it ran its build's registered executable, and that
// the two builds are different code.
func checkDemoProvenance(ctx context.Context, t *testing.T, base, lineage string) {
	t.Helper()
	exes := map[string]string{}
	for _, b := range []string{lineage + "-b1", lineage + "-b5"} {
		var build store.Build
		if err := getJSON(ctx, base+"/v1/builds/"+url.PathEscape(b), &build); err != nil {
			t.Fatal(err)
		}
		if len(build.Executables) != 1 {
			t.Fatalf("build %s has %d executables, want 1", b, len(build.Executables))
		}
		want := build.Executables[0].SHA256
		exes[b] = want
		var runs struct {
			Items []struct {
				ID         int64                `json:"id"`
				Provenance *protocol.Provenance `json:"provenance"`
			} `json:"items"`
		}
		if err := getJSON(ctx, base+"/v1/runs?"+url.Values{"build": {b}}.Encode(), &runs); err != nil {
			t.Fatal(err)
		}
		if len(runs.Items) == 0 {
			t.Errorf("build %s has no runs", b)
		}
		for _, r := range runs.Items {
			if r.Provenance == nil || r.Provenance.ExecutableSHA256 != want || r.Provenance.Embedded {
				t.Errorf("run %d of %s: provenance %+v, want its build's executable %s run as a child", r.ID, b, r.Provenance, want)
			}
		}
	}
	if exes[lineage+"-b1"] == exes[lineage+"-b5"] {
		t.Errorf("builds 1 and 5 have the same executable %s: the planted regression is not code", exes[lineage+"-b1"])
	}
}
