package store

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Rejection is one message ingest refused from a device (migration 00050).
type Rejection struct {
	// DeviceID is the device whose subject carried the message: the
	// publisher NATS authenticated, never the device its body names.
	DeviceID string
	// Reason says why, in one line (clipped).
	Reason string
}

// RecordRejectionsParams are the arguments of RecordRejections.
type RecordRejectionsParams struct {
	Rejections []Rejection
	// QuarantineAfter drains a device once this many of its messages were
	// rejected within one QuarantineWindow; 0 means 20.
	QuarantineAfter int
	// QuarantineWindow is the counting window; 0 means 10 minutes.
	QuarantineWindow time.Duration
}

// Quarantined is a device RecordRejections drained.
type Quarantined struct {
	DeviceID string
	Reason   string
}

// RecordRejections counts rejected messages against their devices, in one
// transaction: each device's total, its last reason and its count in the
// current fixed window (a window older than QuarantineWindow starts over).
// A device whose window count reaches QuarantineAfter is drained (it
// finishes its current run and gets no new ones) with a drain_reason; the
// devices drained by this call are returned. Unknown devices are skipped.
func (s *Store) RecordRejections(ctx context.Context, p *RecordRejectionsParams) ([]Quarantined, error) {
	if len(p.Rejections) == 0 {
		return nil, nil
	}
	after := cmp.Or(p.QuarantineAfter, 20)
	window := cmp.Or(p.QuarantineWindow, 10*time.Minute)
	n := map[string]int64{}
	last := map[string]string{}
	var ids []string
	for _, r := range p.Rejections {
		if n[r.DeviceID] == 0 {
			ids = append(ids, r.DeviceID)
		}
		n[r.DeviceID]++
		last[r.DeviceID] = clipText(r.Reason)
	}
	counts, reasons := make([]int64, len(ids)), make([]string, len(ids))
	for k, id := range ids {
		counts[k], reasons[k] = n[id], last[id]
	}
	var out []Quarantined
	err := s.tx(ctx, func(tx pgx.Tx) error {
		out = out[:0]
		rows, err := tx.Query(ctx, `UPDATE devices d SET
				rejected_messages = d.rejected_messages + u.n,
				last_rejection = u.reason,
				last_rejected_at = now(),
				rejection_window_start = CASE WHEN d.rejection_window_start IS NULL OR d.rejection_window_start < now() - make_interval(secs => $4)
					THEN now() ELSE d.rejection_window_start END,
				rejection_window_count = CASE WHEN d.rejection_window_start IS NULL OR d.rejection_window_start < now() - make_interval(secs => $4)
					THEN u.n ELSE d.rejection_window_count + u.n END
			FROM unnest($1::text[], $2::bigint[], $3::text[]) AS u(id, n, reason)
			WHERE d.id = u.id
			RETURNING d.id, d.rejection_window_count, d.drained, u.reason`, ids, counts, reasons, window.Seconds())
		if err != nil {
			return err
		}
		var drain []string
		var why []string
		for rows.Next() {
			var id, reason string
			var inWindow int64
			var drained bool
			if err := rows.Scan(&id, &inWindow, &drained, &reason); err != nil {
				rows.Close()
				return err
			}
			if !drained && inWindow >= int64(after) {
				drain = append(drain, id)
				why = append(why, clipText(fmt.Sprintf("quarantined: %d messages rejected within %s; last: %s", inWindow, window, reason)))
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(drain) == 0 {
			return nil
		}
		rows, err = tx.Query(ctx, `UPDATE devices d SET drained = true, drain_reason = u.why
			FROM unnest($1::text[], $2::text[]) AS u(id, why) WHERE d.id = u.id AND NOT d.drained RETURNING d.id, d.drain_reason`, drain, why)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var q Quarantined
			if err := rows.Scan(&q.DeviceID, &q.Reason); err != nil {
				return err
			}
			out = append(out, q)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("store: record rejections: %w", err)
	}
	return out, nil
}

// DeviceRejections is a device's rejection record.
type DeviceRejections struct {
	// Total is every message of the device ingest rejected.
	Total int64
	// Last and LastAt are the latest rejection's reason and time (zero
	// when none).
	Last   string
	LastAt *time.Time
	// InWindow is the count in the current quarantine window.
	InWindow int
	// DrainReason says why the device was drained by quarantine ('' when
	// it is not drained, or an operator drained it).
	DrainReason string
}

// GetDeviceRejections returns the rejection record of device id, or
// ErrNotFound.
func (s *Store) GetDeviceRejections(ctx context.Context, id string) (*DeviceRejections, error) {
	var r DeviceRejections
	err := s.pool.QueryRow(ctx, `SELECT rejected_messages, last_rejection, last_rejected_at, rejection_window_count, drain_reason
		FROM devices WHERE id = $1`, id).Scan(&r.Total, &r.Last, &r.LastAt, &r.InWindow, &r.DrainReason)
	if err = notFound(err); err != nil {
		return nil, fmt.Errorf("store: device rejections: %w", err)
	}
	return &r, nil
}
