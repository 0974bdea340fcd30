-- device_session: one connection per device (issue 29 finding 11). Each
-- agent process says hello with a random session id; the newest hello
-- takes the device over and a heartbeat or assignment of any other
-- session is fenced (coordinator/liveness.go, docs/protocol.md). ''
-- is an agent from before sessions: not fenced.

-- +goose Up
ALTER TABLE devices ADD COLUMN session text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE devices DROP COLUMN session;
