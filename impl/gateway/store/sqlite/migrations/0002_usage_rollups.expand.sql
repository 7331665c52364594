-- Hourly usage per principal, upstream and model, recomputed by the usage rollup job.
CREATE TABLE usage_rollups (
  bucket_start INTEGER NOT NULL,
  principal_id TEXT NOT NULL,
  upstream_id TEXT NOT NULL,
  model TEXT NOT NULL,
  requests INTEGER NOT NULL,
  errors INTEGER NOT NULL,
  input_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL,
  cache_creation_input_tokens INTEGER NOT NULL,
  cache_read_input_tokens INTEGER NOT NULL,
  PRIMARY KEY (bucket_start, principal_id, upstream_id, model)
);
CREATE INDEX upstream_affinity_last_used ON upstream_affinity (last_used_at);
