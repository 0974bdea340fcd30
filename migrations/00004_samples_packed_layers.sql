-- Per-layer telemetry counts move from four integer[] columns to one packed
-- bytea plus per-step totals (coordinator/store). Measured on the 2-core
-- dev machine, COPY of rows with four int[] arrays ran at about 60k
-- samples/s; with the packed column and totals it is several times faster,
-- which the ingest target (100k samples/s) needs.
--
-- layers holds 4 x L little-endian uint16: hit[0..L), miss[0..L),
-- prefetch_used[0..L), prefetch_wasted[0..L); NULL when the agent dropped
-- per-layer detail. layer_count(layers, kind, layer) reads one entry
-- (kind 0 hit, 1 miss, 2 prefetch_used, 3 prefetch_wasted).

-- +goose Up
ALTER TABLE samples
    DROP COLUMN hits,
    DROP COLUMN misses,
    DROP COLUMN prefetch_used,
    DROP COLUMN prefetch_wasted,
    ADD COLUMN hits_total            integer NOT NULL DEFAULT 0,
    ADD COLUMN misses_total          integer NOT NULL DEFAULT 0,
    ADD COLUMN prefetch_used_total   integer NOT NULL DEFAULT 0,
    ADD COLUMN prefetch_wasted_total integer NOT NULL DEFAULT 0,
    ADD COLUMN layers                bytea;

-- +goose StatementBegin
CREATE FUNCTION layer_count(layers bytea, kind integer, layer integer) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN layer < 0 OR layer >= length(layers) / 8 OR kind < 0 OR kind > 3 THEN NULL
        ELSE get_byte(layers, (kind * (length(layers) / 8) + layer) * 2)
           + 256 * get_byte(layers, (kind * (length(layers) / 8) + layer) * 2 + 1) END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION layer_count(bytea, integer, integer);
ALTER TABLE samples
    DROP COLUMN hits_total,
    DROP COLUMN misses_total,
    DROP COLUMN prefetch_used_total,
    DROP COLUMN prefetch_wasted_total,
    DROP COLUMN layers,
    ADD COLUMN hits            integer[],
    ADD COLUMN misses          integer[],
    ADD COLUMN prefetch_used   integer[],
    ADD COLUMN prefetch_wasted integer[];
