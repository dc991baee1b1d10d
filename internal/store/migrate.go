package store

import (
	"context"
	"fmt"
)

// migrations returns the schema migrations in order; migration i brings the schema
// to version i+1 (PRAGMA user_version). Never edit a released migration: append.
func migrations() []string {
	return []string{
		// 1: sandboxes, api_keys, templates.
		`CREATE TABLE sandboxes (
		id                    TEXT PRIMARY KEY,
		template_id           TEXT NOT NULL,
		template_alias        TEXT NOT NULL DEFAULT '',
		metadata              TEXT NOT NULL DEFAULT '{}',
		env_vars              TEXT NOT NULL DEFAULT '{}',
		cpu_count             INTEGER NOT NULL,
		memory_mb             INTEGER NOT NULL,
		disk_mb               INTEGER NOT NULL,
		started_at            INTEGER NOT NULL,
		end_at                INTEGER NOT NULL,
		state                 TEXT NOT NULL CHECK (state IN ('running', 'paused', 'killed')),
		secure                INTEGER NOT NULL DEFAULT 0,
		access_token          TEXT NOT NULL DEFAULT '',
		traffic_token         TEXT NOT NULL DEFAULT '',
		allow_internet_access INTEGER,
		network               TEXT,
		lifecycle             TEXT NOT NULL DEFAULT '{}',
		runtime               TEXT NOT NULL DEFAULT '',
		addr                  TEXT NOT NULL DEFAULT '',
		killed_at             INTEGER,
		kill_reason           TEXT NOT NULL DEFAULT ''
	);
	CREATE INDEX sandboxes_state_started ON sandboxes (state, started_at, id);
	CREATE TABLE api_keys (
		id           TEXT PRIMARY KEY,
		name         TEXT NOT NULL,
		hash         BLOB NOT NULL UNIQUE,
		mask         TEXT NOT NULL,
		created_at   INTEGER NOT NULL,
		last_used_at INTEGER,
		revoked_at   INTEGER
	);
	CREATE TABLE templates (
		id         TEXT PRIMARY KEY,
		name       TEXT NOT NULL,
		aliases    TEXT NOT NULL DEFAULT '[]',
		digest     TEXT NOT NULL DEFAULT '',
		rootfs_dir TEXT NOT NULL,
		built_at   INTEGER NOT NULL,
		size_bytes INTEGER NOT NULL DEFAULT 0
	);
	CREATE INDEX templates_name ON templates (name);`,
		// 2: teams. Every key and sandbox recorded before belongs to the team
		// "default" (DefaultTeam), as CUBBY_API_KEY does.
		`CREATE TABLE teams (
		name       TEXT PRIMARY KEY,
		created_at INTEGER NOT NULL
	);
	INSERT INTO teams (name, created_at) VALUES ('default', CAST(strftime('%s', 'now') AS INTEGER) * 1000);
	ALTER TABLE api_keys ADD COLUMN team TEXT NOT NULL DEFAULT 'default';
	ALTER TABLE sandboxes ADD COLUMN team TEXT NOT NULL DEFAULT 'default';
	CREATE INDEX sandboxes_team_state_started ON sandboxes (team, state, started_at, id);`,
		// 3: the secrets of killed sandboxes (access and traffic tokens, env vars)
		// are dropped; MarkKilled drops them from then on. Open then rewrites the
		// file so no copy survives in free space (see scrubMigration).
		`UPDATE sandboxes SET access_token = '', traffic_token = '', env_vars = '{}' WHERE state = 'killed';`,
		// 4: private_traffic records network.allowPublicTraffic=false on its own,
		// now that every secured sandbox has a traffic token (the code interpreter
		// accepts it); until now a traffic token meant exactly that.
		`ALTER TABLE sandboxes ADD COLUMN private_traffic INTEGER NOT NULL DEFAULT 0;
	UPDATE sandboxes SET private_traffic = 1 WHERE traffic_token != '';`,
		// 5: secrets (E2B's /secrets: values sealed with the server key, see
		// package secretbox) and the sealed credentials of a sandbox's network
		// config (the egress proxy password), dropped when it is killed.
		`CREATE TABLE secrets (
		id         TEXT PRIMARY KEY,
		team       TEXT NOT NULL,
		name       TEXT NOT NULL,
		metadata   TEXT NOT NULL DEFAULT '{}',
		version    INTEGER NOT NULL,
		value      BLOB NOT NULL,
		created_at INTEGER NOT NULL,
		updated_at INTEGER NOT NULL,
		UNIQUE (team, name)
	);
	ALTER TABLE sandboxes ADD COLUMN network_secret BLOB;`,
		// 6: snapshots (E2B's /sandboxes/{id}/snapshots): a team's captured
		// sandbox states; name is '' for unnamed ones and unique per team
		// otherwise. internal ones are a fork's capture, never listed.
		`CREATE TABLE snapshots (
		id          TEXT PRIMARY KEY,
		team        TEXT NOT NULL,
		name        TEXT NOT NULL DEFAULT '',
		sandbox_id  TEXT NOT NULL,
		template_id TEXT NOT NULL,
		mode        TEXT NOT NULL,
		size_bytes  INTEGER NOT NULL,
		created_at  INTEGER NOT NULL,
		internal    INTEGER NOT NULL DEFAULT 0
	);
	CREATE UNIQUE INDEX snapshots_team_name ON snapshots (team, name) WHERE name != '';
	CREATE INDEX snapshots_team_created ON snapshots (team, created_at, id);`,
		// 7: volumes (E2B's /volumes): a team's persistent directories; token
		// authenticates the volume content API; size_bytes is the quota. A
		// sandbox records the volumes it mounts (JSON [{name, path}]).
		`CREATE TABLE volumes (
		id         TEXT PRIMARY KEY,
		team       TEXT NOT NULL,
		name       TEXT NOT NULL,
		token      TEXT NOT NULL,
		size_bytes INTEGER NOT NULL,
		created_at INTEGER NOT NULL,
		UNIQUE (team, name)
	);
	ALTER TABLE sandboxes ADD COLUMN volume_mounts TEXT NOT NULL DEFAULT '[]';`,
		// 8: template builds requested through the template build API.
		`CREATE TABLE template_builds (
		id          TEXT PRIMARY KEY,
		template_id TEXT NOT NULL,
		team        TEXT NOT NULL,
		name        TEXT NOT NULL,
		tags        TEXT NOT NULL DEFAULT '[]',
		status      TEXT NOT NULL CHECK (status IN ('waiting', 'building', 'ready', 'error')),
		started     INTEGER NOT NULL DEFAULT 0,
		reason      TEXT NOT NULL DEFAULT '',
		reason_step TEXT NOT NULL DEFAULT '',
		cpu_count   INTEGER NOT NULL,
		memory_mb   INTEGER NOT NULL,
		created_at  INTEGER NOT NULL,
		updated_at  INTEGER NOT NULL,
		finished_at INTEGER
	);
	CREATE INDEX template_builds_template ON template_builds (template_id, created_at);`,
		// 9: Idempotency-Key of creates (scope = the caller, e.g. a hash of its API key).
		`CREATE TABLE idempotency_keys (
		scope       TEXT NOT NULL,
		key         TEXT NOT NULL,
		fingerprint BLOB NOT NULL,
		sandbox_id  TEXT NOT NULL,
		created_at  INTEGER NOT NULL,
		PRIMARY KEY (scope, key)
	);
	CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);`,
		// 10: templates are recorded only by the template manager (their trees
		// and image configs in the templates directory) or, in the cluster
		// mode, by the replicas' configuration; nothing read this copy.
		`DROP TABLE templates;`,
	}
}

