-- Measured device profiles (issue 14): the storage/compute profile YAML a
-- real device wrote with `lesfarm profile measure`, uploaded so an emulated
-- twin of it is one flag (`lesfarm agent --profile twin:DEVICE_ID`).

-- +goose Up

-- device_profiles holds one measured profile per device id, replaced by each
-- upload. profile_yaml is the file as written by profile measure (its
-- comments keep the measured grid); the API validates it with the runtime's
-- profile parser before storing it. name is the profile's name field.
-- device_id is not a foreign key: a device may be measured before its first
-- hello, and the profile outlives a device row removed from the fleet.
CREATE TABLE device_profiles (
    device_id    text        PRIMARY KEY CHECK (device_id ~ '^[A-Za-z0-9_-]{1,64}$'),
    name         text        NOT NULL,
    profile_yaml text        NOT NULL CHECK (length(profile_yaml) BETWEEN 1 AND 262144),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE device_profiles;
