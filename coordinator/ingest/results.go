package ingest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// resultLoop fetches results and hands each one to a worker as soon as it
// arrives (at most ResultWorkers at once). Each result is its own
// transaction; one that fails is redelivered. A committed result goes to
// the hook stage (hookQueue), which calls Reporter.Finished and acknowledges it, and
// never holds the workers back. On Stop the results already fetched are
// applied, and their hooks run for up to AckWait, before it returns.
func (i *Ingester) resultLoop(ctx context.Context, c jetstream.Consumer) {
	sem := make(chan struct{}, i.cfg.ResultWorkers)
	var wg sync.WaitGroup
	hooks := newHookQueue()
	var hwg sync.WaitGroup
	for range i.cfg.HookWorkers {
		hwg.Go(func() {
			for {
				h, ok := hooks.pop()
				if !ok {
					return
				}
				i.finish(ctx, h.h)
				hooks.done(h)
			}
		})
	}
	keepDone := make(chan struct{})
	hwg.Go(func() {
		t := time.NewTicker(i.cfg.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-keepDone:
				return
			case now := <-t.C:
				hooks.keepAlive(now, i.cfg.AckWait/3)
			}
		}
	})
	defer func() {
		wg.Wait()
		hooks.close(i.cfg.AckWait)
		close(keepDone)
		hwg.Wait()
	}()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		msgs, err := fetchNow(c, i.cfg.ResultBatch, resultIdleWait)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			i.log.WarnContext(ctx, "ingest: fetch failed", "consumer", "results", "err", err)
			sleep(ctx, backoff)
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), i.cfg.AckWait)
			defer cancel()
			i.resultBatch(mctx, msgs, hooks)
		})
	}
}

// resultBatch applies a batch of fetched results in one transaction
// (store.CompleteRuns) and hands each committed one to the hook stage
// (hooks), which acknowledges it after Reporter.Finished. Malformed results are
// terminated, stale ones too (each is fenced by its own token). When the
// transaction fails, the results are applied one by one, so one that the
// database refuses is redelivered alone and does not hold back the others.
func (i *Ingester) resultBatch(ctx context.Context, msgs []jetstream.Msg, hooks *hookQueue) {
	var ok []jetstream.Msg
	var results []*protocol.Result
	for _, m := range msgs {
		res, err := decodeResult(m)
		if err != nil {
			i.reject(ctx, m, err, "malformed result")
			continue
		}
		ok, results = append(ok, m), append(results, res)
	}
	if len(results) == 0 {
		return
	}
	if ok, results = i.checkResults(ctx, ok, results); len(results) == 0 { // validate.go
		return
	}
	start := time.Now()
	outs, err := i.cfg.Reporter.CompleteRuns(ctx, results)
	if err != nil {
		i.dbErrors.Add(1)
		i.log.WarnContext(ctx, "ingest: result batch failed, applying one by one", "results", len(results), "err", err)
		for k, m := range ok {
			if err := i.applied(ctx, m, results[k], hooks, start, func() (*store.Run, error) { return i.cfg.Store.CompleteRun(ctx, results[k]) }); err != nil {
				i.dbErrors.Add(1)
				i.log.ErrorContext(ctx, "ingest: result failed, will be redelivered", "subject", m.Subject(), "err", err)
				_ = m.NakWithDelay(100 * time.Millisecond)
			}
		}
		return
	}
	commit := time.Since(start)
	for k, m := range ok {
		_ = i.applied(ctx, m, results[k], hooks, start, func() (*store.Run, error) { return outs[k].Run, outs[k].Err })
	}
	i.cfg.Reporter.Phase("result_batch_commit", commit)
	i.resultBatches.Add(1)
}

// decodeResult decodes a result message and checks it against its subject.
func decodeResult(m jetstream.Msg) (*protocol.Result, error) {
	res, err := protocol.DecodeResult(m.Data())
	if err == nil {
		err = checkSubject("result", m.Subject(), res.RunID, res.DeviceID)
	}
	if err == nil {
		err = checkMsgID("result", m, res.DeviceID, res.RunID, res.Token, 0)
	}
	return res, err
}

// applied handles the outcome of one result's commit (complete returns
// it: the batch's outcome, or a commit of its own): a stale result is
// terminated, a committed or already-recorded one is reported Committed and goes to the
// hook stage. A database error is returned (the caller naks the message).
func (i *Ingester) applied(ctx context.Context, m jetstream.Msg, res *protocol.Result, hooks *hookQueue, start time.Time,
	complete func() (*store.Run, error)) error {
	run, err := complete()
	h := committedResult{m: m, run: run, stored: start, commit: time.Since(start)}
	if err == nil {
		i.cfg.Reporter.Phase("result_queued", storedAgo(m, start))
		i.cfg.Reporter.Phase("result_commit", h.commit)
	}
	switch {
	case errors.Is(err, store.ErrAlreadyCompleted):
		// Committed before, but the ack was lost (crash or timeout): run
		// the hooks again (they must be idempotent) and acknowledge.
		i.log.DebugContext(ctx, "ingest: result redelivered after commit", "run_id", res.RunID)
		h.redeliver = true
	case errors.Is(err, store.ErrStaleToken):
		i.stale.Add(1)
		i.rejects.Add("result", "stale_token")
		i.log.WarnContext(ctx, "ingest: stale result rejected", "run_id", res.RunID, "token", res.Token, "device_id", res.DeviceID)
		_ = m.TermWithReason("stale fencing token")
		return nil
	case err != nil:
		return err
	}
	i.cfg.Reporter.Committed(ctx, run)
	// The hook runs before the ack: a crash in between redelivers the
	// result, which then takes the ErrAlreadyCompleted path above.
	hooks.push(h)
	return nil
}
