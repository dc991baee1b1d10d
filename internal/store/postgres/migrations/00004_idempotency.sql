-- SQLite migration 9 (internal/store/migrate.go): the Idempotency-Key of
-- creates (scope = the caller, e.g. a hash of its API key).

-- +goose Up
CREATE TABLE idempotency_keys (
	scope       text NOT NULL,
	key         text NOT NULL,
	fingerprint bytea NOT NULL,
	sandbox_id  text NOT NULL,
	created_at  timestamptz NOT NULL,
	PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- +goose Down
DROP TABLE idempotency_keys;
