-- Regression detection (coordinator/regress): series of results, alert
-- groups and alerts with their triage lifecycle, per-suite policies
-- (webhook, confirmation rerun) and a webhook delivery outbox with retry.

-- +goose Up

-- regress_series is one series: (suite, config, metric, device model, OS
-- major, runtime build lineage, emulated or real).
CREATE TABLE regress_series (
    id           bigserial PRIMARY KEY,
    suite        text    NOT NULL,
    config       text    NOT NULL,
    metric       text    NOT NULL,
    device_model text    NOT NULL,
    os_major     text    NOT NULL,
    lineage      text    NOT NULL,
    emulated     boolean NOT NULL,
    UNIQUE (suite, config, metric, device_model, os_major, lineage, emulated)
);
CREATE INDEX regress_series_sibling ON regress_series (suite, lineage, config);

-- regress_points are the series' points: one per (series, seq, run); a
-- confirmation rerun of the same build adds a second point at the same seq.
CREATE TABLE regress_points (
    series_id   bigint           NOT NULL REFERENCES regress_series (id) ON DELETE CASCADE,
    seq         bigint           NOT NULL,
    run_key     text             NOT NULL DEFAULT '',
    value       double precision NOT NULL,
    stddev      double precision NOT NULL DEFAULT 0 CHECK (stddev >= 0),
    n           integer          NOT NULL DEFAULT 0 CHECK (n >= 0),
    build       text             NOT NULL DEFAULT '',
    recorded_at timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (series_id, seq, run_key)
);

-- regress_policies configures regression handling per suite.
CREATE TABLE regress_policies (
    suite          text PRIMARY KEY,
    webhook_url    text        NOT NULL DEFAULT '' CHECK (webhook_url = '' OR webhook_url ~ '^https?://'),
    webhook_secret text        NOT NULL DEFAULT '',
    -- confirm_rerun: schedule a rerun on the same device before an alert
    -- group is notified.
    confirm_rerun  boolean     NOT NULL DEFAULT false,
    -- notify_improvements: also notify groups without any regression.
    notify_improvements boolean NOT NULL DEFAULT false,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- alert_groups gathers the change points of one suite and lineage at about
-- the same build: across devices (scope) and across metrics (attribution).
CREATE TABLE alert_groups (
    id            bigserial PRIMARY KEY,
    suite         text        NOT NULL,
    lineage       text        NOT NULL,
    seq           bigint      NOT NULL,
    build         text        NOT NULL DEFAULT '',
    scope         text        NOT NULL CHECK (scope IN ('device', 'platform', 'global')),
    scope_detail  text        NOT NULL DEFAULT '',
    summary       text        NOT NULL DEFAULT '',
    regression    boolean     NOT NULL,
    status        text        NOT NULL DEFAULT 'new'
                  CHECK (status IN ('new', 'acknowledged', 'invalid', 'fixed', 'reassigned')),
    note          text        NOT NULL DEFAULT '',
    reassigned_to text        NOT NULL DEFAULT '',
    confirmation  text        NOT NULL DEFAULT 'none'
                  CHECK (confirmation IN ('none', 'pending', 'confirmed', 'refuted')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX alert_groups_lookup ON alert_groups (suite, lineage, seq);
CREATE INDEX alert_groups_status ON alert_groups (status, created_at DESC);

-- alerts are confirmed change points of single series.
CREATE TABLE alerts (
    id              bigserial PRIMARY KEY,
    group_id        bigint           NOT NULL REFERENCES alert_groups (id) ON DELETE CASCADE,
    series_id       bigint           NOT NULL REFERENCES regress_series (id) ON DELETE CASCADE,
    seq             bigint           NOT NULL,
    direction       text             NOT NULL CHECK (direction IN ('regression', 'improvement')),
    relative_change double precision NOT NULL,
    p_value         double precision NOT NULL,
    before_mean     double precision NOT NULL,
    after_mean      double precision NOT NULL,
    before_n        integer          NOT NULL,
    after_n         integer          NOT NULL,
    attribution     jsonb            NOT NULL DEFAULT '[]',
    summary         text             NOT NULL DEFAULT '',
    status          text             NOT NULL DEFAULT 'new'
                    CHECK (status IN ('new', 'acknowledged', 'invalid', 'fixed', 'reassigned')),
    note            text             NOT NULL DEFAULT '',
    reassigned_to   text             NOT NULL DEFAULT '',
    created_at      timestamptz      NOT NULL DEFAULT now(),
    updated_at      timestamptz      NOT NULL DEFAULT now(),
    UNIQUE (series_id, seq)
);
CREATE INDEX alerts_group ON alerts (group_id);

-- webhook_deliveries is the outbox of webhook notifications: one row per
-- (group, url), claimed with FOR UPDATE SKIP LOCKED and retried with
-- exponential backoff until delivered or out of attempts.
CREATE TABLE webhook_deliveries (
    id              bigserial PRIMARY KEY,
    group_id        bigint      NOT NULL REFERENCES alert_groups (id) ON DELETE CASCADE,
    url             text        NOT NULL,
    secret          text        NOT NULL DEFAULT '',
    status          text        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text        NOT NULL DEFAULT '',
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (group_id, url)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE alerts;
DROP TABLE alert_groups;
DROP TABLE regress_policies;
DROP TABLE regress_points;
DROP TABLE regress_series;
