package store

import (
	"context"
	"fmt"
)

// noRoomSQL is the condition "run's model is downloaded (no local path)
// and larger than the room for artifacts the device reported in its
// hello" (fingerprint free_storage_bytes), over SQL expressions for the
// run and device ids. ClaimRun treats such a run as unfit for the device
// (issue 29, finding 10): a device whose disk cannot hold the model failed
// every run it took within seconds, each blamed on its build. A device
// that reported no figure is not held back.
func noRoomSQL(run, device string) string {
	return `EXISTS (SELECT 1 FROM runs nr JOIN jobs nj ON nj.id = nr.job_id, devices nd
		WHERE nr.id = ` + run + ` AND nd.id = ` + device + `
		  AND jsonb_typeof(nd.fingerprint->'free_storage_bytes') = 'number'
		  AND jsonb_typeof(nj.spec->'model'->'size') = 'number'
		  AND coalesce(nj.spec->'model'->>'path', '') = ''
		  AND (nj.spec->'model'->>'size')::numeric > (nd.fingerprint->>'free_storage_bytes')::numeric)`
}

// SetDeviceFreeStorage replaces the room for artifacts in the device's
// fingerprint (free_storage_bytes) with what its heartbeat reported while
// the agent is short of storage (protocol.Heartbeat.FreeStorageBytes), so
// that ClaimRun's storage fit follows the device's disk between hellos. It
// writes only when the figure changed, and returns ErrNotFound for an
// unknown device.
func (s *Store) SetDeviceFreeStorage(ctx context.Context, deviceID string, room int64) error {
	if room < 0 {
		return fmt.Errorf("store: free storage %d is negative", room)
	}
	var found bool
	err := s.pool.QueryRow(ctx, `WITH u AS (
		UPDATE devices SET fingerprint = jsonb_set(fingerprint, '{free_storage_bytes}', to_jsonb($2::bigint))
		WHERE id = $1 AND fingerprint->'free_storage_bytes' IS DISTINCT FROM to_jsonb($2::bigint)
		RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM u) OR EXISTS (SELECT 1 FROM devices WHERE id = $1)`, deviceID, room).Scan(&found)
	if err != nil {
		return fmt.Errorf("store: set free storage of %s: %w", deviceID, err)
	}
	if !found {
		return ErrNotFound
	}
	return nil
}
