-- SQLite migrations 6-8 (internal/store/migrate.go): a team's snapshots (name
-- '' for unnamed ones, unique per team otherwise; internal ones are a fork's
-- capture, never listed); a team's volumes (token authenticates the volume
-- content API, size_bytes is the quota) and the volumes each sandbox mounts
-- (JSON [{name, path}]); the builds requested through the template build API.

-- +goose Up
CREATE TABLE snapshots (
	id          text PRIMARY KEY,
	team        text NOT NULL,
	name        text NOT NULL DEFAULT '',
	sandbox_id  text NOT NULL,
	template_id text NOT NULL,
	mode        text NOT NULL,
	size_bytes  bigint NOT NULL,
	created_at  timestamptz NOT NULL,
	internal    boolean NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX snapshots_team_name ON snapshots (team, name) WHERE name != '';
CREATE INDEX snapshots_team_created ON snapshots (team, created_at, id);

CREATE TABLE volumes (
	id         text PRIMARY KEY,
	team       text NOT NULL,
	name       text NOT NULL,
	token      text NOT NULL,
	size_bytes bigint NOT NULL,
	created_at timestamptz NOT NULL,
	UNIQUE (team, name)
);
ALTER TABLE sandboxes ADD COLUMN volume_mounts jsonb NOT NULL DEFAULT '[]';

CREATE TABLE template_builds (
	id          text PRIMARY KEY,
	template_id text NOT NULL,
	team        text NOT NULL,
	name        text NOT NULL,
	tags        jsonb NOT NULL DEFAULT '[]',
	status      text NOT NULL CHECK (status IN ('waiting', 'building', 'ready', 'error')),
	started     boolean NOT NULL DEFAULT false,
	reason      text NOT NULL DEFAULT '',
	reason_step text NOT NULL DEFAULT '',
	cpu_count   integer NOT NULL,
	memory_mb   integer NOT NULL,
	created_at  timestamptz NOT NULL,
	updated_at  timestamptz NOT NULL,
	finished_at timestamptz
);
CREATE INDEX template_builds_template ON template_builds (template_id, created_at);

-- +goose Down
DROP TABLE template_builds;
ALTER TABLE sandboxes DROP COLUMN volume_mounts;
DROP TABLE volumes;
DROP TABLE snapshots;
