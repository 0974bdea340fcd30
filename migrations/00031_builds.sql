-- The build registry (coordinator/builds, coordinator/store/builds.go): a
-- build is registered, immutable code, not a free-text label. Each build
-- has a user-chosen id (same characters as a lineage), a lineage, an order
-- in that lineage, the git sha it claims and, for kind 'exec', one
-- executable per platform stored as an artifact (its sha256 is its
-- identity: two binaries built without VCS stamping both say "(devel)").
-- Kind 'embedded' is an agent's embedded runtime, registered by the
-- coordinator when the agent says hello; its executables are the agents'
-- own binaries, which are not in the artifact store.
--
-- Order: position is an integer per lineage. A push appends (max + 1); a
-- push "after B" takes B's position + 1 and shifts the later builds of the
-- lineage up by one, in the same transaction, under a per-lineage advisory
-- lock. The unique (lineage, position) is deferrable so that shift, one
-- statement, is checked at its end rather than row by row.
--
-- Executables' artifacts are pinned when their build is created, and the
-- trigger below keeps them pinned while a build references them, so
-- neither the artifact garbage collector nor an operator's unpin can take
-- a build's code away; deleting such an artifact fails on the foreign key.

-- +goose Up
CREATE TABLE builds (
    id         text        PRIMARY KEY
        CONSTRAINT builds_id_check CHECK (length(id) <= 200 AND id ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$'),
    lineage    text        NOT NULL DEFAULT 'main'
        CONSTRAINT builds_lineage_check CHECK (length(lineage) <= 200 AND lineage ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$'),
    position   bigint      NOT NULL CHECK (position > 0),
    kind       text        NOT NULL CHECK (kind IN ('exec', 'embedded')),
    -- git_sha is the executables' vcs.revision when they carry one (it
    -- extends a short --git-sha), else the --git-sha given, else ''.
    git_sha    text        NOT NULL DEFAULT '' CHECK (length(git_sha) <= 64 AND git_sha ~ '^[0-9a-f]*$'),
    -- dirty: some executable was built from a modified tree (vcs.modified).
    dirty      boolean     NOT NULL DEFAULT false,
    pushed_at  timestamptz NOT NULL DEFAULT now(),
    -- pushed_by is the name of the API token that pushed it ('coordinator'
    -- for embedded builds).
    pushed_by  text        NOT NULL DEFAULT '',
    CONSTRAINT builds_position_key UNIQUE (lineage, position) DEFERRABLE INITIALLY IMMEDIATE,
    -- The target of build_executables' (build_id, kind) foreign key.
    CONSTRAINT builds_id_kind_key UNIQUE (id, kind)
);
CREATE INDEX builds_pushed_idx ON builds (pushed_at DESC, id);

-- build_executables: one per (build, platform). An exec build's
-- executable is the artifact with the same sha256 (artifact = sha256); an
-- embedded build's has no artifact.
CREATE TABLE build_executables (
    build_id     text    NOT NULL,
    kind         text    NOT NULL,
    platform     text    NOT NULL CHECK (platform ~ '^[a-z0-9]{1,16}/[a-z0-9]{1,16}$'),
    sha256       text    NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    artifact     text    REFERENCES artifacts (sha256) ON DELETE RESTRICT,
    -- size_bytes is 0 when unknown (an embedded build).
    size_bytes   bigint  NOT NULL DEFAULT 0 CHECK (size_bytes >= 0),
    go_version   text    NOT NULL DEFAULT '',
    -- revision and vcs_modified are the binary's vcs.revision and
    -- vcs.modified ('' and false without VCS stamping).
    revision     text    NOT NULL DEFAULT '',
    vcs_modified boolean NOT NULL DEFAULT false,
    -- module_path and main_path: the main module and main package.
    module_path  text    NOT NULL DEFAULT '',
    main_path    text    NOT NULL DEFAULT '',
    -- settings are the binary's build settings (GOOS, GOARCH, -ldflags,
    -- -tags, CGO_ENABLED, vcs.*) as a JSON object of strings.
    settings     jsonb   NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(settings) = 'object'),
    PRIMARY KEY (build_id, platform),
    FOREIGN KEY (build_id, kind) REFERENCES builds (id, kind) ON DELETE CASCADE,
    CONSTRAINT build_executables_artifact_check CHECK (
        (kind = 'exec' AND artifact IS NOT NULL AND artifact = sha256) OR (kind = 'embedded' AND artifact IS NULL))
);
CREATE INDEX build_executables_sha256_idx ON build_executables (sha256);

-- +goose StatementBegin
CREATE FUNCTION builds_keep_artifacts_pinned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT NEW.pinned AND EXISTS (SELECT 1 FROM build_executables be WHERE be.artifact = NEW.sha256) THEN
        NEW.pinned := true;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER artifacts_keep_build_pinned BEFORE UPDATE OF pinned ON artifacts
    FOR EACH ROW EXECUTE FUNCTION builds_keep_artifacts_pinned();

-- +goose Down
DROP TRIGGER artifacts_keep_build_pinned ON artifacts;
DROP FUNCTION builds_keep_artifacts_pinned();
DROP TABLE build_executables;
DROP TABLE builds;
