-- Token scopes, unique token names and the egress allow-list (issue 29,
-- findings 8 and 12; coordinator/store tokens.go and egress.go,
-- coordinator/api scopes.go, docs/security.md "Token scopes").
--
-- api_tokens.scopes: what a token may do (read, trigger, suites, builds,
-- admin). Tokens created before this migration had every power, so they
-- keep every scope: nothing that worked stops working. New tokens name
-- their scopes ('lesfarm token create --scope').
--
-- Live token names are unique: two live tokens called "ci" cannot be told
-- apart in 'token list' or in the logs. Live duplicates that already exist
-- keep working; all but the newest are renamed "NAME #ID".
--
-- egress_hosts: the hosts (host or host:port) besides the coordinator's own
-- --artifact-url that a suite's model.url may name; agents fetch from
-- nowhere else. Set by an admin (PUT /v1/egress).

-- +goose Up
ALTER TABLE api_tokens ADD COLUMN scopes text[] NOT NULL
    DEFAULT ARRAY['read', 'trigger', 'suites', 'builds', 'admin']::text[]
    CHECK (scopes <@ ARRAY['read', 'trigger', 'suites', 'builds', 'admin']::text[]);

UPDATE api_tokens t SET name = left(t.name, 180) || ' #' || t.id
WHERE t.revoked_at IS NULL
  AND EXISTS (SELECT 1 FROM api_tokens n WHERE n.name = t.name AND n.revoked_at IS NULL AND n.id > t.id);

CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (name) WHERE revoked_at IS NULL;

CREATE TABLE egress_hosts (
    host       text        PRIMARY KEY CHECK (host <> '' AND length(host) <= 255 AND host = lower(host)),
    added_at   timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE egress_hosts;
DROP INDEX api_tokens_live_name;
ALTER TABLE api_tokens DROP COLUMN scopes;
