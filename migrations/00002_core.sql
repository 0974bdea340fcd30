-- Core farm state (coordinator/store core files): devices, suites, jobs,
-- triggers, runs with their state machine, leases with fencing tokens,
-- per-config results and per-token telemetry samples.

-- +goose Up

-- devices are agents that said hello. fingerprint is the last reported
-- protocol.Fingerprint; the columns next to it are copies of its fields that
-- placement and the dashboard filter on. agent_labels come from the agent's
-- hello; labels are set by operators and win over agent labels.
CREATE TABLE devices (
    id            text        PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_-]{1,64}$'),
    fingerprint   jsonb       NOT NULL DEFAULT '{}',
    platform      text        NOT NULL DEFAULT '',
    device_model  text        NOT NULL DEFAULT '',
    os_version    text        NOT NULL DEFAULT '',
    ram_bytes     bigint,
    emulated      boolean     NOT NULL DEFAULT false,
    profile       text        NOT NULL DEFAULT '',
    agent_labels  jsonb       NOT NULL DEFAULT '{}',
    labels        jsonb       NOT NULL DEFAULT '{}',
    -- state: online (heartbeating) or lost (missed its TTL).
    state         text        NOT NULL DEFAULT 'online' CHECK (state IN ('online', 'lost')),
    -- drained devices finish their run but get no new ones.
    drained       boolean     NOT NULL DEFAULT false,
    ttl_ms        integer     NOT NULL DEFAULT 15000 CHECK (ttl_ms > 0),
    coordinator   text        NOT NULL DEFAULT '',
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    lost_at       timestamptz
);
CREATE INDEX devices_state_idx ON devices (state, last_seen_at);
CREATE INDEX devices_model_idx ON devices (device_model);
CREATE INDEX devices_labels_idx ON devices USING gin ((agent_labels || labels));

-- suites are named, editable job specs (jobs.Spec as JSON); the built-in
-- ones are inserted at startup with builtin = true.
CREATE TABLE suites (
    name       text        PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9._-]*$'),
    spec       jsonb       NOT NULL,
    builtin    boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- jobs are immutable snapshots of the specs runs were created from,
-- deduplicated by the spec's fingerprint (sha256 of its canonical JSON).
CREATE TABLE jobs (
    id          bigserial   PRIMARY KEY,
    name        text        NOT NULL,
    suite       text        NOT NULL,
    spec        jsonb       NOT NULL,
    fingerprint text        NOT NULL UNIQUE CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- triggers record one request to run a suite (REST, CLI or schedule); it
-- creates one run, or one per matching device (fanout).
CREATE TABLE triggers (
    id              bigserial   PRIMARY KEY,
    suite           text        NOT NULL,
    job_id          bigint      NOT NULL REFERENCES jobs (id),
    build           text        NOT NULL DEFAULT '',
    git_sha         text        NOT NULL DEFAULT '',
    device_selector jsonb       NOT NULL DEFAULT '{}',
    fanout          boolean     NOT NULL DEFAULT false,
    source          text        NOT NULL DEFAULT 'api',
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX triggers_created_idx ON triggers (created_at DESC);

-- Fencing tokens: every lease grant takes the next value, so a token is
-- never reused, across runs and coordinators.
CREATE SEQUENCE fencing_tokens;

-- runs: job x device x build. State machine:
--   queued -> assigned -> running -> succeeded | failed | cancelled
--   assigned|running -> queued (lease lost, attempts left) | infra_failed
--   queued|assigned|running -> cancelled; assigned|running -> failed (timeout)
-- token is the fencing token of the current (or last) lease; device_id the
-- device of the current (or last) attempt; target_device_id pins the run to
-- one device (fanout triggers). sel_* are the selector's fields, copied for
-- the placement query.
CREATE TABLE runs (
    id               bigserial   PRIMARY KEY,
    trigger_id       bigint      REFERENCES triggers (id) ON DELETE SET NULL,
    job_id           bigint      NOT NULL REFERENCES jobs (id),
    suite            text        NOT NULL,
    build            text        NOT NULL DEFAULT '',
    git_sha          text        NOT NULL DEFAULT '',
    device_selector  jsonb       NOT NULL DEFAULT '{}',
    sel_platform     text,
    sel_device_model text,
    sel_min_ram      bigint      NOT NULL DEFAULT 0,
    sel_emulated     boolean,
    sel_labels       jsonb       NOT NULL DEFAULT '{}',
    target_device_id text        REFERENCES devices (id) ON DELETE SET NULL,
    device_id        text        REFERENCES devices (id) ON DELETE SET NULL,
    state            text        NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'assigned', 'running', 'succeeded', 'failed', 'cancelled', 'infra_failed')),
    priority         integer     NOT NULL DEFAULT 0,
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     integer     NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    retry_on_failure boolean     NOT NULL DEFAULT false,
    timeout_ms       bigint      NOT NULL CHECK (timeout_ms > 0),
    token            bigint,
    lease_expires_at timestamptz,
    deadline_at      timestamptz,
    progress         real        NOT NULL DEFAULT 0,
    progress_message text        NOT NULL DEFAULT '',
    error            text        NOT NULL DEFAULT '',
    cancel_reason    text        NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    queued_at        timestamptz NOT NULL DEFAULT now(),
    assigned_at      timestamptz,
    started_at       timestamptz,
    finished_at      timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now()
);
-- The queue: placement scans queued runs by priority and age.
CREATE INDEX runs_queue_idx ON runs (priority DESC, queued_at, id) WHERE state = 'queued';
-- Active runs: lease expiry and timeout sweeps, per-device exclusivity.
CREATE INDEX runs_active_lease_idx ON runs (lease_expires_at) WHERE state IN ('assigned', 'running');
CREATE INDEX runs_active_deadline_idx ON runs (deadline_at) WHERE state IN ('assigned', 'running');
CREATE UNIQUE INDEX runs_one_active_per_device ON runs (device_id) WHERE state IN ('assigned', 'running');
-- Dashboard listings.
CREATE INDEX runs_created_idx ON runs (created_at DESC, id DESC);
CREATE INDEX runs_suite_idx ON runs (suite, created_at DESC);
CREATE INDEX runs_state_idx ON runs (state, created_at DESC);
CREATE INDEX runs_trigger_idx ON runs (trigger_id);
CREATE INDEX runs_device_idx ON runs (device_id, created_at DESC);
CREATE INDEX runs_build_idx ON runs (build);

