package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/protocol"
)

// Device states.
const (
	DeviceOnline = "online"
	DeviceLost   = "lost"
)

// Device is a registered agent.
type Device struct {
	ID          string               `json:"id"`
	Fingerprint protocol.Fingerprint `json:"fingerprint"`
	Platform    string               `json:"platform"`
	DeviceModel string               `json:"device_model"`
	OSVersion   string               `json:"os_version"`
	RAMBytes    *int64               `json:"ram_bytes,omitempty"`
	Emulated    bool                 `json:"emulated"`
	Profile     string               `json:"profile,omitempty"`
	// AgentLabels come from the agent's hello; Labels are set by operators.
	// Effective labels are AgentLabels overlaid with Labels.
	AgentLabels map[string]string `json:"agent_labels"`
	Labels      map[string]string `json:"labels"`
	State       string            `json:"state"`
	Drained     bool              `json:"drained"`
	TTL         time.Duration     `json:"ttl"`
	Coordinator string            `json:"coordinator,omitempty"`
	FirstSeenAt time.Time         `json:"first_seen_at"`
	LastSeenAt  time.Time         `json:"last_seen_at"`
	LostAt      *time.Time        `json:"lost_at,omitempty"`
	// ActiveRunID is the run the device holds (assigned or running), or 0.
	ActiveRunID int64 `json:"active_run_id,omitempty"`
	// Build is the code of its last hello in one line (DeviceBuild);
	// BuildSince is when the device first said hello with it (nil:
	// before builds were recorded); PreviousBuild is the build it ran
	// before, "" when it never changed.
	Build         string     `json:"build"`
	BuildSince    *time.Time `json:"build_since,omitempty"`
	PreviousBuild string     `json:"previous_build,omitempty"`
}

// DeviceBuild is the code a fingerprint names, in one line: the agent's
// build, the runtime's when it differs, and the embedded build ("v0.9.1 ·
// runtime v0.9.0 · embeds app-0.9.1"); "" when it names none. Migration
// 00065 computes the same for the rows before it.
func DeviceBuild(fp *protocol.Fingerprint) string {
	var parts []string
	if fp.AgentBuild != "" {
		parts = append(parts, fp.AgentBuild)
	}
	if fp.RuntimeBuild != "" && fp.RuntimeBuild != fp.AgentBuild {
		parts = append(parts, "runtime "+fp.RuntimeBuild)
	}
	if fp.EmbeddedBuild != "" {
		parts = append(parts, "embeds "+fp.EmbeddedBuild)
	}
	return strings.Join(parts, " · ")
}

// EffectiveLabels returns the agent labels overlaid with operator labels.
func (d *Device) EffectiveLabels() map[string]string {
	out := make(map[string]string, len(d.AgentLabels)+len(d.Labels))
	for k, v := range d.AgentLabels {
		out[k] = v
	}
	for k, v := range d.Labels {
		out[k] = v
	}
	return out
}

const deviceCols = `d.id, d.fingerprint, d.platform, d.device_model, d.os_version, d.ram_bytes, d.emulated, d.profile,
	d.agent_labels, d.labels, d.state, d.drained, d.ttl_ms, d.coordinator, d.first_seen_at, d.last_seen_at, d.lost_at,
	coalesce((SELECT r.id FROM runs r WHERE r.device_id = d.id AND r.state IN ('assigned', 'running')), 0),
	d.build, d.build_since, d.previous_build`

func scanDevice(row pgx.Row) (*Device, error) {
	var d Device
	var fp []byte
	var ttlMS int64
	err := row.Scan(&d.ID, &fp, &d.Platform, &d.DeviceModel, &d.OSVersion, &d.RAMBytes, &d.Emulated, &d.Profile,
		&d.AgentLabels, &d.Labels, &d.State, &d.Drained, &ttlMS, &d.Coordinator, &d.FirstSeenAt, &d.LastSeenAt, &d.LostAt, &d.ActiveRunID,
		&d.Build, &d.BuildSince, &d.PreviousBuild)
	if err != nil {
		return nil, notFound(err)
	}
	_ = json.Unmarshal(fp, &d.Fingerprint)
	d.TTL = time.Duration(ttlMS) * time.Millisecond
	return &d, nil
}

