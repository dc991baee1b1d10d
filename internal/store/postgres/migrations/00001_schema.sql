-- The schema of SQLite migrations 1-3 (internal/store/migrate.go) in
-- PostgreSQL's own types: timestamps as timestamptz (stored at millisecond
-- precision), JSON fields as jsonb (network as json, kept byte for byte).

-- +goose Up
CREATE TABLE teams (
	name       text PRIMARY KEY,
	created_at timestamptz NOT NULL
);
INSERT INTO teams (name, created_at) VALUES ('default', date_trunc('milliseconds', now()));

CREATE TABLE sandboxes (
	id                    text PRIMARY KEY,
	team                  text NOT NULL DEFAULT 'default',
	template_id           text NOT NULL,
	template_alias        text NOT NULL DEFAULT '',
	metadata              jsonb NOT NULL DEFAULT '{}',
	env_vars              jsonb NOT NULL DEFAULT '{}',
	cpu_count             integer NOT NULL,
	memory_mb             integer NOT NULL,
	disk_mb               integer NOT NULL,
	started_at            timestamptz NOT NULL,
	end_at                timestamptz NOT NULL,
	state                 text NOT NULL CHECK (state IN ('running', 'paused', 'killed')),
	secure                boolean NOT NULL DEFAULT false,
	access_token          text NOT NULL DEFAULT '',
	traffic_token         text NOT NULL DEFAULT '',
	allow_internet_access boolean,
	network               json,
	lifecycle             jsonb NOT NULL DEFAULT '{}',
	runtime               text NOT NULL DEFAULT '',
	addr                  text NOT NULL DEFAULT '',
	killed_at             timestamptz,
	kill_reason           text NOT NULL DEFAULT ''
);
CREATE INDEX sandboxes_state_started ON sandboxes (state, started_at, id);
CREATE INDEX sandboxes_team_state_started ON sandboxes (team, state, started_at, id);
CREATE INDEX sandboxes_running_end ON sandboxes (end_at) WHERE state = 'running';

CREATE TABLE api_keys (
	id           text PRIMARY KEY,
	name         text NOT NULL,
	team         text NOT NULL DEFAULT 'default',
	hash         bytea NOT NULL UNIQUE,
	mask         text NOT NULL,
	created_at   timestamptz NOT NULL,
	last_used_at timestamptz,
	revoked_at   timestamptz
);

CREATE TABLE templates (
	id         text PRIMARY KEY,
	name       text NOT NULL,
	aliases    jsonb NOT NULL DEFAULT '[]',
	digest     text NOT NULL DEFAULT '',
	rootfs_dir text NOT NULL,
	built_at   timestamptz NOT NULL,
	size_bytes bigint NOT NULL DEFAULT 0
);
CREATE INDEX templates_name ON templates (name);

-- +goose Down
DROP TABLE templates;
DROP TABLE api_keys;
DROP TABLE sandboxes;
DROP TABLE teams;
