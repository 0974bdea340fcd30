-- device_build_since: when a device's build changed (issue 34 item 12).
-- build is the code the agent reported in its last hello, in one line
-- (agent build · runtime build when it differs · embeds the embedded
-- build: store.DeviceBuild); build_since is when the device first said
-- hello with it (NULL: before this migration, unknown); previous_build is
-- what it ran before ('' when it never changed).

-- +goose Up
ALTER TABLE devices
	ADD COLUMN build text NOT NULL DEFAULT '',
	ADD COLUMN build_since timestamptz,
	ADD COLUMN previous_build text NOT NULL DEFAULT '';
UPDATE devices SET build = concat_ws(' · ',
	nullif(fingerprint->>'agent_build', ''),
	CASE WHEN coalesce(fingerprint->>'runtime_build', '') NOT IN ('', coalesce(fingerprint->>'agent_build', ''))
		THEN 'runtime ' || (fingerprint->>'runtime_build') END,
	CASE WHEN coalesce(fingerprint->>'embedded_build', '') <> '' THEN 'embeds ' || (fingerprint->>'embedded_build') END);

-- +goose Down
ALTER TABLE devices DROP COLUMN build, DROP COLUMN build_since, DROP COLUMN previous_build;