// scrubMigration is the version migration 3 brings the schema to; applying it
// makes Open compact the database (VACUUM) and empty the WAL.
const scrubMigration = 3

// migrate applies every migration above the database's user_version, each in its
// own immediate transaction so concurrent openers serialise on the write lock.
// When it applied the scrub migration it then rewrites the whole file (VACUUM)
// and empties the WAL, so the dropped secrets leave the disk too.
func (s *Store) migrate(ctx context.Context) error {
	scrubbed := false
	for {
		applied, err := s.migrateOne(ctx)
		if err != nil {
			return err
		}
		if applied == 0 {
			break
		}
		scrubbed = scrubbed || applied == scrubMigration
	}
	if !scrubbed {
		return nil
	}
	if _, err := s.db.ExecContext(ctx, "VACUUM"); err != nil {
		return fmt.Errorf("compact after dropping secrets: %w", err)
	}
	return s.TruncateWAL(ctx)
}

// migrateOne applies the next pending migration and returns the version it
// brought the schema to; 0 when none was pending.
func (s *Store) migrateOne(ctx context.Context) (applied int, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	all := migrations()
	var version int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return 0, fmt.Errorf("read user_version: %w", err)
	}
	if version > len(all) {
		return 0, fmt.Errorf("database schema version %d is newer than this binary's %d", version, len(all))
	}
	if version == len(all) {
		return 0, nil
	}
	if _, err := tx.ExecContext(ctx, all[version]); err != nil {
		return 0, fmt.Errorf("apply migration %d: %w", version+1, err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", version+1)); err != nil {
		return 0, fmt.Errorf("set user_version %d: %w", version+1, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit migration %d: %w", version+1, err)
	}
	return version + 1, nil
}