// UpsertDeviceParams are the arguments of UpsertDevice.
type UpsertDeviceParams struct {
	ID          string
	Fingerprint protocol.Fingerprint
	Labels      map[string]string // agent labels
	TTL         time.Duration
	Coordinator string
}

// UpsertDevice registers a device on hello: it creates or updates the row,
// marks it online and records last_seen. Operator labels and the drained
// flag are kept. A hello whose build (DeviceBuild) differs from the last
// one records when it changed and what the device ran before.
func (s *Store) UpsertDevice(ctx context.Context, p *UpsertDeviceParams) (*Device, error) {
	fp, err := json.Marshal(&p.Fingerprint)
	if err != nil {
		return nil, err
	}
	labels := p.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	_, err = s.pool.Exec(ctx, `
		INSERT INTO devices (id, fingerprint, platform, device_model, os_version, ram_bytes, emulated, profile, agent_labels, ttl_ms, coordinator,
			build, build_since)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, now())
		ON CONFLICT (id) DO UPDATE SET
			build_since = CASE WHEN devices.build = excluded.build THEN devices.build_since ELSE now() END,
			previous_build = CASE WHEN devices.build = excluded.build THEN devices.previous_build ELSE devices.build END,
			build = excluded.build,
			fingerprint = excluded.fingerprint, platform = excluded.platform, device_model = excluded.device_model,
			os_version = excluded.os_version, ram_bytes = excluded.ram_bytes, emulated = excluded.emulated,
			profile = excluded.profile, agent_labels = excluded.agent_labels, ttl_ms = excluded.ttl_ms,
			coordinator = excluded.coordinator, state = 'online', last_seen_at = now(), lost_at = NULL`,
		p.ID, fp, p.Fingerprint.Platform, p.Fingerprint.DeviceModel, p.Fingerprint.OSVersion, p.Fingerprint.RAMBytes,
		p.Fingerprint.Emulated, p.Fingerprint.Profile, labels, p.TTL.Milliseconds(), p.Coordinator, DeviceBuild(&p.Fingerprint))
	if err != nil {
		return nil, fmt.Errorf("store: upsert device: %w", err)
	}
	return s.GetDevice(ctx, p.ID)
}

