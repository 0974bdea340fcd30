package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file is the regression-detection area (coordinator/regress): series
// and their points, alert groups and alerts with their triage lifecycle,
// per-suite policies and the webhook outbox. Tables: migrations/00020_*.

// RegressSeries is one series key with its id.
type RegressSeries struct {
	ID          int64  `json:"id"`
	Suite       string `json:"suite"`
	Config      string `json:"config"`
	Metric      string `json:"metric"`
	DeviceModel string `json:"device_model"`
	OSMajor     string `json:"os_major"`
	Lineage     string `json:"lineage"`
	Emulated    bool   `json:"emulated"`
}

// RegressPoint is one stored point of a series.
type RegressPoint struct {
	SeriesID int64   `json:"-"`
	Seq      int64   `json:"seq"`
	RunKey   string  `json:"run,omitempty"`
	Value    float64 `json:"value"`
	Stddev   float64 `json:"stddev,omitempty"`
	N        int     `json:"n,omitempty"`
	Build    string  `json:"build,omitempty"`
}

// AddRegressPointParams is one observation to record.
type AddRegressPointParams struct {
	Series RegressSeries // ID ignored; the key fields select or create the series
	Point  RegressPoint  // SeriesID ignored
}

// AddRegressPoints records points, creating their series as needed, in one
// transaction. Re-adding a (series, seq, run) replaces its value, so
// replays are idempotent. It returns the series id of each point, in order.
func (s *Store) AddRegressPoints(ctx context.Context, ps []AddRegressPointParams) ([]int64, error) {
	ids := make([]int64, len(ps))
	err := s.tx(ctx, func(tx pgx.Tx) error {
		for i, p := range ps {
			k := p.Series
			if k.Suite == "" || k.Metric == "" {
				return fmt.Errorf("store: regress point %d: suite and metric are required", i)
			}
			err := tx.QueryRow(ctx, `
				INSERT INTO regress_series (suite, config, metric, device_model, os_major, lineage, emulated)
				VALUES ($1, $2, $3, $4, $5, $6, $7)
				ON CONFLICT (suite, config, metric, device_model, os_major, lineage, emulated)
				DO UPDATE SET suite = EXCLUDED.suite
				RETURNING id`,
				k.Suite, k.Config, k.Metric, k.DeviceModel, k.OSMajor, k.Lineage, k.Emulated).Scan(&ids[i])
			if err != nil {
				return fmt.Errorf("store: regress series: %w", err)
			}
			pt := p.Point
			_, err = tx.Exec(ctx, `
				INSERT INTO regress_points (series_id, seq, run_key, value, stddev, n, build)
				VALUES ($1, $2, $3, $4, $5, $6, $7)
				ON CONFLICT (series_id, seq, run_key)
				DO UPDATE SET value = EXCLUDED.value, stddev = EXCLUDED.stddev, n = EXCLUDED.n, build = EXCLUDED.build`,
				ids[i], pt.Seq, pt.RunKey, pt.Value, pt.Stddev, pt.N, pt.Build)
			if err != nil {
				return fmt.Errorf("store: regress point: %w", err)
			}
		}
		return nil
	})
	return ids, err
}

// RegressSeriesByID returns one series.
func (s *Store) RegressSeriesByID(ctx context.Context, id int64) (*RegressSeries, error) {
	var r RegressSeries
	err := s.pool.QueryRow(ctx, `SELECT id, suite, config, metric, device_model, os_major, lineage, emulated
		FROM regress_series WHERE id = $1`, id).Scan(&r.ID, &r.Suite, &r.Config, &r.Metric, &r.DeviceModel, &r.OSMajor, &r.Lineage, &r.Emulated)
	if err != nil {
		return nil, notFound(err)
	}
	return &r, nil
}

