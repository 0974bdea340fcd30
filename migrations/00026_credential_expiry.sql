-- +goose Up

-- expires_at is the optional end of an API token's or device credential's
-- life (lesfarm token create --expires 720h). NULL never expires. Past it
-- the secret is refused exactly like a revoked one: HTTP 401 for a token,
-- a NATS authorization refusal (and a disconnect of open connections) for
-- a device credential. last_used_at (since 00010/00022) is written at most
-- once a minute per secret, not once per request.
ALTER TABLE api_tokens ADD COLUMN expires_at timestamptz;
ALTER TABLE device_credentials ADD COLUMN expires_at timestamptz;

-- +goose Down
ALTER TABLE device_credentials DROP COLUMN expires_at;
ALTER TABLE api_tokens DROP COLUMN expires_at;
