-- Bisection (issue 30 item 3; coordinator/bisect, coordinator/store
-- bisect.go, docs/bisect.md): the search for the build that caused an
-- alert, between its last good and first bad build of one lineage, on one
-- device model.
--
-- bisections: one row per bisection of an alert group (alert_id is the
-- group's alert whose series it decides on: config and metric). configs
-- are the configs each step runs (the group's alerts on that device
-- model); job_id the job snapshot they run (its priority below nightly
-- work). search is the state of coordinator/bisect.Search as JSON: the
-- builds of the range with their git shas, the known good and bad ends,
-- the measured change and the skipped builds. device_ms is the device time
-- its runs took so far (started to finished, running runs until now),
-- budget_ms its bound. state is running until it ends: culprit (then
-- last_good_build and first_bad_build are the adjacent pair, with their git
-- shas), not_reproduced, ambiguous, failed or cancelled; reason says why in
-- one line. At most one bisection of a group runs at a time (the partial
-- unique index: a second POST gets 409).
--
-- bisection_steps: its A/B comparisons in order. Each step compares build
-- a (index a_index into search.builds) with build b on one device through
-- an ab_comparisons row of its own (created by the bisection, not by POST
-- /v1/runs, and advanced only by the bisection). A step is running, done
-- (judgement and evidence: the comparison per config and metric, with
-- samples per side, p-values and the change's interval) or aborted (its
-- device was lost, a build was deleted or failed: its samples are not
-- counted and the step is run again as a new step).

-- +goose Up
CREATE TABLE bisections (
    id              bigserial   PRIMARY KEY,
    group_id        bigint      NOT NULL REFERENCES alert_groups (id) ON DELETE CASCADE,
    alert_id        bigint      NOT NULL REFERENCES alerts (id) ON DELETE CASCADE,
    suite           text        NOT NULL,
    lineage         text        NOT NULL,
    config          text        NOT NULL,
    metric          text        NOT NULL,
    configs         text[]      NOT NULL,
    device_model    text        NOT NULL,
    emulated        boolean     NOT NULL DEFAULT false,
    device_id       text        NOT NULL DEFAULT '',
    job_id          bigint      NOT NULL REFERENCES jobs (id),
    budget_ms       bigint      NOT NULL CHECK (budget_ms > 0),
    device_ms       bigint      NOT NULL DEFAULT 0 CHECK (device_ms >= 0),
    runs            int         NOT NULL DEFAULT 0,
    state           text        NOT NULL DEFAULT 'running'
                    CHECK (state IN ('running', 'culprit', 'not_reproduced', 'ambiguous', 'failed', 'cancelled')),
    search          jsonb       NOT NULL,
    reason          text        NOT NULL DEFAULT '',
    last_good_build text        NOT NULL DEFAULT '',
    last_good_sha   text        NOT NULL DEFAULT '',
    first_bad_build text        NOT NULL DEFAULT '',
    first_bad_sha   text        NOT NULL DEFAULT '',
    requested_by    text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
CREATE UNIQUE INDEX bisections_one_running ON bisections (group_id) WHERE state = 'running';
CREATE INDEX bisections_group_idx ON bisections (group_id, id DESC);

CREATE TABLE bisection_steps (
    bisection_id bigint      NOT NULL REFERENCES bisections (id) ON DELETE CASCADE,
    step         int         NOT NULL CHECK (step >= 1),
    kind         text        NOT NULL CHECK (kind IN ('verify', 'bisect', 'recheck')),
    a_index      int         NOT NULL,
    b_index      int         NOT NULL,
    build_a      text        NOT NULL,
    build_b      text        NOT NULL,
    ab_id        bigint      NOT NULL UNIQUE REFERENCES ab_comparisons (id),
    device_id    text        NOT NULL,
    state        text        NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'done', 'aborted')),
    judgement    text        NOT NULL DEFAULT '',
    evidence     jsonb,
    note         text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    PRIMARY KEY (bisection_id, step)
);

-- +goose Down
DROP TABLE bisection_steps;
DROP TABLE bisections;