// ListRegressSeries returns the series of suite and lineage, optionally
// only of config (config "" means all), ordered by id.
func (s *Store) ListRegressSeries(ctx context.Context, suite, lineage, config string) ([]RegressSeries, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, suite, config, metric, device_model, os_major, lineage, emulated
		FROM regress_series WHERE suite = $1 AND lineage = $2 AND ($3 = '' OR config = $3) ORDER BY id`, suite, lineage, config)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RegressSeries, error) {
		var x RegressSeries
		err := r.Scan(&x.ID, &x.Suite, &x.Config, &x.Metric, &x.DeviceModel, &x.OSMajor, &x.Lineage, &x.Emulated)
		return x, err
	})
}

// RegressPoints returns up to limit points of a series with seq in
// [fromSeq, toSeq], the most recent ones when there are more, ordered by
// seq then recording time.
func (s *Store) RegressPoints(ctx context.Context, seriesID, fromSeq, toSeq int64, limit int) ([]RegressPoint, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT series_id, seq, run_key, value, stddev, n, build FROM (
			SELECT * FROM regress_points WHERE series_id = $1 AND seq BETWEEN $2 AND $3
			ORDER BY seq DESC, recorded_at DESC LIMIT $4) p
		ORDER BY seq, recorded_at`, seriesID, fromSeq, toSeq, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RegressPoint, error) {
		var p RegressPoint
		err := r.Scan(&p.SeriesID, &p.Seq, &p.RunKey, &p.Value, &p.Stddev, &p.N, &p.Build)
		return p, err
	})
}

// RegressPolicy is the per-suite regression policy. The zero value (no
// webhook, no confirmation) applies to suites without a stored policy.
type RegressPolicy struct {
	Suite              string    `json:"suite"`
	WebhookURL         string    `json:"webhook_url"`
	WebhookSecret      string    `json:"-"`
	ConfirmRerun       bool      `json:"confirm_rerun"`
	NotifyImprovements bool      `json:"notify_improvements"`
	UpdatedAt          time.Time `json:"updated_at"`
}

