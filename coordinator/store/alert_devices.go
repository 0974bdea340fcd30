package store

import (
	"context"
	"fmt"
	"math"
)

// An enrolled device can lie with plausible numbers: one device reporting
// a 50% drop planted an alert against a build (issue 29, "builds are
// code"; docs/security.md "Trust no device"). Ingest cannot tell such a
// number from a real one, so every alert shows the devices it rests on,
// and one carried by a single device while the other devices of its model
// disagree is marked (Alert.CarriedByOneDevice).

// AlertDevice is one device whose runs are points of an alert's series:
// what it reported before the change and from the change on.
type AlertDevice struct {
	DeviceID string `json:"device_id"`
	// Before and After count its points before the alert's seq and from
	// it on; BeforeMean and AfterMean are their means (0 without points).
	Before     int     `json:"before"`
	After      int     `json:"after"`
	BeforeMean float64 `json:"before_mean"`
	AfterMean  float64 `json:"after_mean"`
	// RelativeChange is its own change from the alert's seq on: its after
	// mean against its own before mean, or the alert's when it has no
	// point before (±Inf from 0; 0 without points after).
	RelativeChange Ratio `json:"relative_change"`
	// Carries is true when its own change shows the alert's: same sign,
	// and at least half its size.
	Carries bool `json:"carries"`
}

// classifyAlertDevices sets each device's RelativeChange and Carries for
// a change from beforeMean to afterMean, and reports whether exactly one
// device carries the change while another device with points after it
// does not (the alert rests on one device that the others contradict).
func classifyAlertDevices(beforeMean, afterMean float64, ds []AlertDevice) (oneDevice bool) {
	change := afterMean - beforeMean
	carriers, dissent := 0, 0
	for k := range ds {
		d := &ds[k]
		if d.After == 0 {
			continue
		}
		base := beforeMean
		if d.Before > 0 {
			base = d.BeforeMean
		}
		own := d.AfterMean - base
		switch {
		case base != 0:
			d.RelativeChange = Ratio(own / math.Abs(base))
		case own != 0:
			d.RelativeChange = Ratio(math.Inf(int(math.Copysign(1, own))))
		}
		d.Carries = change != 0 && own*change > 0 && math.Abs(own) >= math.Abs(change)/2
		if d.Carries {
			carriers++
		} else {
			dissent++
		}
	}
	return carriers == 1 && dissent > 0
}

// fillAlertDevices sets Devices and CarriedByOneDevice of each alert from
// the runs behind its series' points (a point's run_key is its run id).
func (s *Store) fillAlertDevices(ctx context.Context, alerts []Alert) error {
	if len(alerts) == 0 {
		return nil
	}
	ids := make([]int64, len(alerts))
	byID := make(map[int64]*Alert, len(alerts))
	for k := range alerts {
		ids[k] = alerts[k].ID
		byID[alerts[k].ID] = &alerts[k]
		alerts[k].Devices = nil
	}
	v := finiteNumeric("p.value")
	rows, err := s.pool.Query(ctx, `SELECT a.id, coalesce(r.device_id, ''),
			count(*) FILTER (WHERE p.seq < a.seq), count(*) FILTER (WHERE p.seq >= a.seq),
			coalesce(avg(`+v+`) FILTER (WHERE p.seq < a.seq), 0)::float8,
			coalesce(avg(`+v+`) FILTER (WHERE p.seq >= a.seq), 0)::float8
		FROM alerts a
		JOIN regress_points p ON p.series_id = a.series_id AND p.run_key ~ '^[0-9]{1,18}$'
		JOIN runs r ON r.id = p.run_key::bigint
		WHERE a.id = ANY($1)
		GROUP BY a.id, coalesce(r.device_id, '')
		ORDER BY a.id, 2`, ids)
	if err != nil {
		return fmt.Errorf("store: alert devices: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var d AlertDevice
		if err := rows.Scan(&id, &d.DeviceID, &d.Before, &d.After, &d.BeforeMean, &d.AfterMean); err != nil {
			return fmt.Errorf("store: alert devices: %w", err)
		}
		a := byID[id]
		a.Devices = append(a.Devices, d)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: alert devices: %w", err)
	}
	for k := range alerts {
		a := &alerts[k]
		a.CarriedByOneDevice = classifyAlertDevices(a.BeforeMean, a.AfterMean, a.Devices)
	}
	return nil
}
