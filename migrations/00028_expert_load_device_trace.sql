-- +goose Up

-- expert_load: per-expert load of a run (issue 19). One row per (run,
-- config, layer) per telemetry batch that carried expert counts; the agent
-- attaches them every 1024 measured decode steps (and at a config change
-- and at the end), so a run has about layers × Σ_configs ceil(decode steps
-- / 1024) rows: 40 layers × 5 configs × 3 repetitions × 2,000 tokens is
-- 1,200 rows of at most 2.5 KB (docs/metrics.md). counts holds, per
-- demanded expert in ascending id order, 10 bytes little-endian: uint16
-- expert id, uint32 demand, uint32 miss (coordinator/store.PackExpertCounts).
-- (run_id, config_index, layer, seq) is unique, so a redelivered batch is
-- stored once, and the key is also the read path of the heatmap.
CREATE TABLE expert_load (
    run_id       bigint   NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    config_index smallint NOT NULL,
    layer        smallint NOT NULL,
    seq          integer  NOT NULL,
    steps        integer  NOT NULL,
    counts       bytea    NOT NULL,
    PRIMARY KEY (run_id, config_index, layer, seq)
);

-- run_device_states: the thermal and battery state a device reported in
-- its heartbeats while it held the run (one row per heartbeat whose lease
-- renewal succeeded and that reported anything). at is the coordinator's
-- clock, not the device's.
CREATE TABLE run_device_states (
    run_id          bigint      NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    at              timestamptz NOT NULL DEFAULT clock_timestamp(),
    max_temp_c      real,
    battery_percent real,
    battery_temp_c  real,
    charging        boolean,
    thermal_status  text        NOT NULL DEFAULT ''
);
CREATE INDEX run_device_states_run_idx ON run_device_states (run_id, at);

-- +goose Down
DROP TABLE run_device_states;
DROP TABLE expert_load;