// SetRegressPolicy creates or replaces the policy of p.Suite.
func (s *Store) SetRegressPolicy(ctx context.Context, p *RegressPolicy) error {
	if p.Suite == "" {
		return errors.New("store: regress policy: suite is required")
	}
	if p.WebhookURL != "" && !strings.HasPrefix(p.WebhookURL, "http://") && !strings.HasPrefix(p.WebhookURL, "https://") {
		return fmt.Errorf("store: regress policy: webhook url %q must be http(s)", p.WebhookURL)
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO regress_policies (suite, webhook_url, webhook_secret, confirm_rerun, notify_improvements)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (suite) DO UPDATE SET webhook_url = EXCLUDED.webhook_url, webhook_secret = EXCLUDED.webhook_secret,
			confirm_rerun = EXCLUDED.confirm_rerun, notify_improvements = EXCLUDED.notify_improvements, updated_at = now()`,
		p.Suite, p.WebhookURL, p.WebhookSecret, p.ConfirmRerun, p.NotifyImprovements)
	return err
}

// GetRegressPolicy returns the policy of suite, or the zero policy (with
// Suite set) when none is stored.
func (s *Store) GetRegressPolicy(ctx context.Context, suite string) (*RegressPolicy, error) {
	p := RegressPolicy{Suite: suite}
	err := s.pool.QueryRow(ctx, `SELECT webhook_url, webhook_secret, confirm_rerun, notify_improvements, updated_at
		FROM regress_policies WHERE suite = $1`, suite).Scan(&p.WebhookURL, &p.WebhookSecret, &p.ConfirmRerun, &p.NotifyImprovements, &p.UpdatedAt)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	return &p, nil
}

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
	ID             int64           `json:"id"`
	GroupID        int64           `json:"group_id"`
	Series         RegressSeries   `json:"series"`
	Seq            int64           `json:"seq"`
	Direction      string          `json:"direction"`
	RelativeChange Ratio           `json:"relative_change"`
	PValue         float64         `json:"p_value"`
	BeforeMean     float64         `json:"before_mean"`
	AfterMean      float64         `json:"after_mean"`
	BeforeN        int             `json:"before_n"`
	AfterN         int             `json:"after_n"`
	Attribution    json.RawMessage `json:"attribution"`
	Summary        string          `json:"summary"`
	Status         string          `json:"status"`
	Note           string          `json:"note"`
	ReassignedTo   string          `json:"reassigned_to,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
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
	Attribution    json.RawMessage // JSON array; nil means []
	Summary        string
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
			switch {
			case errors.Is(err, pgx.ErrNoRows):
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
					after_mean = $6, before_n = $7, after_n = $8, attribution = $9, summary = $10, updated_at = now()
					WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM alerts o WHERE o.series_id = $11 AND o.seq = $2 AND o.id <> $1)`,
					dupID, a.Seq, a.RelativeChange, a.PValue, a.BeforeMean, a.AfterMean, a.BeforeN, a.AfterN, []byte(attr), a.Summary, a.SeriesID)
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
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		var gid int64
		err = tx.QueryRow(ctx, `SELECT id FROM alert_groups WHERE suite = $1 AND lineage = $2 AND seq BETWEEN $3 AND $4
			ORDER BY abs(seq - $5), id LIMIT 1`, p.Suite, p.Lineage, p.Seq-p.Tolerance, p.Seq+p.Tolerance, p.Seq).Scan(&gid)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
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
				before_mean, after_mean, before_n, after_n, attribution, summary)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (series_id, seq) DO NOTHING`,
				gid, a.SeriesID, a.Seq, a.Direction, a.RelativeChange, a.PValue, a.BeforeMean, a.AfterMean, a.BeforeN, a.AfterN, []byte(attr), a.Summary)
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
		ON CONFLICT (group_id, url) DO NOTHING`, groupID, policy.WebhookURL, policy.WebhookSecret)
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
			&a.Series.ID, &a.Series.Suite, &a.Series.Config, &a.Series.Metric, &a.Series.DeviceModel, &a.Series.OSMajor,
			&a.Series.Lineage, &a.Series.Emulated)
		a.Attribution = attr
		return a, err
	})
	return g, err
}

// GetAlertGroup returns a group with its alerts, or ErrNotFound.
func (s *Store) GetAlertGroup(ctx context.Context, id int64) (*AlertGroup, error) {
	return alertGroup(ctx, s.pool, id)
}

// ListAlertGroupsParams filters ListAlertGroups; zero fields do not filter.
type ListAlertGroupsParams struct {
	Suite        string
	Lineage      string // "" = every lineage
	Status       string
	Scope        string
	DeviceModel  string // groups with an alert on this device model
	Metric       string // groups with an alert on this metric
	Regression   *bool
	Confirmation string
	Since        time.Time
	Limit        int // default 50, at most 500
	BeforeID     int64
}

// ListAlertGroups returns groups, newest first, without their alerts.
func (s *Store) ListAlertGroups(ctx context.Context, p *ListAlertGroupsParams) ([]AlertGroup, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 500)
	var since any
	if !p.Since.IsZero() {
		since = p.Since
	}
	rows, err := s.pool.Query(ctx, `SELECT `+groupColumns+` FROM alert_groups g
		WHERE ($1 = '' OR g.suite = $1) AND ($2 = '' OR g.status = $2) AND ($3 = '' OR g.scope = $3)
		  AND ($4 = '' OR EXISTS (SELECT 1 FROM alerts a JOIN regress_series s ON s.id = a.series_id WHERE a.group_id = g.id AND s.device_model = $4))
		  AND ($5 = '' OR EXISTS (SELECT 1 FROM alerts a JOIN regress_series s ON s.id = a.series_id WHERE a.group_id = g.id AND s.metric = $5))
		  AND ($6::boolean IS NULL OR g.regression = $6) AND ($7 = '' OR g.confirmation = $7)
		  AND ($8::timestamptz IS NULL OR g.created_at >= $8) AND ($9 = 0 OR g.id < $9)
		  AND ($11 = '' OR g.lineage = $11)
		ORDER BY g.id DESC LIMIT $10`,
		p.Suite, p.Status, p.Scope, p.DeviceModel, p.Metric, p.Regression, p.Confirmation, since, p.BeforeID, limit, p.Lineage)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (AlertGroup, error) {
		g, err := scanGroup(r)
		return *g, err
	})
}

// TriageParams changes the lifecycle state of an alert or a group.
type TriageParams struct {
	ID           int64
	Status       string // new, acknowledged, invalid, fixed, reassigned
	Note         string
	ReassignedTo string // the build the regression really belongs to; required for "reassigned"
}

func (p *TriageParams) validate() error {
	if !ValidAlertStatus(p.Status) {
		return fmt.Errorf("store: alert status %q: want new, acknowledged, invalid, fixed or reassigned", p.Status)
	}
	if p.Status == AlertReassigned && strings.TrimSpace(p.ReassignedTo) == "" {
		return errors.New("store: status reassigned needs the build it is reassigned to")
	}
	if len(p.Note) > 10000 {
		return errors.New("store: note longer than 10000 characters")
	}
	return nil
}

// TriageAlertGroup sets the status and note of a group and of all its
// alerts, and returns the updated group. ErrNotFound for an unknown id.
func (s *Store) TriageAlertGroup(ctx context.Context, p *TriageParams) (*AlertGroup, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	var g *AlertGroup
	err := s.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE alert_groups SET status = $2, note = $3, reassigned_to = $4, updated_at = now() WHERE id = $1`,
			p.ID, p.Status, p.Note, p.ReassignedTo)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		if _, err := tx.Exec(ctx, `UPDATE alerts SET status = $2, note = $3, reassigned_to = $4, updated_at = now() WHERE group_id = $1`,
			p.ID, p.Status, p.Note, p.ReassignedTo); err != nil {
			return err
		}
		g, err = alertGroup(ctx, tx, p.ID)
		return err
	})
	return g, err
}

