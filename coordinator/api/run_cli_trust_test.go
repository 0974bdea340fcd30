package api_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestRunCLISaysWhy: lesfarm run exits 2 with the API's one-line detail
// for a build that is not registered; and with --wait, a run that ended
// without a valid measurement (issue 29, finding 3) exits 1, and the exit
// message, --summary and --junit say why.
func TestRunCLISaysWhy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testenv.MigratedPostgresURL(t)
	st, err := store.Open(ctx, dbURL, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, _, err := api.New(api.Deps{Store: st, Logger: slog.New(slog.DiscardHandler), WaitPoll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	secret, _, err := st.CreateAPIToken(ctx, "ci")
	if err != nil {
		t.Fatal(err)
	}
	server := []string{"--server", srv.URL, "--token", secret}

	code, out, errOut := lesfarm(t, append([]string{"run", "--suite", "smoke", "--build", "never-pushed"}, server...)...)
	if code != 2 || !strings.Contains(errOut, `"never-pushed" is not registered`) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("unregistered build: exit %d, stdout %q, stderr %q; want exit 2 and one line", code, out, errOut)
	}

	ram := int64(8 << 30)
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "p1", Fingerprint: protocol.Fingerprint{Platform: "android", RAMBytes: &ram}, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	buildstest.Register(t, st, "b-none")
	const why = "no valid measurement: all 2 configs are invalid or failed (resident: prompt and decode exceed the context)"
	o := newCLIOutput()
	verdict := make(chan struct{})
	go func() { // the coordinator's verdict on the run, as ingest leaves it, once the CLI has it
		defer close(verdict)
		if err := o.waitFor("run(s) of smoke for build b-none", 20*time.Second); err != nil {
			t.Error(err)
			return
		}
		if tag, err := st.Pool().Exec(ctx, `UPDATE runs SET state = 'failed', device_id = 'p1', error = $2, finished_at = now() WHERE build = $1`, "b-none", why); err != nil || tag.RowsAffected() == 0 {
			t.Errorf("failing the run: %v, %d rows", err, tag.RowsAffected())
		}
	}()
	summary, junit := filepath.Join(t.TempDir(), "summary.md"), filepath.Join(t.TempDir(), "junit.xml")
	code, out, errOut = lesfarmWatched(o, append([]string{"run", "--suite", "smoke", "--build", "b-none", "--wait", "--alert-grace", "0s", "--timeout", "30s",
		"--summary", summary, "--junit", junit}, server...)...)
	<-verdict
	if code != 1 || !strings.Contains(errOut, why) {
		t.Fatalf("exit %d (want 1), stderr should say why:\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	md, _ := os.ReadFile(summary)
	if !strings.Contains(string(md), "❌") || !strings.Contains(string(md), why) {
		t.Fatalf("summary does not say why:\n%s", md)
	}
	x, _ := os.ReadFile(junit)
	if !strings.Contains(string(x), "<failure") || !strings.Contains(string(x), why) {
		t.Fatalf("JUnit does not say why:\n%s", x)
	}
}