// TouchDevice records a heartbeat: last_seen = now. It returns ErrNotFound
// when the device is unknown or lost (the agent must say hello again).
func (s *Store) TouchDevice(ctx context.Context, id string, ttl time.Duration, coordinator string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE devices SET last_seen_at = now(), ttl_ms = $2, coordinator = $3
		FROM `+asyncCommit+` WHERE id = $1 AND state = 'online'`, id, ttl.Milliseconds(), coordinator)
	if err != nil {
		return fmt.Errorf("store: touch device: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// GetDevice returns one device, or ErrNotFound.
func (s *Store) GetDevice(ctx context.Context, id string) (*Device, error) {
	return scanDevice(s.pool.QueryRow(ctx, `SELECT `+deviceCols+` FROM devices d WHERE d.id = $1`, id))
}

// ListDevicesParams filter ListDevices. Zero fields do not filter.
type ListDevicesParams struct {
	State       string
	Platform    string
	DeviceModel string
	Emulated    *bool
	Drained     *bool
	// Labels must all match the effective labels.
	Labels map[string]string
	// After is the last id of the previous page (keyset pagination).
	After string
	// Limit defaults to 100 and is capped at 1000.
	Limit int
}

// ListDevices lists devices ordered by id.
func (s *Store) ListDevices(ctx context.Context, p *ListDevicesParams) ([]Device, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if p.State != "" {
		add("d.state = $%d", p.State)
	}
	if p.Platform != "" {
		add("d.platform = $%d", p.Platform)
	}
	if p.DeviceModel != "" {
		add("d.device_model = $%d", p.DeviceModel)
	}
	if p.Emulated != nil {
		add("d.emulated = $%d", *p.Emulated)
	}
	if p.Drained != nil {
		add("d.drained = $%d", *p.Drained)
	}
	if len(p.Labels) > 0 {
		add("(d.agent_labels || d.labels) @> $%d", p.Labels)
	}
	if p.After != "" {
		add("d.id > $%d", p.After)
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	q := `SELECT ` + deviceCols + ` FROM devices d`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += fmt.Sprintf(" ORDER BY d.id LIMIT %d", limit)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list devices: %w", err)
	}
	defer rows.Close()
	var out []Device
	for rows.Next() {
		d, err := scanDevice(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *d)
	}
	return out, rows.Err()
}

// SetDeviceLabels replaces the operator labels of a device.
func (s *Store) SetDeviceLabels(ctx context.Context, id string, labels map[string]string) (*Device, error) {
	if labels == nil {
		labels = map[string]string{}
	}
	tag, err := s.pool.Exec(ctx, `UPDATE devices SET labels = $2 WHERE id = $1`, id, labels)
	if err != nil {
		return nil, fmt.Errorf("store: set labels: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return nil, ErrNotFound
	}
	return s.GetDevice(ctx, id)
}

// SetDeviceDrained drains (true) or undrains a device. A drained device
// finishes its current run and gets no new ones. Undraining also clears a
// quarantine's drain reason and rejection window (rejections.go).
func (s *Store) SetDeviceDrained(ctx context.Context, id string, drained bool) (*Device, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE devices SET drained = $2,
			drain_reason = CASE WHEN $2 THEN drain_reason ELSE '' END,
			rejection_window_count = CASE WHEN $2 THEN rejection_window_count ELSE 0 END,
			rejection_window_start = CASE WHEN $2 THEN rejection_window_start END
		WHERE id = $1`, id, drained)
	if err != nil {
		return nil, fmt.Errorf("store: drain: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return nil, ErrNotFound
	}
	return s.GetDevice(ctx, id)
}

// LostRun is a run affected by a lost device or an expired lease.
type LostRun struct {
	RunID    int64
	Token    int64
	DeviceID string
	// Requeued is true when the run went back to the queue, false when it
	// ran out of attempts (infra_failed).
	Requeued bool
	// TriggerID is the run's trigger (0 if none), for its notice.
	TriggerID int64
}

// MarkDeviceLost marks a device lost when it has not been seen for its TTL
// (plus grace), and ends its runs' leases as infrastructure failures
// (requeued while attempts remain). It returns lost=false when the device
// was seen in time (another coordinator got its heartbeat) or is unknown.
func (s *Store) MarkDeviceLost(ctx context.Context, id string, grace time.Duration) (lost bool, runs []LostRun, err error) {
	err = s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, deferNotifySQL); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE devices SET state = 'lost', lost_at = now()
			WHERE id = $1 AND state = 'online' AND last_seen_at < now() - make_interval(secs => (ttl_ms::float8 / 1000) + $2::float8)`,
			id, grace.Seconds())
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		lost = true
		runs, err = failLeases(ctx, tx, `device_id = $1 AND state IN ('assigned', 'running')`, []any{id}, "device lost", "expired")
		return err
	})
	if err != nil {
		return false, nil, fmt.Errorf("store: mark device lost: %w", err)
	}
	s.notifyRuns(ctx, lostNotices(runs))
	return lost, runs, nil
}

// SweepLostDevices marks lost every online device not seen within its TTL
// plus grace and fails over their runs: the safety net behind the
// per-device timers (e.g. when the coordinator holding a timer died).
func (s *Store) SweepLostDevices(ctx context.Context, grace time.Duration) (devices []string, runs []LostRun, err error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM devices WHERE state = 'online'
		AND last_seen_at < now() - make_interval(secs => (ttl_ms::float8 / 1000) + $1::float8) LIMIT 1000`, grace.Seconds())
	if err != nil {
		return nil, nil, fmt.Errorf("store: sweep devices: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, err
	}
	for _, id := range ids {
		lost, rs, err := s.MarkDeviceLost(ctx, id, grace)
		if err != nil {
			return devices, runs, err
		}
		if lost {
			devices = append(devices, id)
			runs = append(runs, rs...)
		}
	}
	return devices, runs, nil
}