// TriageAlert sets the status and note of one alert and returns it.
func (s *Store) TriageAlert(ctx context.Context, p *TriageParams) (*Alert, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	var gid int64
	err := s.pool.QueryRow(ctx, `UPDATE alerts SET status = $2, note = $3, reassigned_to = $4, updated_at = now() WHERE id = $1 RETURNING group_id`,
		p.ID, p.Status, p.Note, p.ReassignedTo).Scan(&gid)
	if err != nil {
		return nil, notFound(err)
	}
	g, err := alertGroup(ctx, s.pool, gid)
	if err != nil {
		return nil, err
	}
	for _, a := range g.Alerts {
		if a.ID == p.ID {
			return &a, nil
		}
	}
	return nil, ErrNotFound
}

// GetAlert returns one alert, or ErrNotFound.
func (s *Store) GetAlert(ctx context.Context, id int64) (*Alert, error) {
	var gid int64
	if err := s.pool.QueryRow(ctx, `SELECT group_id FROM alerts WHERE id = $1`, id).Scan(&gid); err != nil {
		return nil, notFound(err)
	}
	g, err := alertGroup(ctx, s.pool, gid)
	if err != nil {
		return nil, err
	}
	for _, a := range g.Alerts {
		if a.ID == id {
			return &a, nil
		}
	}
	return nil, ErrNotFound
}

