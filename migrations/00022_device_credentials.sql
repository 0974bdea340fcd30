-- +goose Up

-- device_credentials holds the secrets devices present to the coordinator's
-- embedded NATS server (lesfarm serve --nats-auth devices). Each credential
-- is bound to one device id: the authenticator grants a connection presenting
-- it permissions on that device's subjects only. As for api_tokens, only the
-- sha256 of the secret is stored; `lesfarm token create --device ID` prints
-- the secret once. device_id is not a foreign key: a credential is usually
-- created before the device's first hello.
CREATE TABLE device_credentials (
    id           bigserial PRIMARY KEY,
    device_id    text        NOT NULL CHECK (device_id ~ '^[A-Za-z0-9_-]{1,64}$'),
    prefix       text        NOT NULL,
    token_hash   bytea       NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX device_credentials_device_idx ON device_credentials (device_id);

-- +goose Down
DROP TABLE device_credentials;
