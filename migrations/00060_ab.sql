-- A/B gate (issue 30 item 1; coordinator/store ab.go, docs/ab.md): a
-- comparison of a build under test (build) with a baseline build of the
-- same lineage, measured on the same devices in interleaved rounds.
--
-- ab_comparisons: one row per comparison. Its runs belong to two triggers
-- (one per build, source 'ab'); devices are the devices it was pinned to
-- at creation. rounds counts the rounds created so far (a round is one run
-- of each build on each device, in ABBA order across rounds); the budget
-- is initial_rounds, then step_rounds while the answer is unknown, up to
-- max_rounds. state is running until a decision is stored in verdict and
-- decision (the per config × metric comparisons, as the API shows them).
--
-- ab_runs: which run is which side and round on which device.
--
-- ab_policies: the per-suite minimum effect size and budget (a suite
-- without a row uses 2% and the defaults of abtest.Plan).

-- +goose Up
CREATE TABLE ab_comparisons (
    id                  bigserial        PRIMARY KEY,
    suite               text             NOT NULL,
    build               text             NOT NULL,
    baseline            text             NOT NULL,
    lineage             text             NOT NULL,
    job_id              bigint           NOT NULL REFERENCES jobs (id),
    trigger_id          bigint           NOT NULL REFERENCES triggers (id),
    baseline_trigger_id bigint           NOT NULL REFERENCES triggers (id),
    devices             text[]           NOT NULL,
    min_effect          double precision NOT NULL CHECK (min_effect > 0 AND min_effect < 1),
    initial_rounds      int              NOT NULL CHECK (initial_rounds >= 1),
    step_rounds         int              NOT NULL CHECK (step_rounds >= 1),
    max_rounds          int              NOT NULL CHECK (max_rounds >= initial_rounds),
    rounds              int              NOT NULL DEFAULT 0,
    state               text             NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'done')),
    verdict             text             NOT NULL DEFAULT '' CHECK (verdict IN ('', 'regression', 'improvement', 'same', 'unknown', 'failed')),
    decision            jsonb,
    created_at          timestamptz      NOT NULL DEFAULT now(),
    updated_at          timestamptz      NOT NULL DEFAULT now(),
    finished_at         timestamptz
);
CREATE INDEX ab_comparisons_build_idx ON ab_comparisons (build, created_at DESC);

CREATE TABLE ab_runs (
    run_id    bigint NOT NULL PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    ab_id     bigint NOT NULL REFERENCES ab_comparisons (id) ON DELETE CASCADE,
    round     int    NOT NULL CHECK (round >= 0),
    side      text   NOT NULL CHECK (side IN ('a', 'b')),
    device_id text   NOT NULL
);
CREATE INDEX ab_runs_ab_idx ON ab_runs (ab_id, round);

CREATE TABLE ab_policies (
    suite          text             PRIMARY KEY,
    min_effect     double precision NOT NULL CHECK (min_effect > 0 AND min_effect < 1),
    initial_rounds int              NOT NULL DEFAULT 0 CHECK (initial_rounds >= 0),
    step_rounds    int              NOT NULL DEFAULT 0 CHECK (step_rounds >= 0),
    max_rounds     int              NOT NULL DEFAULT 0 CHECK (max_rounds >= 0),
    updated_at     timestamptz      NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE ab_policies;
DROP TABLE ab_runs;
DROP TABLE ab_comparisons;
