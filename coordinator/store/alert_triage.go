package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file reads alert groups and alerts and moves them through the triage
// lifecycle (new, acknowledged, invalid, fixed).

// GetAlertGroup returns a group with its alerts and the devices each
// rests on (Alert.Devices), or ErrNotFound.
func (s *Store) GetAlertGroup(ctx context.Context, id int64) (*AlertGroup, error) {
	g, err := alertGroup(ctx, s.pool, id)
	if err != nil {
		return nil, err
	}
	if err := s.fillAlertDevices(ctx, g.Alerts); err != nil {
		return nil, err
	}
	return g, nil
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
