package store

import (
	"context"
	"fmt"
)

// HostLabel is the device label that names the machine an emulated device
// runs on. Emulated devices (host agents with a storage profile) that
// carry the same HostLabel value share that host's CPUs, so a benchmark on
// one slows the others down and both measure the contention instead of the
// device. The coordinator therefore gives the emulated devices of one host
// one run at a time: IdleDevices leaves out an emulated device while
// another emulated device of its host holds an assigned or running run,
// and ClaimRun refuses it (ErrBusy), serialising concurrent claims of one
// host's devices with a transaction-level advisory lock on the host, so
// neither two dispatch workers nor two coordinators can start two of them
// at once. Real devices, and emulated devices without the label, are not
// restricted. lesfarm agent sets the label from the machine's identity
// when it emulates a device (--host-id); labels set by an operator
// override the agent's, as for every label.
const HostLabel = "lesfarm/host"

// hostOf is the SQL expression of a device row's shared host: its
// HostLabel when it is emulated, else NULL.
func hostOf(d string) string {
	return `(CASE WHEN ` + d + `.emulated THEN nullif((` + d + `.agent_labels || ` + d + `.labels) ->> '` + HostLabel + `', '') END)`
}

// hostBusySQL is the SQL condition "another emulated device of d's host
// holds an assigned or running run" over the device row alias d.
func hostBusySQL(d string) string {
	return `(` + hostOf(d) + ` IS NOT NULL AND EXISTS (SELECT 1 FROM runs hr JOIN devices ho ON ho.id = hr.device_id
		WHERE hr.state IN ('assigned', 'running') AND ho.id <> ` + d + `.id AND ` + hostOf("ho") + ` = ` + hostOf(d) + `))`
}

// CountActiveRunsOnHost returns how many assigned or running runs the
// emulated devices of host (their HostLabel) hold, read in one statement.
// The scheduling policy keeps it at most 1.
func (s *Store) CountActiveRunsOnHost(ctx context.Context, host string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM runs r JOIN devices d ON d.id = r.device_id
		WHERE r.state IN ('assigned', 'running') AND `+hostOf("d")+` = $1`, host).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: active runs on host: %w", err)
	}
	return n, nil
}
