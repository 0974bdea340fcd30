-- run_telemetry: the telemetry a run attempt's result says its agent sent
-- (protocol.Result telemetry_batches, telemetry_samples, telemetry_dropped),
-- recorded by ingest (coordinator/store telemetry_counts.go, issue 29). The
-- stored count is sample_batches' (the current attempt's: a requeue deletes
-- the samples). Ingest holds a succeeded result until the stored samples
-- reach what was sent, and fails the attempt as infrastructure past a
-- deadline; GET /v1/runs/{id} shows both counts.

-- +goose Up
CREATE TABLE run_telemetry (
    run_id       bigint      NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    token        bigint      NOT NULL,
    batches_sent bigint      NOT NULL CHECK (batches_sent >= 0),
    samples_sent bigint      NOT NULL CHECK (samples_sent >= 0),
    dropped      bigint      NOT NULL CHECK (dropped >= 0),
    reported_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, token)
);

-- +goose Down
DROP TABLE run_telemetry;
