-- +goose Up
-- meta holds facts about this installation (e.g. its id and when the schema
-- was first created), readable by every coordinator sharing the database.
CREATE TABLE meta (
    key        text PRIMARY KEY,
    value      text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO meta (key, value) VALUES ('installation_id', md5(random()::text || clock_timestamp()::text));

-- +goose Down
DROP TABLE meta;
