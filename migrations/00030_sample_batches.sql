-- sample_batches: telemetry samples stored one row per telemetry message
-- (run, seq) instead of one row per sample, each field an array indexed by
-- the sample's position in its message (idx + 1). The per-row cost of the
-- samples table (tuple header, partition routing, a primary-key index entry
-- and a WAL record per sample) was what bounded ingest: measured on the
-- 2-core dev machine, binary COPY of 100,000 samples (48 layers each) took
-- 5.9–7.9 ms of backend CPU per 1,000 samples as rows, 1.4–1.9 ms as
-- 2,000 rows of 50-sample arrays with lz4 (docs/scale.md). A message is
-- always stored whole, so (run_id, seq) deduplicates exactly as
-- (run_id, seq, idx) did. n is the number of samples, so counts need no
-- detoasting.
--
-- The samples view unnests the arrays into the old row shape (same column
-- names and types, idx 0-based), so readers kept their queries; a predicate
-- on run_id reaches the primary key. Writes go to sample_batches.

-- +goose Up
CREATE TABLE sample_batches (
    run_id                bigint     NOT NULL,
    seq                   integer    NOT NULL,
    n                     smallint   NOT NULL,
    config_index          smallint[] NOT NULL,
    repetition            smallint[] NOT NULL,
    step                  integer[]  NOT NULL,
    phase                 smallint[] NOT NULL,
    pos                   integer[]  NOT NULL,
    tokens                integer[]  NOT NULL,
    duration_ns           bigint[]   NOT NULL,
    stall_ns              bigint[]   NOT NULL,
    bytes_read            bigint[]   NOT NULL,
    cache_bytes           bigint[]   NOT NULL,
    hits_total            integer[]  NOT NULL,
    misses_total          integer[]  NOT NULL,
    prefetch_used_total   integer[]  NOT NULL,
    prefetch_wasted_total integer[]  NOT NULL,
    layers                bytea[]    NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- lz4 where the server has it (pglz, the default, cost more CPU than the
-- rows it replaced); a server built without lz4 keeps pglz.
-- +goose StatementBegin
DO $$
DECLARE c text;
BEGIN
    FOREACH c IN ARRAY ARRAY['config_index', 'repetition', 'step', 'phase', 'pos', 'tokens', 'duration_ns', 'stall_ns', 'bytes_read',
        'cache_bytes', 'hits_total', 'misses_total', 'prefetch_used_total', 'prefetch_wasted_total', 'layers'] LOOP
        EXECUTE format('ALTER TABLE sample_batches ALTER COLUMN %I SET COMPRESSION lz4', c);
    END LOOP;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
    RAISE NOTICE 'sample_batches: lz4 not available, keeping pglz';
END
$$;
-- +goose StatementEnd

INSERT INTO sample_batches
SELECT run_id, seq, count(*), array_agg(config_index ORDER BY idx), array_agg(repetition ORDER BY idx), array_agg(step ORDER BY idx),
    array_agg(phase ORDER BY idx), array_agg(pos ORDER BY idx), array_agg(tokens ORDER BY idx), array_agg(duration_ns ORDER BY idx),
    array_agg(stall_ns ORDER BY idx), array_agg(bytes_read ORDER BY idx), array_agg(cache_bytes ORDER BY idx),
    array_agg(hits_total ORDER BY idx), array_agg(misses_total ORDER BY idx), array_agg(prefetch_used_total ORDER BY idx),
    array_agg(prefetch_wasted_total ORDER BY idx), array_agg(layers ORDER BY idx)
FROM samples GROUP BY run_id, seq;

DROP TABLE samples;

CREATE VIEW samples AS
SELECT b.run_id, b.seq, (u.i - 1)::smallint AS idx, u.config_index, u.repetition, u.step, u.phase, u.pos, u.tokens, u.duration_ns,
    u.stall_ns, u.bytes_read, u.cache_bytes, u.hits_total, u.misses_total, u.prefetch_used_total, u.prefetch_wasted_total, u.layers
FROM sample_batches b,
    unnest(b.config_index, b.repetition, b.step, b.phase, b.pos, b.tokens, b.duration_ns, b.stall_ns, b.bytes_read, b.cache_bytes,
        b.hits_total, b.misses_total, b.prefetch_used_total, b.prefetch_wasted_total, b.layers)
        WITH ORDINALITY AS u(config_index, repetition, step, phase, pos, tokens, duration_ns, stall_ns, bytes_read, cache_bytes,
            hits_total, misses_total, prefetch_used_total, prefetch_wasted_total, layers, i);

-- +goose Down
CREATE TABLE samples_rows (
    run_id                bigint   NOT NULL,
    seq                   integer  NOT NULL,
    idx                   smallint NOT NULL,
    config_index          smallint NOT NULL,
    repetition            smallint NOT NULL,
    step                  integer  NOT NULL,
    phase                 smallint NOT NULL,
    pos                   integer  NOT NULL,
    tokens                integer  NOT NULL,
    duration_ns           bigint   NOT NULL,
    stall_ns              bigint   NOT NULL,
    bytes_read            bigint   NOT NULL,
    cache_bytes           bigint   NOT NULL,
    hits_total            integer  NOT NULL DEFAULT 0,
    misses_total          integer  NOT NULL DEFAULT 0,
    prefetch_used_total   integer  NOT NULL DEFAULT 0,
    prefetch_wasted_total integer  NOT NULL DEFAULT 0,
    layers                bytea,
    PRIMARY KEY (run_id, seq, idx)
) PARTITION BY HASH (run_id);
CREATE TABLE samples_p0 PARTITION OF samples_rows FOR VALUES WITH (MODULUS 4, REMAINDER 0);
CREATE TABLE samples_p1 PARTITION OF samples_rows FOR VALUES WITH (MODULUS 4, REMAINDER 1);
CREATE TABLE samples_p2 PARTITION OF samples_rows FOR VALUES WITH (MODULUS 4, REMAINDER 2);
CREATE TABLE samples_p3 PARTITION OF samples_rows FOR VALUES WITH (MODULUS 4, REMAINDER 3);
INSERT INTO samples_rows SELECT * FROM samples;
DROP VIEW samples;
DROP TABLE sample_batches;
ALTER TABLE samples_rows RENAME TO samples;
