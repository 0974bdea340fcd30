package store

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/lesfarm/lesfarm/coordinator/fit"
)

// Fit is what placement knows of d, as coordinator/fit judges it.
func (d *PlacementDevice) Fit() *fit.Device {
	return &fit.Device{ID: d.ID, Platform: d.Platform, DeviceModel: d.DeviceModel, RAMBytes: d.RAMBytes, Emulated: d.Emulated,
		Labels: d.Labels, ExecPlatform: d.ExecPlatform, EmbeddedBuild: d.EmbeddedBuild}
}

// FillWaitingReasons sets Run.WaitingReason on each queued run among runs:
// no device online, no online device that can run it (its selector, its
// pinned device, or its build's platforms, each with how many devices it
// rules out), or every device that can run it busy. Runs in other states
// keep "". The answer is computed at read time from the devices' last
// hello, so it follows the fleet without being stored.
func (s *Store) FillWaitingReasons(ctx context.Context, runs []Run) error {
	var queued []*Run
	builds := map[string]bool{}
	for i := range runs {
		if runs[i].State == RunQueued {
			queued = append(queued, &runs[i])
			if runs[i].Build != "" {
				builds[runs[i].Build] = true
			}
		}
	}
	if len(queued) == 0 {
		return nil
	}
	devs, err := s.onlineDevices(ctx)
	if err != nil {
		return err
	}
	needs, err := s.buildNeeds(ctx, builds)
	if err != nil {
		return err
	}
	for _, r := range queued {
		r.WaitingReason = waitingReason(r, needs[r.Build], devs)
	}
	return nil
}

// waitingReason is FillWaitingReasons for one queued run r of a build with
// needs, given the online devices devs.
func waitingReason(r *Run, needs *fit.BuildNeeds, devs []PlacementDevice) string {
	if len(devs) == 0 {
		return "no device is online"
	}
	why := map[string]int{}
	fits := 0
	for i := range devs {
		d := devs[i].Fit()
		if r.TargetDeviceID != "" && d.ID != r.TargetDeviceID {
			continue
		}
		ok, reason := fit.Match(&r.Selector, d)
		if ok {
			ok, reason = fit.BuildMatch(r.Build, needs, d)
		}
		if ok {
			fits++
			continue
		}
		why[reason]++
	}
	switch {
	case fits > 0:
		return fmt.Sprintf("waiting for a free device: %d online device(s) can run it, all busy", fits)
	case r.TargetDeviceID != "" && len(why) == 0:
		return "its device " + r.TargetDeviceID + " is not online"
	}
	reasons := make([]string, 0, len(why))
	for reason := range why {
		reasons = append(reasons, reason)
	}
	sort.Slice(reasons, func(i, j int) bool {
		if why[reasons[i]] != why[reasons[j]] {
			return why[reasons[i]] > why[reasons[j]]
		}
		return reasons[i] < reasons[j]
	})
	if len(reasons) > 3 {
		reasons = reasons[:3]
	}
	for i, reason := range reasons {
		reasons[i] = fmt.Sprintf("%s (%d device(s))", reason, why[reason])
	}
	return "no online device can run it: " + strings.Join(reasons, "; ")
}

// onlineDevices lists every online, undrained device, busy or not.
func (s *Store) onlineDevices(ctx context.Context) ([]PlacementDevice, error) {
	return scanPlacementDevices(s.pool.Query(ctx, `SELECT d.id, d.platform, d.device_model, coalesce(d.ram_bytes, 0), d.emulated,
			d.agent_labels || d.labels, coalesce(d.fingerprint->>'exec_platform', ''), coalesce(d.fingerprint->>'embedded_build', '')
		FROM devices d WHERE d.state = 'online' AND NOT d.drained ORDER BY d.id LIMIT 100000`))
}

// buildNeeds returns what each registered build among ids asks of a
// device (absent: not registered, any device runs it).
func (s *Store) buildNeeds(ctx context.Context, ids map[string]bool) (map[string]*fit.BuildNeeds, error) {
	out := map[string]*fit.BuildNeeds{}
	if len(ids) == 0 {
		return out, nil
	}
	list := make([]string, 0, len(ids))
	for id := range ids {
		list = append(list, id)
	}
	slices.Sort(list)
	rows, err := s.pool.Query(ctx, `SELECT b.id, b.kind,
			array(SELECT e.platform FROM build_executables e WHERE e.build_id = b.id ORDER BY e.platform)
		FROM builds b WHERE b.id = ANY($1)`, list)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, kind string
		var platforms []string
		if err := rows.Scan(&id, &kind, &platforms); err != nil {
			return nil, err
		}
		out[id] = needsOf(kind, platforms)
	}
	return out, rows.Err()
}
