package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// Completeness (issue 29, finding 7). A result says how many telemetry
// samples its agent sent; the telemetry consumer stores them apart from
// the results consumer, usually a moment before the result. A succeeded
// result of the run's current attempt is committed only once the stored
// samples reach the count it reports: until then its message is
// redelivered (the run stays running at 100%, "reporting"), and past
// TelemetryWait from when it reached its stream the attempt ends as an
// infrastructure failure (outcome aborted: requeued while attempts remain)
// whose error gives both counts. A result whose agent reported dropped
// telemetry (its bounded buffer overflowed) is not held: what it dropped
// will never come, and the counts stay visible on the run.
//
// Every result's sent counts are recorded (store.RecordTelemetrySent) so
// GET /v1/runs/{id} shows sent and stored side by side.

// holdRedelivery is how soon a held result is looked at again.
const holdRedelivery = 250 * time.Millisecond

// holdIncomplete records the results' sent counts and returns the results
// to commit now: those whose telemetry is complete, that did not succeed,
// that are not the run's current attempt (the store rejects them), or
// whose wait is over (turned into infrastructure failures). The others
// are redelivered later.
func (i *Ingester) holdIncomplete(ctx context.Context, msgs []jetstream.Msg, results []*protocol.Result) ([]jetstream.Msg, []*protocol.Result) {
	sent := make([]store.TelemetrySent, 0, len(results))
	var ids []int64
	for _, r := range results {
		sent = append(sent, store.TelemetrySent{RunID: r.RunID, Token: r.Token, Batches: r.TelemetryBatches, Samples: r.TelemetrySamples, DroppedBatch: r.TelemetryDropped})
		if mustBeComplete(r) {
			ids = append(ids, r.RunID)
		}
	}
	if err := i.cfg.Store.RecordTelemetrySent(ctx, sent); err != nil {
		i.log.WarnContext(ctx, "ingest: telemetry counts not recorded", "err", err)
	}
	if len(ids) == 0 {
		return msgs, results
	}
	stored, err := i.cfg.Store.StoredSamples(ctx, ids)
	if err != nil {
		// Cannot tell: hold them all (redelivered), as for a failed commit.
		i.log.WarnContext(ctx, "ingest: stored samples unknown, results redelivered", "err", err)
		stored = nil
	}
	now := time.Now()
	keepMsgs, keep := msgs[:0:0], results[:0:0]
	for k, r := range results {
		m := msgs[k]
		rs, known := stored[r.RunID]
		if !mustBeComplete(r) || (stored != nil && !known) || (known && (rs.Token != r.Token || rs.Stored >= int64(min(r.TelemetrySamples, 1<<62)))) {
			keepMsgs, keep = append(keepMsgs, m), append(keep, r)
			continue
		}
		if waited := storedAgo(m, now); stored != nil && waited >= i.cfg.TelemetryWait {
			i.log.WarnContext(ctx, "ingest: telemetry incomplete past the wait, attempt fails as infrastructure",
				"run_id", r.RunID, "device_id", r.DeviceID, "samples_sent", r.TelemetrySamples, "samples_stored", rs.Stored)
			r.Outcome, r.Configs = protocol.OutcomeAborted, nil
			r.Error = clip(fmt.Sprintf("telemetry incomplete: %d of %d samples stored after %s (infrastructure)", rs.Stored, r.TelemetrySamples, i.cfg.TelemetryWait))
			keepMsgs, keep = append(keepMsgs, m), append(keep, r)
			continue
		}
		i.held.Add(1)
		_ = m.NakWithDelay(holdRedelivery)
	}
	return keepMsgs, keep
}

// mustBeComplete reports whether r's run may go green only with all its
// telemetry stored: a succeeded result that sent samples and dropped none.
func mustBeComplete(r *protocol.Result) bool {
	return r.Outcome == protocol.OutcomeSucceeded && r.TelemetrySamples > 0 && r.TelemetryDropped == 0
}
