package agent

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/migrations"
)

// TestFaultOldBinaryNewSchema is issue 29's fault case "an old binary
// against a new schema" (finding 6) with a real `lesfarm serve`: the
// database holds a queued run and was migrated one version past this
// binary. serve exits non-zero naming both versions instead of going
// ready (the old coordinator reported runs as succeeded while every
// telemetry batch failed); /readyz never answers during the fault, and the
// run is untouched: still queued, no attempt used, no error, no sample.
func TestFaultOldBinaryNewSchema(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("process-level fault tests skipped in -short and -race modes")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIP: the `go` tool is not on PATH, so the lesfarm binary cannot be built")
	}
	b := buildLesfarm(t, goBin)
	ctx := context.Background()
	dbURL := testenv.MigratedPostgresURL(t)
	st, err := store.Open(ctx, dbURL, store.Config{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "e2e", Source: "test"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v err %v", runs, err)
	}
	m, err := migrations.New(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	newest := m.Newest()
	m.Close()
	if _, err := st.Pool().Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, newest+1); err != nil {
		t.Fatal(err)
	}
	if err := b.wait(); err != nil {
		t.Fatal(err)
	}
	httpPort := freePort(t)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, b.path, "serve", "--data-dir", t.TempDir(), "--database-url", dbURL,
		"--http-addr", "127.0.0.1:"+strconv.Itoa(httpPort), "--nats-listen", "127.0.0.1:"+strconv.Itoa(freePort(t)))
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	// During the fault: nothing answers /readyz, up to serve's exit.
	for ready := false; !ready; {
		select {
		case <-done:
			ready = true
		case <-time.After(100 * time.Millisecond):
			if code := httpStatus("http://127.0.0.1:" + strconv.Itoa(httpPort) + "/readyz"); code == 200 {
				t.Fatal("/readyz 200 from a serve on a schema newer than its binary")
			}
		}
	}
	want := []string{fmt.Sprintf("%05d", newest+1), fmt.Sprintf("%05d", newest)}
	if err == nil || !strings.Contains(string(out), want[0]) || !strings.Contains(string(out), want[1]) {
		t.Fatalf("serve on a newer schema: err %v, output %q; want a non-zero exit naming versions %v", err, out, want)
	}
	r, err := st.GetRun(ctx, runs[0].ID)
	if err != nil || r.State != store.RunQueued || r.Attempts != 0 || r.Error != "" {
		t.Fatalf("run after the refused start: %+v (%v), want it queued and untouched", r, err)
	}
	if n, err := st.CountSamples(ctx, r.ID); err != nil || n != 0 {
		t.Fatalf("%d samples (%v), want none", n, err)
	}
}
