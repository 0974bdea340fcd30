package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/api/client"
	"github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestCLIBuildPushListShow drives lesfarm build push (files and
// --from-source), list and show against the API on a real database, with
// real executables: refusals exit 2 with one line, a re-push is not an
// error, and an unknown id names the nearest ones.
func TestCLIBuildPushListShow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	set := buildstest.New(t)
	st, err := store.Open(ctx, testenv.MigratedPostgresURL(t), store.Config{})
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
	token, _, err := st.CreateAPIToken(ctx, "ci")
	if err != nil {
		t.Fatal(err)
	}
	server := []string{"--server", srv.URL, "--token", token}
	host := buildstest.Host()
	cmd := func(args ...string) []string { return append(args, server...) }

	code, out, errOut := lesfarm(t, cmd("build", "push", "ci-1", set.Lesfarm[host], set.Lesfarm["linux/arm64"], set.Lesfarm["android/arm64"])...)
	if code != 0 || !strings.Contains(errOut, "registered build ci-1: main #1, 3 executable(s)") ||
		!strings.Contains(out, "android/arm64") || !strings.Contains(out, "PLATFORM") {
		t.Fatalf("push: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := lesfarm(t, cmd("build", "push", "ci-1", set.Lesfarm["android/arm64"], set.Lesfarm[host], set.Lesfarm["linux/arm64"])...); code != 0 ||
		!strings.Contains(errOut, "already registered with the same executables") || !strings.Contains(errOut, "already stored") {
		t.Fatalf("re-push: exit %d %s", code, errOut)
	}

	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"another module", []string{"build", "push", "ci-2", set.Other}, 2, "a Go executable of module example.com/other"},
		{"not a Go file", []string{"build", "push", "ci-2", set.NotGo}, 2, "not a Go executable"},
		{"two for one platform", []string{"build", "push", "ci-2", set.Clean, set.Dirty}, 2, "a build has one per platform"},
		{"id taken by other content", []string{"build", "push", "ci-1", set.Clean}, 2, `build "ci-1" is already registered with other content`},
		{"git sha contradicts", []string{"build", "push", "ci-2", set.Clean, "--git-sha", "abcdef1"}, 2, "git sha abcdef1 contradicts the executables' vcs.revision"},
		{"bad id", []string{"build", "push", "a/b", set.Clean}, 2, `build id "a/b"`},
		{"no files", []string{"build", "push", "ci-2"}, 2, "give the executables (FILE...) or --from-source DIR"},
		{"platforms without source", []string{"build", "push", "ci-2", set.Clean, "--platforms", "linux/arm64"}, 2, "need --from-source"},
		{"unknown build", []string{"build", "show", "ci-9"}, 1, `build "ci-9" is not registered; nearest: ci-1`},
		{"bad format", []string{"build", "list", "--format", "yaml"}, 2, `--format "yaml"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := lesfarm(t, cmd(tc.args...)...)
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			if last := lines[len(lines)-1]; code != tc.code || !strings.HasPrefix(last, "lesfarm: ") || !strings.Contains(last, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and a last line containing %q", code, errOut, tc.code, tc.want)
			}
		})
	}
	if _, err := st.GetBuild(ctx, "ci-2"); err == nil {
		t.Fatal("a refused push registered ci-2")
	}
	if code, _, errOut := lesfarm(t, "build", "push", "ci-2", set.Clean, "--server", srv.URL); code != 1 || !strings.Contains(errOut, "401") {
		t.Fatalf("push without a token: exit %d %s", code, errOut)
	}

	// From source: cross-compiled, the compile time printed.
	code, out, errOut = lesfarm(t, cmd("build", "push", "ci-3", "--from-source", set.Source, "--platforms", "linux/arm64,android/arm64",
		"--ldflags", "-s -w", "--after", "ci-1", "--format", "json")...)
	if code != 0 || !strings.Contains(errOut, "compiled android/arm64 in") || !strings.Contains(errOut, "compile time:") {
		t.Fatalf("push --from-source: exit %d\n%s", code, errOut)
	}
	var b client.Build
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.ID != "ci-3" || b.Position != 2 || len(b.Executables) != 2 ||
		b.Executables[0].Platform != "android/arm64" || b.Executables[0].Settings["-trimpath"] != "true" ||
		b.Executables[1].Settings["CGO_ENABLED"] != "0" || b.PushedBy != "ci" {
		t.Fatalf("pushed from source: %v %s", err, out)
	}

	code, out, errOut = lesfarm(t, cmd("build", "list", "--format", "json")...)
	var list []client.Build
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 2 || list[0].ID != "ci-3" {
		t.Fatalf("list: exit %d %v\n%s%s", code, err, out, errOut)
	}
	if code, out, _ := lesfarm(t, cmd("build", "list", "--lineage", "main")...); code != 0 || !strings.HasPrefix(out, "ID ") || !strings.Contains(out, "android/arm64,linux/arm64") {
		t.Fatalf("list table: exit %d\n%s", code, out)
	}
	if code, out, _ := lesfarm(t, cmd("build", "show", "ci-1")...); code != 0 || !strings.Contains(out, "LINEAGE  main #1") || !strings.Contains(out, host) {
		t.Fatalf("show: exit %d\n%s", code, out)
	}
}