-- leases are the history of lease grants (the current one is runs.token).
CREATE TABLE leases (
    token       bigint      PRIMARY KEY,
    run_id      bigint      NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    device_id   text        NOT NULL,
    coordinator text        NOT NULL DEFAULT '',
    granted_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    released_at timestamptz,
    -- outcome: why the lease ended (succeeded, failed, cancelled, expired,
    -- refused, timeout, ...).
    outcome     text        NOT NULL DEFAULT ''
);
CREATE INDEX leases_run_idx ON leases (run_id);

-- results: the statistics of one config of one run (protocol.ConfigResult).
-- suite, build, device_model, os_version and emulated are copied from the
-- run and device so series queries need no joins.
CREATE TABLE results (
    run_id             bigint           NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    config_index       integer          NOT NULL,
    config_key         text             NOT NULL,
    suite              text             NOT NULL,
    build              text             NOT NULL DEFAULT '',
    git_sha            text             NOT NULL DEFAULT '',
    device_id          text             NOT NULL,
    device_model       text             NOT NULL DEFAULT '',
    os_version         text             NOT NULL DEFAULT '',
    emulated           boolean          NOT NULL DEFAULT false,
    decode_tps_mean    double precision NOT NULL DEFAULT 0,
    decode_tps_median  double precision NOT NULL DEFAULT 0,
    decode_tps_stddev  double precision NOT NULL DEFAULT 0,
    decode_tps_cv      double precision NOT NULL DEFAULT 0,
    prefill_tps_mean   double precision NOT NULL DEFAULT 0,
    prefill_tps_median double precision NOT NULL DEFAULT 0,
    prefill_tps_stddev double precision NOT NULL DEFAULT 0,
    ttft_ms_mean       double precision NOT NULL DEFAULT 0,
    ttft_ms_median     double precision NOT NULL DEFAULT 0,
    ttft_ms_stddev     double precision NOT NULL DEFAULT 0,
    peak_memory_bytes  bigint           NOT NULL DEFAULT 0,
    hit_rate           double precision NOT NULL DEFAULT 0,
    predictor_recall   double precision NOT NULL DEFAULT 0,
    stall_fraction     double precision NOT NULL DEFAULT 0,
    bytes_per_token    double precision NOT NULL DEFAULT 0,
    repetitions        integer          NOT NULL DEFAULT 0,
    warmup             integer          NOT NULL DEFAULT 0,
    valid              boolean          NOT NULL DEFAULT false,
    invalid_reason     text             NOT NULL DEFAULT '',
    error              text             NOT NULL DEFAULT '',
    -- stats is the full protocol.ConfigResult (every Stat field, extras).
    stats              jsonb            NOT NULL DEFAULT '{}',
    created_at         timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, config_index)
);
CREATE INDEX results_series_idx ON results (suite, config_key, device_model, created_at);
CREATE INDEX results_build_idx ON results (build);

-- samples: per-token telemetry, the large table. (run_id, seq, idx) is
-- unique, so a redelivered batch is stored once. Hash-partitioned by run so
-- each partition's indexes stay small and a run's samples sit in one
-- partition; per-layer counts are arrays indexed by layer.
CREATE TABLE samples (
    run_id          bigint   NOT NULL,
    seq             integer  NOT NULL,
    idx             smallint NOT NULL,
    config_index    smallint NOT NULL,
    repetition      smallint NOT NULL,
    step            integer  NOT NULL,
    phase           smallint NOT NULL,
    pos             integer  NOT NULL,
    tokens          integer  NOT NULL,
    duration_ns     bigint   NOT NULL,
    stall_ns        bigint   NOT NULL,
    bytes_read      bigint   NOT NULL,
    cache_bytes     bigint   NOT NULL,
    hits            integer[],
    misses          integer[],
    prefetch_used   integer[],
    prefetch_wasted integer[],
    PRIMARY KEY (run_id, seq, idx)
) PARTITION BY HASH (run_id);
CREATE TABLE samples_p0 PARTITION OF samples FOR VALUES WITH (MODULUS 4, REMAINDER 0);
CREATE TABLE samples_p1 PARTITION OF samples FOR VALUES WITH (MODULUS 4, REMAINDER 1);
CREATE TABLE samples_p2 PARTITION OF samples FOR VALUES WITH (MODULUS 4, REMAINDER 2);
CREATE TABLE samples_p3 PARTITION OF samples FOR VALUES WITH (MODULUS 4, REMAINDER 3);

-- +goose Down
DROP TABLE samples;
DROP TABLE results;
DROP TABLE leases;
DROP TABLE runs;
DROP SEQUENCE fencing_tokens;
DROP TABLE triggers;
DROP TABLE jobs;
DROP TABLE suites;
DROP TABLE devices;
