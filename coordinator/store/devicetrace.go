package store

import (
	"context"
	"fmt"
	"time"

	"github.com/lesfarm/lesfarm/protocol"
)

// DeviceStateReported reports whether st carries any thermal or battery
// reading (an emulated device, or a host without sensors, reports none).
func DeviceStateReported(st *protocol.DeviceState) bool {
	return st != nil && (st.MaxTempC != nil || st.BatteryPercent != nil || st.BatteryTempC != nil || st.Charging != nil || st.ThermalStatus != "")
}

// RecordDeviceState stores one device-state sample for each of runIDs (the
// runs whose leases a heartbeat just renewed), stamped with the database's
// clock. A state that reports nothing stores nothing.
func (s *Store) RecordDeviceState(ctx context.Context, runIDs []int64, st *protocol.DeviceState) error {
	if len(runIDs) == 0 || !DeviceStateReported(st) {
		return nil
	}
	f32 := func(p *float64) *float32 {
		if p == nil {
			return nil
		}
		v := float32(*p)
		return &v
	}
	status := st.ThermalStatus
	if len(status) > 64 {
		status = status[:64]
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO run_device_states (run_id, max_temp_c, battery_percent, battery_temp_c, charging, thermal_status)
		SELECT unnest($1::bigint[]), $2, $3, $4, $5, $6`, runIDs, f32(st.MaxTempC), f32(st.BatteryPercent), f32(st.BatteryTempC), st.Charging, status)
	if err != nil {
		return fmt.Errorf("store: record device state: %w", err)
	}
	return nil
}

// DeviceStatePoint is one bucket of a run's device-state samples: the
// average of each reading over the bucket (nil when no sample of the
// bucket had it), whether any sample was charging, and the last thermal
// status.
type DeviceStatePoint struct {
	At             time.Time
	Samples        int
	MaxTempC       *float64
	BatteryPercent *float64
	BatteryTempC   *float64
	Charging       *bool
	ThermalStatus  string
}

// DeviceTrace returns a run's device-state samples in time order,
// downsampled on the server to at most maxPoints buckets of consecutive
// samples (ntile); total is the number of samples before downsampling.
func (s *Store) DeviceTrace(ctx context.Context, runID int64, maxPoints int) (pts []DeviceStatePoint, total int, err error) {
	if maxPoints < 1 {
		return nil, 0, fmt.Errorf("store: device trace of %d points", maxPoints)
	}
	rows, err := s.pool.Query(ctx, `SELECT min(at), count(*), avg(`+finiteNumeric("max_temp_c")+`)::float8, avg(`+finiteNumeric("battery_percent")+`)::float8,
			avg(`+finiteNumeric("battery_temp_c")+`)::float8, bool_or(charging),
			coalesce((array_agg(thermal_status ORDER BY at DESC))[1], ''), max(total)
		FROM (SELECT at, max_temp_c, battery_percent, battery_temp_c, charging, thermal_status,
				count(*) OVER () AS total, ntile($2) OVER (ORDER BY at) AS b
			FROM run_device_states WHERE run_id = $1) x
		GROUP BY b ORDER BY b`, runID, maxPoints)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var p DeviceStatePoint
		var n int64
		if err := rows.Scan(&p.At, &p.Samples, &p.MaxTempC, &p.BatteryPercent, &p.BatteryTempC, &p.Charging, &p.ThermalStatus, &n); err != nil {
			return nil, 0, err
		}
		total = int(n)
		pts = append(pts, p)
	}
	return pts, total, rows.Err()
}
