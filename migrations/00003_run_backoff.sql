-- Retry backoff for runs (coordinator/store): a run released after a
-- refusal or an unreachable agent waits until not_before before it is
-- offered again, so one flapping device cannot burn its attempts in a loop.

-- +goose Up
ALTER TABLE runs ADD COLUMN not_before timestamptz;

-- +goose Down
ALTER TABLE runs DROP COLUMN not_before;
