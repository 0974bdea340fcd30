-- Build lineage of triggers, runs and schedules (coordinator/store,
-- coordinator/regress/monitor): the branch a build belongs to ("main",
-- "release-3"). The regression monitor keys its series and alert groups by
-- the run's lineage, so builds of a release branch form their own series
-- instead of being compared with main's.
--
-- A lineage is 1 to 200 characters (the API's bound for build ids) of
-- letters, digits, '.', '_' and '-', starting with a letter or digit. '/'
-- is excluded because it separates the fields of a series key's text form
-- (suite/config/metric/device/os/lineage); write "release/3" as
-- "release-3". Rows that existed before this migration are "main", which
-- is what the monitor assumed for them.

-- +goose Up
ALTER TABLE triggers ADD COLUMN lineage text NOT NULL DEFAULT 'main'
    CONSTRAINT triggers_lineage_check CHECK (length(lineage) <= 200 AND lineage ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$');
ALTER TABLE runs ADD COLUMN lineage text NOT NULL DEFAULT 'main'
    CONSTRAINT runs_lineage_check CHECK (length(lineage) <= 200 AND lineage ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$');
ALTER TABLE schedules ADD COLUMN lineage text NOT NULL DEFAULT 'main'
    CONSTRAINT schedules_lineage_check CHECK (length(lineage) <= 200 AND lineage ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$');
-- Run listings filtered by lineage (GET /v1/runs?lineage=), newest first.
CREATE INDEX runs_lineage_idx ON runs (lineage, id DESC);

-- +goose Down
DROP INDEX runs_lineage_idx;
ALTER TABLE schedules DROP COLUMN lineage;
ALTER TABLE runs DROP COLUMN lineage;
ALTER TABLE triggers DROP COLUMN lineage;
