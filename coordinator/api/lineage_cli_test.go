package api_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestCLIRunLineage: lesfarm run --lineage triggers runs on that lineage,
// and with --wait only that lineage's regression alerts fail it; a bad
// --lineage is a usage error (exit 2).
func TestCLIRunLineage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.MigratedPostgresURL(t), store.Config{})
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
	token, _, err := st.CreateAPIToken(ctx, "ci")
	if err != nil {
		t.Fatal(err)
	}
	server := []string{"--server", srv.URL, "--token", token}
	buildstest.Register(t, st, "rc-1")
	ram := int64(8 << 30)
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "p1", Fingerprint: protocol.Fingerprint{Platform: "android", DeviceModel: "Pixel 8", RAMBytes: &ram}, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// main regressed at build rc-1; the release branch's rc-1 did not.
	if _, err := st.Pool().Exec(ctx, `INSERT INTO alert_groups (suite, lineage, seq, build, scope, summary, regression)
		VALUES ('smoke', 'main', 1, 'rc-1', 'global', 'decode_tps -12% on every device', true)`); err != nil {
		t.Fatal(err)
	}
	o := newCLIOutput()
	agentDone := make(chan struct{})
	go func() { // the agent: finish every run of build rc-1 once the CLI has them
		defer close(agentDone)
		if err := o.waitFor("run(s) of smoke for build rc-1", 20*time.Second); err != nil {
			t.Error(err)
			return
		}
		if tag, err := st.Pool().Exec(ctx, `UPDATE runs SET state = 'succeeded', device_id = 'p1', progress = 1, finished_at = now()
				WHERE build = 'rc-1' AND state = 'queued'`); err != nil || tag.RowsAffected() == 0 {
			t.Errorf("finishing the runs: %v, %d rows", err, tag.RowsAffected())
		}
	}()
	code, out, errOut := lesfarmWatched(o, append([]string{"run", "--suite", "smoke", "--build", "rc-1", "--lineage", "release-1",
		"--wait", "--alert-grace", "0s", "--timeout", "30s"}, server...)...)
	<-agentDone
	if code != 0 || !strings.Contains(out, "(lineage release-1)") || !strings.Contains(out, "ok: all runs succeeded") {
		t.Fatalf("run --lineage release-1: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	runs, err := st.ListRuns(ctx, &store.ListRunsParams{Build: "rc-1"})
	if err != nil || len(runs) != 1 || runs[0].Lineage != "release-1" {
		t.Fatalf("runs %+v, %v: want one release-1 run", runs, err)
	}
	if code, _, errOut := lesfarm(t, append([]string{"run", "--suite", "smoke", "--build", "x", "--lineage", "release/1"}, server...)...); code != 2 || !strings.Contains(errOut, "--lineage") {
		t.Fatalf("bad --lineage: exit %d %s", code, errOut)
	}
	if code, out, _ := lesfarm(t, "run", "--help"); code != 0 || !strings.Contains(out, "--lineage") || !strings.Contains(out, "release-3") {
		t.Fatalf("run --help does not explain --lineage: %d\n%s", code, out)
	}
}
