-- Model facts of artifacts (coordinator/artifact.ReadModelFacts): read from
-- a GGUF artifact's header when it is uploaded, and copied into
-- assignments so an agent can refuse a model it cannot run (unknown
-- architecture or tensor type, not enough RAM) before downloading it.

-- +goose Up

-- model_facts is the protocol.ModelFacts JSON (architecture, moe,
-- expert_count, expert_used_count, tensor_types, tensors, total_bytes,
-- expert_bytes, resident_bytes, packed), NULL when the artifact is not a
-- readable GGUF or was not analysed. model_error says why a file that looks
-- like GGUF has no facts. model_checked_at is when the header was read;
-- NULL for artifacts stored before this migration (they are analysed when
-- uploaded again).
ALTER TABLE artifacts
    ADD COLUMN model_facts      jsonb CHECK (model_facts IS NULL OR jsonb_typeof(model_facts) = 'object'),
    ADD COLUMN model_error      text  NOT NULL DEFAULT '',
    ADD COLUMN model_checked_at timestamptz;

-- +goose Down
ALTER TABLE artifacts
    DROP COLUMN model_checked_at,
    DROP COLUMN model_error,
    DROP COLUMN model_facts;
