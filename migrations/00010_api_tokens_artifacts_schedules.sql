-- API tokens, artifact metadata and nightly schedules (coordinator/api,
-- coordinator/artifact, coordinator/nightly).

-- +goose Up

-- api_tokens holds bearer tokens for mutating REST calls. Only the sha256 of
-- the secret is stored; the secret itself is printed once by
-- `lesfarm token create`. prefix (the first characters of the secret) lets an
-- operator tell tokens apart without revealing them.
CREATE TABLE api_tokens (
    id           bigserial PRIMARY KEY,
    name         text        NOT NULL CHECK (name <> '' AND length(name) <= 200),
    prefix       text        NOT NULL,
    token_hash   bytea       NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);

-- artifacts is the metadata of the content-addressed file store; the bytes
-- live under the data dir at artifacts/sha256/<aa>/<sha256>.
CREATE TABLE artifacts (
    sha256           text        PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size_bytes       bigint      NOT NULL CHECK (size_bytes >= 0),
    name             text        NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    last_accessed_at timestamptz NOT NULL DEFAULT now(),
    -- pinned artifacts are never garbage-collected.
    pinned           boolean     NOT NULL DEFAULT false
);
CREATE INDEX artifacts_gc_idx ON artifacts (last_accessed_at) WHERE NOT pinned;

-- schedules are cron-driven triggers of a suite (nightly runs). next_fire_at
-- is the next occurrence not yet handled; a coordinator claims an occurrence
-- by locking the row (FOR UPDATE SKIP LOCKED), recording it in
-- schedule_firings and advancing next_fire_at in one transaction, so each
-- occurrence is handled exactly once across coordinators.
CREATE TABLE schedules (
    id              bigserial   PRIMARY KEY,
    name            text        NOT NULL UNIQUE CHECK (name <> '' AND length(name) <= 200),
    cron            text        NOT NULL,
    timezone        text        NOT NULL DEFAULT 'UTC',
    suite           text        NOT NULL,
    build           text        NOT NULL DEFAULT '',
    git_sha         text        NOT NULL DEFAULT '',
    device_selector jsonb       NOT NULL DEFAULT '{}',
    config_override jsonb,
    priority        integer     NOT NULL DEFAULT 0,
    enabled         boolean     NOT NULL DEFAULT true,
    -- catchup_seconds is the missed-occurrence window: after downtime, the
    -- most recent missed occurrence still fires if it is at most this old;
    -- older ones are recorded as skipped.
    catchup_seconds integer     NOT NULL DEFAULT 3600 CHECK (catchup_seconds >= 0),
    next_fire_at    timestamptz NOT NULL,
    last_fired_at   timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX schedules_due_idx ON schedules (next_fire_at) WHERE enabled;

-- schedule_firings records every handled occurrence; the primary key makes a
-- double firing of one occurrence impossible even if the locking were wrong.
CREATE TABLE schedule_firings (
    schedule_id bigint      NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    occurrence  timestamptz NOT NULL,
    handled_at  timestamptz NOT NULL DEFAULT now(),
    outcome     text        NOT NULL CHECK (outcome IN ('fired', 'skipped', 'failed')),
    coordinator text        NOT NULL DEFAULT '',
    run_ids     text[]      NOT NULL DEFAULT '{}',
    detail      text        NOT NULL DEFAULT '',
    PRIMARY KEY (schedule_id, occurrence)
);

-- +goose Down
DROP TABLE schedule_firings;
DROP TABLE schedules;
DROP TABLE artifacts;
DROP TABLE api_tokens;
