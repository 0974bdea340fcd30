-- Builds under test (coordinator/store results, docs/builds.md): which code
-- produced each result, and the run state of a build's own failure.
--
-- runs.provenance is the last attempt's protocol.Provenance as the agent
-- reported it (build id, the executable's sha256 and platform, the
-- revision the runner reported, the agent's build, the child's peak RSS
-- and, for a failed build, the tail of its stderr). results carry the
-- executable's sha256 on every row, so a series point names the code it
-- measured.
--
-- build_failed: the build's executable crashed, hung, printed malformed
-- runner output or overran the RAM budget. It is the build's failure,
-- never retried as infrastructure (infra_failed is).

-- +goose Up
ALTER TABLE runs DROP CONSTRAINT runs_state_check;
ALTER TABLE runs ADD CONSTRAINT runs_state_check
    CHECK (state IN ('queued', 'assigned', 'running', 'succeeded', 'failed', 'cancelled', 'infra_failed', 'build_failed'));
ALTER TABLE runs ADD COLUMN provenance jsonb;
ALTER TABLE results ADD COLUMN executable_sha256 text NOT NULL DEFAULT ''
    CONSTRAINT results_executable_sha256_check CHECK (executable_sha256 = '' OR executable_sha256 ~ '^[0-9a-f]{64}$');

-- +goose Down
ALTER TABLE results DROP COLUMN executable_sha256;
ALTER TABLE runs DROP COLUMN provenance;
UPDATE runs SET state = 'failed' WHERE state = 'build_failed';
ALTER TABLE runs DROP CONSTRAINT runs_state_check;
ALTER TABLE runs ADD CONSTRAINT runs_state_check
    CHECK (state IN ('queued', 'assigned', 'running', 'succeeded', 'failed', 'cancelled', 'infra_failed'));
