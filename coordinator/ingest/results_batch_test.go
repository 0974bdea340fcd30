package ingest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestResultsCommitInBatches: a backlog of results (published before the
// ingester starts) is committed in a few transactions, each result once,
// the stale ones rejected on their own; a result the database refuses
// (a NUL byte in its error text) fails its batch, whose other results are
// then committed one by one while it alone is redelivered.
func TestResultsCommitInBatches(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	const n = 150
	grants := claimSmokeRuns(ctx, t, e, "batch", n)
	const poison = 7
	wantCommitted := map[int64]bool{}
	for i, g := range grants {
		res := &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: g.Run.DeviceID, Outcome: protocol.OutcomeSucceeded,
			StartedAt: time.Now(), FinishedAt: time.Now(),
			Configs: []protocol.ConfigResult{{ConfigIndex: 0, ConfigKey: "resident", DecodeTPS: protocol.Stat{N: 1, Mean: 5}, Valid: true}}}
		switch {
		case i%10 == 3:
			res.Token-- // stale: rejected, the run stays active
		case i == poison:
			res.Outcome, res.Error = protocol.OutcomeFailed, "nul \x00 byte"
		default:
			wantCommitted[g.Run.ID] = true
		}
		publish(t, e, protocol.DeviceResultSubject(g.Run.DeviceID, g.Run.ID), res)
	}
	rep := &commitCounter{BaseReporter: ingest.BaseReporter{Store: e.st}, commits: map[int64]int{}}
	mu, commits := &rep.mu, rep.commits
	ing, err := ingest.New(ingest.Config{JS: e.js, Store: e.st, ResultWorkers: 2, Reporter: rep})
	if err != nil {
		t.Fatal(err)
	}
	if err := ing.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer ing.Stop()
	waitFor(t, "every good result committed", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(commits) >= len(wantCommitted)
	})
	waitFor(t, "every stale result rejected", 30*time.Second, func() bool { return ing.Stats().Stale == n/10 })
	mu.Lock()
	for id, c := range commits {
		if !wantCommitted[id] || c != 1 {
			t.Errorf("run %d committed %d times (want %v)", id, c, wantCommitted[id])
		}
	}
	mu.Unlock()
	st := ing.Stats()
	// 150 results in fetches of up to 64: a handful of transactions, plus
	// the one-by-one commits of the poisoned batch (up to 63).
	if st.ResultBatches > 10 || st.Errors == 0 {
		t.Errorf("stats %+v: want at most 10 result transactions and the poisoned batch's error", st)
	}
	for i, g := range grants {
		r, err := e.st.GetRun(ctx, g.Run.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := store.RunSucceeded
		if !wantCommitted[g.Run.ID] {
			want = store.RunAssigned
		}
		if r.State != want {
			t.Errorf("result %d: run %s, want %s", i, r.State, want)
		}
	}
}

// commitCounter counts the commits reported for each run.
type commitCounter struct {
	ingest.BaseReporter
	mu      sync.Mutex
	commits map[int64]int
}

func (r *commitCounter) Committed(_ context.Context, run *store.Run) {
	r.mu.Lock()
	r.commits[run.ID]++
	r.mu.Unlock()
}
