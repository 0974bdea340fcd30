package ingest

import (
	"context"
	"errors"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// Reporter is how an Ingester hands its results on: it commits each batch
// of results (CompleteRuns) and is told of every committed result twice,
// once at once (Committed) and once from the hook stage before the
// result's message is acknowledged (Finished), and of how long each step
// took (Phase). The coordinator's reporter places the devices the results
// free (coordinator/dispatch) and runs regression detection and
// bisection.
//
// Embed BaseReporter to implement only some of the methods.
type Reporter interface {
	// CompleteRuns commits a batch of results with
	// store.Store.CompleteRuns' contract: one outcome per result, in
	// order; an error means nothing was committed (the Ingester then
	// commits the results one by one with the store).
	CompleteRuns(ctx context.Context, results []*protocol.Result) ([]store.ResultOutcome, error)
	// Committed is called right after a result is committed, on the
	// result's worker, before Finished: for what must not wait behind the
	// slow work of other results (the device is free). run is the updated
	// run. It must be quick, and idempotent: a redelivered result is
	// reported again.
	Committed(ctx context.Context, run *store.Run)
	// Finished is called after Committed, by one of HookWorkers, before
	// the result's message is acknowledged (regression detection). It
	// must be idempotent.
	Finished(ctx context.Context, run *store.Run)
	// Phase is told how long each result waited in its stream before a
	// worker took it ("result_queued"), how long its commit took
	// ("result_commit"; "result_batch_commit" once per transaction), and
	// how long it waited for and spent in Finished ("result_hook_wait",
	// "result_hook"). It must be quick.
	Phase(phase string, d time.Duration)
}

// BaseReporter commits results with Store and ignores every report. The
// zero value has no Store: its CompleteRuns fails, so embed it only where
// CompleteRuns is overridden or never called (as by the coordinator,
// which commits through its dispatcher), or set Store.
type BaseReporter struct {
	Store *store.Store
}

// CompleteRuns commits results with Store.CompleteRuns.
func (b BaseReporter) CompleteRuns(ctx context.Context, results []*protocol.Result) ([]store.ResultOutcome, error) {
	if b.Store == nil {
		return nil, errors.New("ingest: BaseReporter has no Store")
	}
	return b.Store.CompleteRuns(ctx, results)
}

// Committed does nothing.
func (BaseReporter) Committed(context.Context, *store.Run) {}

// Finished does nothing.
func (BaseReporter) Finished(context.Context, *store.Run) {}

// Phase does nothing.
func (BaseReporter) Phase(string, time.Duration) {}
