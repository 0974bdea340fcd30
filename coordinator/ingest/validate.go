package ingest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// Trust no device (docs/security.md). Beyond decoding, every message is
// checked at this boundary before anything is stored:
//
//   - its Nats-Msg-Id must name the device of the subject it came on and
//     the run, token and seq of its body (protocol.CheckDataMsgID), so a
//     message id seen in the stream's de-duplication window is always the
//     publisher's own;
//   - its values must fit the run's assignment and physical ranges
//     (protocol.RunBounds): a config the run has, finite, non-negative,
//     bounded numbers;
//   - a telemetry batch is stored once: a re-send with other content is
//     refused (store.TelemetryStats.Conflicts).
//
// A telemetry batch that fails is terminated; a result that fails ends
// its run as failed, with the reason, so a run never hangs or goes green on
// garbage. A succeeded result without one valid measurement fails its run
// too. Every refusal is counted against the device whose subject carried
// it (store.RecordRejections), which quarantines a device that keeps
// sending garbage.

// maxCachedBounds bounds the runs whose bounds are cached.
const maxCachedBounds = 16384

// boundsCache holds runs' bounds, which never change.
type boundsCache struct {
	mu sync.Mutex
	m  map[int64]*protocol.RunBounds
}

// runBounds returns the bounds of the runs ids that exist, from the cache
// or the store.
func (i *Ingester) runBounds(ctx context.Context, ids []int64) (map[int64]*protocol.RunBounds, error) {
	c := &i.bounds
	out := make(map[int64]*protocol.RunBounds, len(ids))
	var miss []int64
	c.mu.Lock()
	for _, id := range ids {
		if b, ok := c.m[id]; ok {
			out[id] = b
		} else if _, dup := out[id]; !dup {
			miss = append(miss, id)
		}
	}
	c.mu.Unlock()
	if len(miss) == 0 {
		return out, nil
	}
	got, err := i.cfg.Store.RunBounds(ctx, miss)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m)+len(got) > maxCachedBounds {
		c.m = make(map[int64]*protocol.RunBounds, len(got))
	}
	for id, b := range got {
		c.m[id] = b
		out[id] = b
	}
	return out, nil
}

// checkMsgID checks m's Nats-Msg-Id against its subject and body.
func checkMsgID(typ string, m jetstream.Msg, deviceID string, runID, token int64, seq uint64) error {
	var id string
	if h := m.Headers(); h != nil {
		id = h.Get(nats.MsgIdHdr)
	}
	return protocol.CheckDataMsgID(typ, id, m.Subject(), deviceID, runID, token, seq)
}

// invalidValues wraps a RunBounds error as an invalid message.
func invalidValues(typ string, err error) error {
	return &protocol.DecodeError{Type: typ, Kind: protocol.RejectInvalid, Err: fmt.Errorf("values: %w", err)}
}

// checkTelemetry drops from b (rejecting their messages) the batches whose
// samples do not fit their run's bounds. Runs the store does not know are
// left to InsertTelemetry (stale).
func (i *Ingester) checkTelemetry(ctx context.Context, b *telBatch) error {
	if len(b.batches) == 0 {
		return nil
	}
	ids := make([]int64, len(b.batches))
	for k, tb := range b.batches {
		ids[k] = tb.RunID
	}
	bounds, err := i.runBounds(ctx, ids)
	if err != nil {
		return err
	}
	keep := 0
	for k, tb := range b.batches {
		if rb, ok := bounds[tb.RunID]; ok {
			if err := rb.CheckTelemetry(tb); err != nil {
				i.reject(ctx, b.msgs[k], invalidValues("telemetry", err), "invalid telemetry")
				continue
			}
		}
		b.batches[keep], b.msgs[keep] = tb, b.msgs[k]
		keep++
	}
	clear(b.batches[keep:])
	clear(b.msgs[keep:])
	b.batches, b.msgs = b.batches[:keep], b.msgs[:keep]
	return nil
}

// rejectConflict terminates a telemetry message whose (run, seq) is
// stored with other content, and counts it against its device.
func (i *Ingester) rejectConflict(ctx context.Context, m jetstream.Msg, tb *protocol.TelemetryBatch) {
	err := &protocol.DecodeError{Type: "telemetry", Kind: protocol.RejectInvalid,
		Err: fmt.Errorf("batch seq %d of run %d re-sent with other content (a batch is written once)", tb.Seq, tb.RunID)}
	i.reject(ctx, m, err, "telemetry re-sent with other content")
}

