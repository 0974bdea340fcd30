package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestCreateRunOneStatement: a trigger without fanout is stored in one
// statement; what it stores reads back as the transaction path's would
// (trigger, run, job snapshot shared by equal specs), and a job snapshot
// being inserted by a concurrent transaction, invisible to that
// statement, makes it fall back to the transaction path and use that job.
func TestCreateRunOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	spec := smoke(t)
	tr, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "b1", GitSHA: "abc", Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || len(tr.RunIDs) != 1 || tr.RunIDs[0] != runs[0].ID {
		t.Fatalf("trigger %+v, runs %+v: want one run", tr, runs)
	}
	r := runs[0]
	got, err := st.GetTrigger(ctx, tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.JobID != tr.JobID || got.Suite != tr.Suite || got.Build != "b1" || got.GitSHA != "abc" || got.Source != "test" ||
		got.Lineage != tr.Lineage || got.Fanout || !got.CreatedAt.Equal(tr.CreatedAt) || len(got.RunIDs) != 1 || got.RunIDs[0] != r.ID {
		t.Fatalf("stored trigger %+v, returned %+v", got, tr)
	}
	stored, err := st.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.State != store.RunQueued || stored.TriggerID != tr.ID || stored.JobID != tr.JobID || stored.Build != "b1" ||
		stored.Suite != spec.SuiteName() || stored.MaxAttempts != spec.Retry.MaxAttempts || stored.Timeout != spec.Timeout.D() ||
		stored.Priority != spec.Priority || stored.TargetDeviceID != "" || stored.Lineage != tr.Lineage {
		t.Fatalf("stored run %+v", stored)
	}
	job, err := st.GetJob(ctx, tr.JobID)
	if err != nil || job.Fingerprint != spec.Fingerprint() {
		t.Fatalf("job %+v, err %v: want the spec's snapshot", job, err)
	}
	tr2, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "b2"})
	if err != nil || tr2.JobID != tr.JobID || tr2.Source != "api" {
		t.Fatalf("second trigger %+v, err %v: want job %d shared, source api", tr2, err, tr.JobID)
	}

	// A new spec whose snapshot another transaction is inserting.
	other := smoke(t)
	other.Name = "smoke-concurrent"
	js, err := other.MarshalCanonical()
	if err != nil {
		t.Fatal(err)
	}
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var jobID int64
	if err := tx.QueryRow(ctx, `INSERT INTO jobs (name, suite, spec, fingerprint) VALUES ($1, $2, $3, $4) RETURNING id`,
		other.Name, other.SuiteName(), js, other.Fingerprint()).Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	type created struct {
		tr  *store.Trigger
		err error
	}
	done := make(chan created, 1)
	go func() {
		tr, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: other, Build: "b3"})
		done <- created{tr, err}
	}()
	// Wait until the statement waits for the job row's transaction.
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
		select {
		case c := <-done:
			t.Fatalf("CreateRuns returned before the job's transaction ended: %+v, %v", c.tr, c.err)
		default:
		}
		var waiting int
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO jobs%'`).Scan(&waiting); err != nil || waiting > 0 {
			return err
		}
		return errors.New("CreateRuns never waited for the concurrent job insert")
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	c := <-done
	if c.err != nil || c.tr.JobID != jobID || len(c.tr.RunIDs) != 1 {
		t.Fatalf("after the concurrent insert: trigger %+v, err %v; want job %d and one run", c.tr, c.err, jobID)
	}
}
