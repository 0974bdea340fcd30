-- alert_location_range: where a change happened, with its uncertainty
-- (issue 30 item 2; coordinator/regress locate.go, coordinator/store
-- alerts.go). The detector places a change at the build where the
-- distribution changed (alerts.seq) and bounds it: last_good_seq is the
-- newest point surely at the old level, first_bad_seq the newest point
-- that may still be the first of the new one; the points after
-- last_good_seq up to first_bad_seq are possibly changed (95% of the
-- location's posterior). last_good_build and first_bad_build are the
-- builds of those points. Alerts recorded before this migration have no
-- range: NULL (and '').

-- +goose Up
ALTER TABLE alerts
    ADD COLUMN last_good_seq   bigint,
    ADD COLUMN first_bad_seq   bigint,
    ADD COLUMN last_good_build text NOT NULL DEFAULT '',
    ADD COLUMN first_bad_build text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE alerts
    DROP COLUMN last_good_seq,
    DROP COLUMN first_bad_seq,
    DROP COLUMN last_good_build,
    DROP COLUMN first_bad_build;