// checkResults checks each result against its run's bounds. A result
// that does not fit is not stored as it came: it becomes a failed result
// without configs whose error says why (its run fails, and the device
// is charged with a rejection). A succeeded result none of whose configs
// is a valid measurement becomes a failed one too: a run that measured
// nothing must not go green. A database error leaves the results as they
// are (the store still fences them). Then the results whose telemetry is
// not all stored yet are held back (completeness.go); the ones to commit
// now are returned.
func (i *Ingester) checkResults(ctx context.Context, msgs []jetstream.Msg, results []*protocol.Result) ([]jetstream.Msg, []*protocol.Result) {
	ids := make([]int64, len(results))
	for k, r := range results {
		ids[k] = r.RunID
	}
	bounds, err := i.runBounds(ctx, ids)
	if err != nil {
		i.log.WarnContext(ctx, "ingest: run bounds unavailable, results not checked against their runs", "err", err)
	}
	for k, res := range results {
		if err := ScreenResult(bounds[res.RunID], res); err != nil {
			i.rejected.Add(1)
			i.rejects.Add("result", "invalid_values")
			i.noteReject(msgs[k].Subject(), "result: "+err.Error())
			i.log.WarnContext(ctx, "ingest: result values rejected, run fails", "run_id", res.RunID, "device_id", res.DeviceID, "err", err)
		}
	}
	return i.holdIncomplete(ctx, msgs, results)
}

// ScreenResult applies ingest's value checks to res, a decoded result,
// against its run's bounds rb (nil when the store does not know the run:
// CompleteRun's fencing refuses it then). A result that does not fit
// becomes a failed result without configs whose error says why, and the
// misfit is returned (ingest charges it to the device). A succeeded result
// with no valid measurement becomes a failed one, and nil is returned.
// What it leaves is what the store may hold: FuzzIngestThenRead stores it
// and reads it back through every read endpoint.
func ScreenResult(rb *protocol.RunBounds, res *protocol.Result) error {
	if rb != nil {
		if err := rb.CheckResult(res); err != nil {
			res.Outcome, res.Configs = protocol.OutcomeFailed, nil
			res.Error = clip("result rejected at ingest: " + err.Error())
			return err
		}
	}
	if why := noMeasurement(res); why != "" {
		res.Outcome, res.Error = protocol.OutcomeFailed, clip(why)
	}
	return nil
}

// noMeasurement says why a succeeded result measured nothing: it has
// configs and none is valid (every one invalid or failed). It returns ""
// for a result with a valid config, or that did not succeed.
func noMeasurement(res *protocol.Result) string {
	if res.Outcome != protocol.OutcomeSucceeded || len(res.Configs) == 0 {
		return ""
	}
	first := ""
	for k := range res.Configs {
		c := &res.Configs[k]
		if c.Valid && c.Error == "" {
			return ""
		}
		if first == "" {
			why := c.Error
			if why == "" {
				why = c.InvalidReason
			}
			first = fmt.Sprintf("%s: %s", c.ConfigKey, why)
		}
	}
	return fmt.Sprintf("no valid measurement: all %d configs are invalid or failed (%s)", len(res.Configs), first)
}

func clip(s string) string {
	if len(s) > protocol.MaxTextLen {
		return s[:protocol.MaxTextLen-3] + "..."
	}
	return s
}

// noteReject queues a rejection for the device named by subject (the
// publisher NATS authenticated); a subject without a device (the legacy
// run-only form) charges nobody.
func (i *Ingester) noteReject(subject, reason string) {
	dev, _, err := protocol.ParseDataSubject(subject)
	if err != nil || dev == "" {
		return
	}
	i.rejMu.Lock()
	i.rejPending = append(i.rejPending, store.Rejection{DeviceID: dev, Reason: reason})
	i.rejMu.Unlock()
	select {
	case i.rejWake <- struct{}{}:
	default:
	}
}

// rejectionLoop records queued rejections as they come (batched while a
// write is in flight) until ctx ends, then records what is left.
func (i *Ingester) rejectionLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			i.flushRejections(fctx)
			cancel()
			return
		case <-i.rejWake:
			i.flushRejections(ctx)
		}
	}
}

// flushRejections records the queued rejections; on a database error they
// are queued again for the next flush.
func (i *Ingester) flushRejections(ctx context.Context) {
	i.rejMu.Lock()
	rs := i.rejPending
	i.rejPending = nil
	i.rejMu.Unlock()
	if len(rs) == 0 {
		return
	}
	q, err := i.cfg.Store.RecordRejections(ctx, &store.RecordRejectionsParams{Rejections: rs,
		QuarantineAfter: i.cfg.QuarantineAfter, QuarantineWindow: i.cfg.QuarantineWindow})
	if err != nil {
		i.log.WarnContext(ctx, "ingest: rejections not recorded, retrying", "rejections", len(rs), "err", err)
		i.rejMu.Lock()
		if len(i.rejPending) < 100000 {
			i.rejPending = append(rs, i.rejPending...)
		}
		i.rejMu.Unlock()
		return
	}
	i.rejRecorded.Add(uint64(len(rs)))
	for _, d := range q {
		i.quarantined.Add(1)
		i.log.WarnContext(ctx, "ingest: device quarantined (drained)", "device_id", d.DeviceID, "reason", d.Reason)
	}
}
