-- SQLite migration 10 (internal/store/migrate.go): templates are recorded
-- only by the replicas' configuration (--template-image); nothing read this
-- copy.

-- +goose Up
DROP TABLE templates;

-- +goose Down
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
