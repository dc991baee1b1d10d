-- The templates table of 00001 is neither written nor read from this
-- release on (replicas know their templates from their configuration,
-- --template-image). It stays: replicas of the previous release, which
-- record their templates there at start, keep starting during a rolling
-- upgrade. A later release drops it, once no such replica can run.

-- +goose Up
COMMENT ON TABLE templates IS 'unused since schema 5; kept for replicas of the previous release during a rolling upgrade';

-- +goose Down
COMMENT ON TABLE templates IS NULL;
