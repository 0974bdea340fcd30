-- Run change notifications (coordinator/store notify.go): every insert of a
-- run and every update that changes what a waiter or a progress stream shows
-- (state, progress, progress_message, attempts, error) sends a NOTIFY on the
-- lesfarm_runs channel, so run waits and GET /v1/runs/events wake at once
-- instead of polling. Being a trigger, it covers every writer: this store,
-- other coordinators on the same database and manual SQL. Lease renewals
-- that change nothing shown (lease_expires_at, updated_at) do not notify.
--
-- Payload: "<run id> <state> <trigger id or 0>", at most ~50 bytes (the
-- limit is 8000). Notifications are delivered at commit and duplicates in
-- one transaction are folded by Postgres.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION lesfarm_notify_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('lesfarm_runs', NEW.id::text || ' ' || NEW.state || ' ' || coalesce(NEW.trigger_id, 0)::text);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER runs_notify_insert AFTER INSERT ON runs
    FOR EACH ROW EXECUTE FUNCTION lesfarm_notify_run();

CREATE TRIGGER runs_notify_update AFTER UPDATE OF state, progress, progress_message, attempts, error ON runs
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state
       OR OLD.progress IS DISTINCT FROM NEW.progress
       OR OLD.progress_message IS DISTINCT FROM NEW.progress_message
       OR OLD.attempts IS DISTINCT FROM NEW.attempts
       OR OLD.error IS DISTINCT FROM NEW.error)
    EXECUTE FUNCTION lesfarm_notify_run();

-- +goose Down
DROP TRIGGER runs_notify_update ON runs;
DROP TRIGGER runs_notify_insert ON runs;
DROP FUNCTION lesfarm_notify_run();
