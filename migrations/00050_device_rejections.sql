-- Per-device rejection accounting and quarantine (coordinator/store
-- rejections.go, issue 29): ingest counts every message it refuses from a
-- device (a message id naming another device, values outside physical
-- ranges, a config the run does not have, a telemetry batch re-sent with
-- other content) against the device whose subject carried it.
--
-- rejected_messages is the total; last_rejection and last_rejected_at the
-- latest reason. rejection_window_start and rejection_window_count are a
-- fixed window: when a window reaches the quarantine threshold, the device
-- is drained with drain_reason saying why. drain_reason is '' for a drain by
-- an operator; undrain clears it and the window.

-- +goose Up
ALTER TABLE devices
    ADD COLUMN rejected_messages      bigint      NOT NULL DEFAULT 0,
    ADD COLUMN last_rejection         text        NOT NULL DEFAULT '',
    ADD COLUMN last_rejected_at       timestamptz,
    ADD COLUMN rejection_window_start timestamptz,
    ADD COLUMN rejection_window_count integer     NOT NULL DEFAULT 0,
    ADD COLUMN drain_reason           text        NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE devices
    DROP COLUMN rejected_messages,
    DROP COLUMN last_rejection,
    DROP COLUMN last_rejected_at,
    DROP COLUMN rejection_window_start,
    DROP COLUMN rejection_window_count,
    DROP COLUMN drain_reason;
