-- devices.last_assigned_at: when the device was last granted a lease, kept
-- by the claim statements (coordinator/store ClaimRun, ClaimRuns). Placement
-- offers work to idle devices least recently assigned first; it used to
-- compute that with max(runs.assigned_at) per device on every placement
-- pass, an index scan per device (65 ms of CPU for 1,000 idle devices on a
-- quiet database, the most expensive read of a pass at 1,000 agents).

-- +goose Up
ALTER TABLE devices ADD COLUMN last_assigned_at timestamptz;
UPDATE devices d SET last_assigned_at = (SELECT max(r.assigned_at) FROM runs r WHERE r.device_id = d.id);

-- +goose Down
ALTER TABLE devices DROP COLUMN last_assigned_at;
