package store

// asyncCommit is a FROM item that turns off synchronous_commit for the
// statement's own (autocommit) transaction: the commit returns without
// waiting for its WAL flush.
//
// It is for renewable, idempotent state only — a device's last_seen_at, a
// lease renewal or an assignment's ack — whose loss in a database crash
// (the last ~wal_writer_delay of such commits) shortens a lease at worst,
// which the fencing tokens already make safe. Results, telemetry, claims
// and tokens stay synchronous.
//
// Why it matters: every transaction that changes a run's state or progress
// sends a NOTIFY (migration 00023), and PostgreSQL serialises notifying
// commits on one database-wide lock held until the commit is flushed. With
// a 2–3 ms fsync that capped the whole farm at a few hundred such commits
// per second; at 1,000 agents the heartbeats alone (200/s, one progress
// update each) queued behind it until devices were declared lost. An
// asynchronous commit holds that lock for microseconds.
const asyncCommit = `(SELECT set_config('synchronous_commit', 'off', true)) AS async_commit`
