-- SQLite migrations 4 and 5 (internal/store/migrate.go): private_traffic
-- records network.allowPublicTraffic=false on its own (a traffic token meant
-- exactly that until then); the secrets of E2B's /secrets, sealed with the
-- server key (package secretbox); the sealed credentials of a sandbox's
-- network config, dropped when it is killed.

-- +goose Up
ALTER TABLE sandboxes ADD COLUMN private_traffic boolean NOT NULL DEFAULT false;
UPDATE sandboxes SET private_traffic = true WHERE traffic_token != '';
ALTER TABLE sandboxes ADD COLUMN network_secret bytea;

CREATE TABLE secrets (
	id         text PRIMARY KEY,
	team       text NOT NULL,
	name       text NOT NULL,
	metadata   jsonb NOT NULL DEFAULT '{}',
	version    bigint NOT NULL,
	value      bytea NOT NULL,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL,
	UNIQUE (team, name)
);

-- +goose Down
DROP TABLE secrets;
ALTER TABLE sandboxes DROP COLUMN network_secret;
ALTER TABLE sandboxes DROP COLUMN private_traffic;
