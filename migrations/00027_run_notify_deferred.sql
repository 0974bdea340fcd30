-- Deferred run notifications (coordinator/store notify_deferred.go): a
-- transaction that sets lesfarm.notify = 'deferred' (transaction-local) is
-- skipped by the run triggers of migration 00023, and the store sends the
-- same notices itself right after the commit, in a transaction of their own
-- that commits asynchronously.
--
-- Why: PostgreSQL serialises the commits of notifying transactions on one
-- database-wide lock held until the commit's WAL is flushed. Every trigger,
-- claim and result used to notify from its own transaction, so at 1,000
-- agents they, and every ack and lease renewal behind them, queued on that
-- lock one fsync (2-3 ms, far more on a loaded disk) at a time. Every other
-- writer (other paths of the store, manual SQL) still notifies from the
-- trigger as before.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION lesfarm_notify_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('lesfarm.notify', true) = 'deferred' THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify('lesfarm_runs', NEW.id::text || ' ' || NEW.state || ' ' || coalesce(NEW.trigger_id, 0)::text);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION lesfarm_notify_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('lesfarm_runs', NEW.id::text || ' ' || NEW.state || ' ' || coalesce(NEW.trigger_id, 0)::text);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
