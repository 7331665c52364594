-- Hourly usage per principal, upstream and model, recomputed by the usage rollup job.
CREATE TABLE usage_rollups (
  bucket_start TIMESTAMPTZ NOT NULL,
  principal_id TEXT NOT NULL,
  upstream_id TEXT NOT NULL,
  model TEXT NOT NULL,
  requests BIGINT NOT NULL,
  errors BIGINT NOT NULL,
  input_tokens BIGINT NOT NULL,
  output_tokens BIGINT NOT NULL,
  cache_creation_input_tokens BIGINT NOT NULL,
  cache_read_input_tokens BIGINT NOT NULL,
  PRIMARY KEY (bucket_start, principal_id, upstream_id, model)
);
CREATE INDEX upstream_affinity_last_used ON upstream_affinity (last_used_at);
