package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/cli"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// lesfarm runs the CLI in-process.
func lesfarm(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// TestCLIAgainstRealCoordinatorAPI drives token create, artifact add and
// run --wait against the API on a real database; a goroutine plays the
// agent by moving runs through their states in Postgres.
func TestCLIAgainstRealCoordinatorAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testenv.MigratedPostgresURL(t)
	st, err := store.Open(ctx, dbURL, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	files, err := artifact.New(artifact.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := api.New(api.Deps{Store: st, Files: files, Logger: slog.New(slog.DiscardHandler), WaitPoll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	// token create prints the secret once, on stdout.
	code, out, errOut := lesfarm(t, "token", "create", "--name", "ci", "--database-url", dbURL)
	if code != 0 {
		t.Fatalf("token create: %d %s", code, errOut)
	}
	token := strings.TrimSpace(out)
	if !strings.HasPrefix(token, store.APITokenPrefix) || !strings.Contains(errOut, "shown only this once") {
		t.Fatalf("token create printed %q / %q", out, errOut)
	}
	if code, _, errOut := lesfarm(t, "token", "create", "--database-url", dbURL); code != 2 || !strings.Contains(errOut, "--name is required") {
		t.Fatalf("token create without name: %d %s", code, errOut)
	}
	server := []string{"--server", srv.URL, "--token", token}

	// artifact add uploads and prints the digest.
	path := filepath.Join(t.TempDir(), "model.gguf")
	data := bytes.Repeat([]byte("GGUF"), 50_000)
	os.WriteFile(path, data, 0o644)
	code, out, errOut = lesfarm(t, append([]string{"artifact", "add", path, "-q"}, server...)...)
	sum := sha256.Sum256(data)
	if code != 0 || strings.TrimSpace(out) != hex.EncodeToString(sum[:]) {
		t.Fatalf("artifact add: %d %q %s", code, out, errOut)
	}
	if a, err := st.GetArtifact(ctx, hex.EncodeToString(sum[:])); err != nil || a.Name != "model.gguf" || a.Size != int64(len(data)) {
		t.Fatalf("stored artifact %+v %v", a, err)
	}
	code, out, errOut = lesfarm(t, append([]string{"artifact", "gc", "--dry-run", "--grace", "0s"}, server...)...)
	if code != 0 || !strings.Contains(out, "would remove "+hex.EncodeToString(sum[:])) {
		t.Fatalf("artifact gc --dry-run: %d %q %s", code, out, errOut)
	}
	if _, err := st.GetArtifact(ctx, hex.EncodeToString(sum[:])); err != nil {
		t.Fatalf("dry run removed the artifact: %v", err)
	}
	if code, _, errOut := lesfarm(t, "artifact", "add", path, "-q", "--server", srv.URL, "--token", "lft_wrong"); code != 1 || !strings.Contains(errOut, "401") {
		t.Fatalf("artifact add with a bad token: %d %s", code, errOut)
	}

	ram := int64(8 << 30)
	for _, id := range []string{"p1", "p2"} {
		if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: id, Fingerprint: protocol.Fingerprint{Platform: "android", DeviceModel: "Pixel 8", RAMBytes: &ram}, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	buildstest.Register(t, st, "b-ok", "b-fail", "b-reg")
	// agent moves the runs of build to running once the CLI has printed
	// them, and to final once the CLI has shown one running.
	agent := func(t *testing.T, o *cliOutput, build, final string) {
		if err := o.waitFor("run(s) of smoke for build "+build, 20*time.Second); err != nil {
			t.Error(err)
			return
		}
		st.Pool().Exec(ctx, `UPDATE runs SET state = 'running', device_id = target_device_id, progress = 0.5, progress_message = 'config 1/2' WHERE build = $1`, build)
		if err := o.waitFor("running on p", 20*time.Second); err != nil {
			t.Error(err)
			return
		}
		st.Pool().Exec(ctx, `UPDATE runs SET state = $2, progress = 1, finished_at = now() WHERE build = $1`, build, final)
	}
	tests := []struct {
		name, build, final string
		alert              bool
		code               int
		want               string
	}{
		{"all succeed", "b-ok", "succeeded", false, 0, "ok: all runs succeeded"},
		{"a run fails", "b-fail", "failed", false, 1, "2 of 2 run(s) did not succeed"},
		{"regression alert", "b-reg", "succeeded", true, 1, "1 regression alert(s) for build b-reg"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.alert {
				st.Pool().Exec(ctx, `INSERT INTO alert_groups (suite, lineage, seq, build, scope, summary, regression)
					VALUES ('smoke', 'main', 1, $1, 'global', 'decode_tps -12% on every device', true)`, tc.build)
			}
			o := newCLIOutput()
			agentDone := make(chan struct{})
			go func() { agent(t, o, tc.build, tc.final); close(agentDone) }()
			junit, summary := filepath.Join(t.TempDir(), "junit.xml"), filepath.Join(t.TempDir(), "summary.md")
			code, out, errOut := lesfarmWatched(o, append([]string{"run", "--suite", "smoke", "--devices", "platform=android,model=Pixel 8",
				"--fanout", "--build", tc.build, "--wait", "--alert-grace", "0s", "--timeout", "30s", "--junit", junit, "--summary", summary, "--json=" + fmt.Sprint(tc.alert)}, server...)...)
			<-agentDone
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Fatalf("exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			// JUnit: one case per run (no results here) plus one per alert;
			// failures for failed runs and alerts.
			x, _ := os.ReadFile(junit)
			wantFail := map[string]int{"all succeed": 0, "a run fails": 2, "regression alert": 1}[tc.name]
			wantTests := map[bool]int{false: 2, true: 3}[tc.alert]
			if !strings.Contains(string(x), fmt.Sprintf(`tests="%d" failures="%d"`, wantTests, wantFail)) {
				t.Fatalf("junit:\n%s", x)
			}
			md, _ := os.ReadFile(summary)
			if !strings.Contains(string(md), "## lesfarm: smoke on build `"+tc.build+"`") || !strings.Contains(string(md), "### p1") ||
				tc.alert != strings.Contains(string(md), "decode_tps -12% on every device") {
				t.Fatalf("summary:\n%s", md)
			}
			if tc.alert { // --json: the report on stdout, progress on stderr
				var rep struct {
					Build  string            `json:"build"`
					Runs   []json.RawMessage `json:"runs"`
					Alerts []json.RawMessage `json:"alerts"`
					OK     bool              `json:"ok"`
				}
				if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Build != tc.build || len(rep.Runs) != 2 || len(rep.Alerts) != 1 || rep.OK {
					t.Fatalf("--json report %+v (%v):\n%s", rep, err, out)
				}
				out = errOut
			}
			if !strings.Contains(out, "2 run(s) of smoke") || !strings.Contains(out, "running on p") {
				t.Fatalf("progress not streamed:\n%s", out)
			}
		})
	}
	if code, _, errOut := lesfarm(t, append([]string{"run", "--suite", "smoke", "--build", "x", "--devices", "platform"}, server...)...); code != 2 {
		t.Fatalf("bad selector: %d %s", code, errOut)
	}
	if code, _, errOut := lesfarm(t, append([]string{"run", "--suite", "nope", "--build", "x"}, server...)...); code != 1 || !strings.Contains(errOut, "body.suite") {
		t.Fatalf("unknown suite: %d %s", code, errOut)
	}
}
