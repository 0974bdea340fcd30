package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file records alerts and their groups (RecordAlerts, classification,
// the webhook enqueue inside the same transaction). Triage is in
// alert_triage.go, confirmation reruns in alert_confirm.go, the webhook
// outbox in webhooks.go, series in regress_series.go and policies in
// regress_policy.go. Tables: migrations/00020_*, the location range
// 00061_*.

// Alert statuses (the triage lifecycle).
const (
	AlertNew          = "new"
	AlertAcknowledged = "acknowledged"
	AlertInvalid      = "invalid"
	AlertFixed        = "fixed"
	AlertReassigned   = "reassigned"
)

// ValidAlertStatus reports whether status is one of the lifecycle states.
func ValidAlertStatus(status string) bool {
	switch status {
	case AlertNew, AlertAcknowledged, AlertInvalid, AlertFixed, AlertReassigned:
		return true
	}
	return false
}

// Ratio is a relative change. It is infinite when the value before the
// change was 0 (e.g. stall fraction 0 → 0.1); JSON cannot carry that, so it
// is encoded as null there.
type Ratio float64

// MarshalJSON encodes r, with null for a non-finite value.
func (r Ratio) MarshalJSON() ([]byte, error) {
	f := float64(r)
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

// Alert is a confirmed change point of one series.
type Alert struct {
	ID             int64         `json:"id"`
	GroupID        int64         `json:"group_id"`
	Series         RegressSeries `json:"series"`
	Seq            int64         `json:"seq"`
	Direction      string        `json:"direction"`
	RelativeChange Ratio         `json:"relative_change"`
	PValue         float64       `json:"p_value"`
	BeforeMean     float64       `json:"before_mean"`
	AfterMean      float64       `json:"after_mean"`
	BeforeN        int           `json:"before_n"`
	AfterN         int           `json:"after_n"`
	// LastGoodSeq and FirstBadSeq bound where the change happened (see
	// NewAlert); 0 when unknown (alerts recorded before the range was).
	// LastGoodBuild and FirstBadBuild are the builds at those seqs, when
	// known.
	LastGoodSeq   int64           `json:"last_good_seq,omitempty"`
	FirstBadSeq   int64           `json:"first_bad_seq,omitempty"`
	LastGoodBuild string          `json:"last_good_build,omitempty"`
	FirstBadBuild string          `json:"first_bad_build,omitempty"`
	Attribution   json.RawMessage `json:"attribution"`
	Summary       string          `json:"summary"`
	Status        string          `json:"status"`
	Note          string          `json:"note"`
	ReassignedTo  string          `json:"reassigned_to,omitempty"`
	// Devices are the devices whose runs are points of the series, and
	// CarriedByOneDevice says one of them alone shows the change while
	// others of the model do not (alert_devices.go); set by
	// GetAlertGroup only.
	Devices            []AlertDevice `json:"devices,omitempty"`
	CarriedByOneDevice bool          `json:"carried_by_one_device,omitempty"`
	CreatedAt          time.Time     `json:"created_at"`
	UpdatedAt          time.Time     `json:"updated_at"`
}

// AlertGroup gathers the alerts of one suite and lineage at about one build.
type AlertGroup struct {
	ID           int64     `json:"id"`
	Suite        string    `json:"suite"`
	Lineage      string    `json:"lineage"`
	Seq          int64     `json:"seq"`
	Build        string    `json:"build,omitempty"`
	Scope        string    `json:"scope"` // device, platform or global
	ScopeDetail  string    `json:"scope_detail"`
	Summary      string    `json:"summary"`
	Regression   bool      `json:"regression"`
	Status       string    `json:"status"`
	Note         string    `json:"note"`
	ReassignedTo string    `json:"reassigned_to,omitempty"`
	Confirmation string    `json:"confirmation"` // none, pending, confirmed, refuted
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	Alerts       []Alert   `json:"alerts,omitempty"`
}

// NewAlert is an alert to record.
type NewAlert struct {
	SeriesID       int64
	Seq            int64
	Direction      string
	RelativeChange float64
	PValue         float64
	BeforeMean     float64
	AfterMean      float64
	BeforeN        int
	AfterN         int
	// LastGoodSeq is the newest point surely at the old level, FirstBadSeq
	// the newest that may still be the first of the new one (the
	// detector's location range); 0 when unknown. The builds at those
	// seqs are looked up from the series' points.
	LastGoodSeq int64
	FirstBadSeq int64
	Attribution json.RawMessage // JSON array; nil means []
	Summary     string
}

// GroupClassification is what RecordAlerts' classify callback returns.
type GroupClassification struct {
	Scope       string
	ScopeDetail string
	Summary     string
}

// RecordAlertsParams records new alerts of one suite and lineage.
type RecordAlertsParams struct {
	Suite   string
	Lineage string
	Seq     int64  // seq of the change (the group's seq when a group is created)
	Build   string // build at Seq, if known
	// Tolerance: an existing group of the same suite and lineage whose seq
	// is within Tolerance of Seq receives the alerts; so does an existing
	// alert of the same series within Tolerance (the alert is then skipped).
	Tolerance int64
	Alerts    []NewAlert
	// Classify computes the group's scope and summary from all its alerts
	// (old and new). It runs inside the transaction and must not block.
	Classify func(g *AlertGroup) GroupClassification
}

// RecordAlertsResult tells what RecordAlerts did.
type RecordAlertsResult struct {
	Group        *AlertGroup // with Alerts; nil when every alert was a duplicate
	Created      bool        // the group is new
	Inserted     int         // alerts inserted
	Refined      int         // existing alerts updated with newer figures
	WebhookQueue bool        // a webhook delivery was queued
}

// RecordAlerts inserts alerts into the matching open group of their suite
// and lineage (or a new one); an alert already recorded for the same
// series and direction within Tolerance is refined instead (location and
// figures updated, triage state kept). It reclassifies the group and, for
// a new
// group, queues a webhook delivery when the suite's policy has a URL, the
// group contains a regression (or the policy notifies improvements), and
// no confirmation rerun is required (otherwise the group starts with
// confirmation "pending"). Concurrent callers for the same suite and
// lineage are serialised with a transaction-scoped advisory lock, so
// several coordinators never create two groups for one change.
func (s *Store) RecordAlerts(ctx context.Context, p *RecordAlertsParams) (*RecordAlertsResult, error) {
	res := &RecordAlertsResult{}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('lesfarm.alerts:' || $1 || ':' || $2, 0))`, p.Suite, p.Lineage); err != nil {
			return err
		}
		var fresh []NewAlert
		var refinedGroups []int64
		for _, a := range p.Alerts {
			var dupID, dupGroup int64
			err := tx.QueryRow(ctx, `SELECT id, group_id FROM alerts WHERE series_id = $1 AND seq BETWEEN $2 AND $3 AND direction = $4
				ORDER BY abs(seq - $5), id LIMIT 1`, a.SeriesID, a.Seq-p.Tolerance, a.Seq+p.Tolerance, a.Direction, a.Seq).Scan(&dupID, &dupGroup)
			err = notFound(err)
			switch {
			case errors.Is(err, ErrNotFound):
				fresh = append(fresh, a)
			case err != nil:
				return err
			default:
				// The same change seen again, with more data: refine the
				// alert's location and figures (triage state is kept).
				attr := a.Attribution
				if len(attr) == 0 {
					attr = json.RawMessage("[]")
				}
				tag, err := tx.Exec(ctx, `UPDATE alerts SET seq = $2, relative_change = $3, p_value = $4, before_mean = $5,
					after_mean = $6, before_n = $7, after_n = $8, attribution = $9, summary = $10,
					last_good_seq = NULLIF($12::bigint, 0), first_bad_seq = NULLIF($13::bigint, 0),
					last_good_build = `+buildAtSeq("$11", "$12")+`, first_bad_build = `+buildAtSeq("$11", "$13")+`, updated_at = now()
					WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM alerts o WHERE o.series_id = $11 AND o.seq = $2 AND o.id <> $1)`,
					dupID, a.Seq, a.RelativeChange, a.PValue, a.BeforeMean, a.AfterMean, a.BeforeN, a.AfterN, []byte(attr), a.Summary, a.SeriesID,
					a.LastGoodSeq, a.FirstBadSeq)
				if err != nil {
					return err
				}
				res.Refined += int(tag.RowsAffected())
				if a.AfterN <= reclassifyAfterN {
					refinedGroups = append(refinedGroups, dupGroup)
				}
			}
		}
		if len(fresh) == 0 {
			// More data may change the group's scope (another device now
			// shows the change too): reclassify.
			slices.Sort(refinedGroups)
			for _, gid := range slices.Compact(refinedGroups) {
				if err := classify(ctx, tx, gid, p.Classify, false); err != nil {
					return err
				}
			}
			return nil
		}
		regression := false
		for _, a := range fresh {
			regression = regression || a.Direction == "regression"
		}
		policy := RegressPolicy{}
		err := tx.QueryRow(ctx, `SELECT webhook_url, webhook_secret, confirm_rerun, notify_improvements FROM regress_policies WHERE suite = $1`, p.Suite).
			Scan(&policy.WebhookURL, &policy.WebhookSecret, &policy.ConfirmRerun, &policy.NotifyImprovements)
		err = notFound(err)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		var gid int64
		err = tx.QueryRow(ctx, `SELECT id FROM alert_groups WHERE suite = $1 AND lineage = $2 AND seq BETWEEN $3 AND $4
			ORDER BY abs(seq - $5), id LIMIT 1`, p.Suite, p.Lineage, p.Seq-p.Tolerance, p.Seq+p.Tolerance, p.Seq).Scan(&gid)
		err = notFound(err)
		switch {
		case errors.Is(err, ErrNotFound):
			confirmation := "none"
			if policy.ConfirmRerun {
				confirmation = "pending"
			}
			// The build at the change: given, or recorded with the point
			// at that seq of the first alerted series.
			if err := tx.QueryRow(ctx, `INSERT INTO alert_groups (suite, lineage, seq, build, scope, regression, confirmation)
				VALUES ($1, $2, $3, COALESCE(NULLIF($4, ''), (SELECT build FROM regress_points WHERE series_id = $7 AND seq = $3
					ORDER BY recorded_at LIMIT 1), ''), 'device', $5, $6) RETURNING id`,
				p.Suite, p.Lineage, p.Seq, p.Build, regression, confirmation, fresh[0].SeriesID).Scan(&gid); err != nil {
				return err
			}
			res.Created = true
		case err != nil:
			return err
		}
		for _, a := range fresh {
			attr := a.Attribution
			if len(attr) == 0 {
				attr = json.RawMessage("[]")
			}
			tag, err := tx.Exec(ctx, `INSERT INTO alerts (group_id, series_id, seq, direction, relative_change, p_value,
				before_mean, after_mean, before_n, after_n, attribution, summary,
				last_good_seq, first_bad_seq, last_good_build, first_bad_build)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, NULLIF($13::bigint, 0), NULLIF($14::bigint, 0),
					`+buildAtSeq("$2", "$13")+`, `+buildAtSeq("$2", "$14")+`) ON CONFLICT (series_id, seq) DO NOTHING`,
				gid, a.SeriesID, a.Seq, a.Direction, a.RelativeChange, a.PValue, a.BeforeMean, a.AfterMean, a.BeforeN, a.AfterN, []byte(attr), a.Summary,
				a.LastGoodSeq, a.FirstBadSeq)
			if err != nil {
				return err
			}
			res.Inserted += int(tag.RowsAffected())
		}
		if err := classify(ctx, tx, gid, p.Classify, regression); err != nil {
			return err
		}
		if res.Created && !policy.ConfirmRerun && policy.WebhookURL != "" && (regression || policy.NotifyImprovements) {
			if err := enqueueWebhook(ctx, tx, gid, policy); err != nil {
				return err
			}
			res.WebhookQueue = true
		}
		res.Group, err = alertGroup(ctx, tx, gid)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: record alerts: %w", err)
	}
	return res, nil
}

// buildAtSeq is the SQL for the build recorded with the point at seq
// (a parameter) of series (a parameter), ” when none is.
func buildAtSeq(series, seq string) string {
	return `COALESCE((SELECT build FROM regress_points WHERE series_id = ` + series + ` AND seq = ` + seq +
		`::bigint ORDER BY recorded_at LIMIT 1), '')`
}

// reclassifyAfterN bounds reclassification on refinement to recent
// changes: a few results after a change, other devices' results are still
// arriving; later the scope is settled and re-reading it is wasted work.
const reclassifyAfterN = 8

// classify recomputes a group's scope and summary with fn (nil: keep).
func classify(ctx context.Context, tx pgx.Tx, gid int64, fn func(*AlertGroup) GroupClassification, regression bool) error {
	if fn == nil {
		return nil
	}
	g, err := alertGroup(ctx, tx, gid)
	if err != nil {
		return err
	}
	c := fn(g)
	_, err = tx.Exec(ctx, `UPDATE alert_groups SET scope = $2, scope_detail = $3, summary = $4,
		regression = regression OR $5, updated_at = now() WHERE id = $1`, gid, c.Scope, c.ScopeDetail, c.Summary, regression)
	return err
}

func enqueueWebhook(ctx context.Context, tx pgx.Tx, groupID int64, policy RegressPolicy) error {
	_, err := tx.Exec(ctx, `INSERT INTO webhook_deliveries (group_id, url, secret) VALUES ($1, $2, $3)
		ON CONFLICT (group_id, url) WHERE bisection_id IS NULL DO NOTHING`, groupID, policy.WebhookURL, policy.WebhookSecret)
	return err
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const groupColumns = `g.id, g.suite, g.lineage, g.seq, g.build, g.scope, g.scope_detail, g.summary, g.regression,
	g.status, g.note, g.reassigned_to, g.confirmation, g.created_at, g.updated_at`

func scanGroup(r pgx.Row) (*AlertGroup, error) {
	var g AlertGroup
	err := r.Scan(&g.ID, &g.Suite, &g.Lineage, &g.Seq, &g.Build, &g.Scope, &g.ScopeDetail, &g.Summary, &g.Regression,
		&g.Status, &g.Note, &g.ReassignedTo, &g.Confirmation, &g.CreatedAt, &g.UpdatedAt)
	return &g, err
}

// alertGroup loads a group with its alerts (ordered by id).
func alertGroup(ctx context.Context, q querier, id int64) (*AlertGroup, error) {
	g, err := scanGroup(q.QueryRow(ctx, `SELECT `+groupColumns+` FROM alert_groups g WHERE g.id = $1`, id))
	if err != nil {
		return nil, notFound(err)
	}
	rows, err := q.Query(ctx, `SELECT a.id, a.group_id, a.seq, a.direction, a.relative_change, a.p_value, a.before_mean,
		a.after_mean, a.before_n, a.after_n, a.attribution, a.summary, a.status, a.note, a.reassigned_to, a.created_at, a.updated_at,
		COALESCE(a.last_good_seq, 0), COALESCE(a.first_bad_seq, 0), a.last_good_build, a.first_bad_build,
		s.id, s.suite, s.config, s.metric, s.device_model, s.os_major, s.lineage, s.emulated
		FROM alerts a JOIN regress_series s ON s.id = a.series_id WHERE a.group_id = $1 ORDER BY a.id`, id)
	if err != nil {
		return nil, err
	}
	g.Alerts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Alert, error) {
		var a Alert
		var attr []byte
		err := r.Scan(&a.ID, &a.GroupID, &a.Seq, &a.Direction, &a.RelativeChange, &a.PValue, &a.BeforeMean,
			&a.AfterMean, &a.BeforeN, &a.AfterN, &attr, &a.Summary, &a.Status, &a.Note, &a.ReassignedTo, &a.CreatedAt, &a.UpdatedAt,
			&a.LastGoodSeq, &a.FirstBadSeq, &a.LastGoodBuild, &a.FirstBadBuild,
			&a.Series.ID, &a.Series.Suite, &a.Series.Config, &a.Series.Metric, &a.Series.DeviceModel, &a.Series.OSMajor,
			&a.Series.Lineage, &a.Series.Emulated)
		a.Attribution = attr
		return a, err
	})
	return g, err
}