// AlertSeriesAround returns an alert with up to before points of its
// series before the change and up to after points from the change on, for
// showing the change in context.
func (s *Store) AlertSeriesAround(ctx context.Context, alertID int64, before, after int) (*Alert, []RegressPoint, error) {
	a, err := s.GetAlert(ctx, alertID)
	if err != nil {
		return nil, nil, err
	}
	pre, err := s.RegressPoints(ctx, a.Series.ID, math.MinInt64, a.Seq-1, max(before, 0))
	if err != nil {
		return nil, nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT series_id, seq, run_key, value, stddev, n, build FROM regress_points
		WHERE series_id = $1 AND seq >= $2 ORDER BY seq, recorded_at LIMIT $3`, a.Series.ID, a.Seq, max(after, 0))
	if err != nil {
		return nil, nil, err
	}
	post, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RegressPoint, error) {
		var p RegressPoint
		err := r.Scan(&p.SeriesID, &p.Seq, &p.RunKey, &p.Value, &p.Stddev, &p.N, &p.Build)
		return p, err
	})
	if err != nil {
		return nil, nil, err
	}
	return a, append(pre, post...), nil
}

// PendingConfirmations returns the alerts of series seriesID whose group
// awaits a confirmation rerun.
func (s *Store) PendingConfirmations(ctx context.Context, seriesID int64) ([]Alert, error) {
	rows, err := s.pool.Query(ctx, `SELECT a.id, a.group_id, a.seq, a.direction FROM alerts a JOIN alert_groups g ON g.id = a.group_id
		WHERE a.series_id = $1 AND g.confirmation = 'pending' ORDER BY a.id`, seriesID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Alert, error) {
		var a Alert
		err := r.Scan(&a.ID, &a.GroupID, &a.Seq, &a.Direction)
		a.Series.ID = seriesID
		return a, err
	})
}

// ResolveConfirmation ends a group's pending confirmation. Confirmed
// groups get their webhook queued (per the suite policy); refuted groups
// are marked invalid with note. It is a no-op for groups not pending.
func (s *Store) ResolveConfirmation(ctx context.Context, groupID int64, confirmed bool, note string) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		var suite string
		var regression bool
		err := tx.QueryRow(ctx, `SELECT suite, regression FROM alert_groups WHERE id = $1 AND confirmation = 'pending' FOR UPDATE`, groupID).Scan(&suite, &regression)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if !confirmed {
			if _, err := tx.Exec(ctx, `UPDATE alert_groups SET confirmation = 'refuted', status = 'invalid', note = $2, updated_at = now() WHERE id = $1`, groupID, note); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE alerts SET status = 'invalid', note = $2, updated_at = now() WHERE group_id = $1`, groupID, note)
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE alert_groups SET confirmation = 'confirmed', updated_at = now() WHERE id = $1`, groupID); err != nil {
			return err
		}
		policy := RegressPolicy{}
		err = tx.QueryRow(ctx, `SELECT webhook_url, webhook_secret, notify_improvements FROM regress_policies WHERE suite = $1`, suite).
			Scan(&policy.WebhookURL, &policy.WebhookSecret, &policy.NotifyImprovements)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if policy.WebhookURL != "" && (regression || policy.NotifyImprovements) {
			return enqueueWebhook(ctx, tx, groupID, policy)
		}
		return nil
	})
}

// WebhookDelivery is one queued webhook notification.
type WebhookDelivery struct {
	ID       int64
	GroupID  int64
	URL      string
	Secret   string
	Attempts int
}

// ClaimWebhookDeliveries claims up to limit due deliveries for lease: they
// are invisible to other claimers until the lease ends, so a coordinator
// that dies mid-delivery only delays the retry.
func (s *Store) ClaimWebhookDeliveries(ctx context.Context, limit int, lease time.Duration) ([]WebhookDelivery, error) {
	rows, err := s.pool.Query(ctx, `
		UPDATE webhook_deliveries d SET next_attempt_at = now() + make_interval(secs => $2), attempts = d.attempts + 1
		WHERE d.id IN (SELECT id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= now()
			ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED)
		RETURNING d.id, d.group_id, d.url, d.secret, d.attempts`, limit, lease.Seconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (WebhookDelivery, error) {
		var d WebhookDelivery
		err := r.Scan(&d.ID, &d.GroupID, &d.URL, &d.Secret, &d.Attempts)
		return d, err
	})
}

// FinishWebhookDelivery records the outcome of an attempt: delivered when
// errMsg is empty; otherwise retried at retryAt, or failed for good when
// retryAt is zero.
func (s *Store) FinishWebhookDelivery(ctx context.Context, id int64, errMsg string, retryAt time.Time) error {
	var err error
	switch {
	case errMsg == "":
		_, err = s.pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'delivered', delivered_at = now(), last_error = '' WHERE id = $1`, id)
	case retryAt.IsZero():
		_, err = s.pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'failed', last_error = $2 WHERE id = $1`, id, errMsg)
	default:
		_, err = s.pool.Exec(ctx, `UPDATE webhook_deliveries SET next_attempt_at = $3, last_error = $2 WHERE id = $1`, id, errMsg, retryAt)
	}
	return err
}

// WebhookDeliveryStatus returns the status, attempts and last error of the
// deliveries of a group, keyed by URL (for the API and tests).
func (s *Store) WebhookDeliveryStatus(ctx context.Context, groupID int64) (map[string][3]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT url, status, attempts::text, last_error FROM webhook_deliveries WHERE group_id = $1`, groupID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][3]string{}
	for rows.Next() {
		var u, st, at, le string
		if err := rows.Scan(&u, &st, &at, &le); err != nil {
			return nil, err
		}
		out[u] = [3]string{st, at, le}
	}
	return out, rows.Err()
}
