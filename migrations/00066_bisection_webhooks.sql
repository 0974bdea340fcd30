-- Bisection webhooks (issue 30 item 4; coordinator/store webhooks.go,
-- coordinator/regress/monitor webhook.go, docs/bisect.md): when a
-- bisection ends (culprit, not_reproduced, ambiguous, failed or
-- cancelled) the suite's regression webhook is notified through the same
-- outbox as alert groups, signed and retried alike.
--
-- webhook_deliveries.bisection_id names the bisection of a delivery (NULL
-- for an alert group's own). A group is notified once per URL, a
-- bisection once per URL: the unique (group_id, url) becomes two partial
-- unique indexes.

-- +goose Up
ALTER TABLE webhook_deliveries ADD COLUMN bisection_id bigint REFERENCES bisections (id) ON DELETE CASCADE;
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_group_id_url_key;
CREATE UNIQUE INDEX webhook_deliveries_group_url ON webhook_deliveries (group_id, url) WHERE bisection_id IS NULL;
CREATE UNIQUE INDEX webhook_deliveries_bisection_url ON webhook_deliveries (bisection_id, url) WHERE bisection_id IS NOT NULL;

-- +goose Down
DELETE FROM webhook_deliveries WHERE bisection_id IS NOT NULL;
DROP INDEX webhook_deliveries_bisection_url;
DROP INDEX webhook_deliveries_group_url;
ALTER TABLE webhook_deliveries DROP COLUMN bisection_id;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_group_id_url_key UNIQUE (group_id, url);
