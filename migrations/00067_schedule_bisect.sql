-- Automatic bisection per nightly schedule (issue 30 item 3, "bisect:
-- auto"; coordinator/bisect auto.go, coordinator/store bisect_auto.go,
-- docs/bisect.md).
--
-- schedules.bisect: 'off' (the default) or 'auto'. With 'auto', when the
-- schedule's nightly runs raise a regression alert group, the
-- coordinator starts one bisection of it by itself (at the bisection
-- priority, below nightly work).
--
-- bisect_auto: one row per alert group an automatic bisection was tried
-- for (its primary key keeps it to at most one per group): the schedule
-- whose runs raised it, the bisection started (NULL while none was), the
-- outcome in one line ("started bisection 7", or why it was refused), the
-- attempts, and when to try again (set only while the group's device model
-- has no device online; NULL: never again).

-- +goose Up
ALTER TABLE schedules ADD COLUMN bisect text NOT NULL DEFAULT 'off' CHECK (bisect IN ('off', 'auto'));

CREATE TABLE bisect_auto (
    group_id     bigint      PRIMARY KEY REFERENCES alert_groups (id) ON DELETE CASCADE,
    schedule_id  bigint      REFERENCES schedules (id) ON DELETE SET NULL,
    bisection_id bigint      REFERENCES bisections (id) ON DELETE SET NULL,
    outcome      text        NOT NULL DEFAULT '',
    attempts     int         NOT NULL DEFAULT 1,
    next_try_at  timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bisect_auto_retry ON bisect_auto (next_try_at) WHERE next_try_at IS NOT NULL;

-- +goose Down
DROP TABLE bisect_auto;
ALTER TABLE schedules DROP COLUMN bisect;
