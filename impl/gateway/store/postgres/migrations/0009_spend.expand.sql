-- Spend (issue 23): each request event's cost in integer nano-dollars
-- (1e-9 USD; NULL when the installed price catalog did not price its
-- model) with the catalog version that priced it, so a later price change
-- never rewrites history, and its 1-hour cache-write tokens (the rest of
-- cache_creation_input_tokens is 5-minute).
ALTER TABLE request_events ADD COLUMN cache_creation_1h_input_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE request_events ADD COLUMN cost_nanos BIGINT;
ALTER TABLE request_events ADD COLUMN price_version TEXT;

-- Rollups sum the priced requests' costs and count the unpriced ones.
ALTER TABLE usage_rollups ADD COLUMN cache_creation_1h_input_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_rollups ADD COLUMN cost_nanos BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_rollups ADD COLUMN unpriced_requests BIGINT NOT NULL DEFAULT 0;
-- Hours rolled up before costs existed had none.
UPDATE usage_rollups SET unpriced_requests = requests;

-- The same hourly usage with the API key as a dimension, for
-- GET /admin/v1/usage (usage_rollups' primary key has no key column, and
-- an expand migration does not change a primary key). The usage_rollup
-- job recomputes both tables in one transaction.
CREATE TABLE usage_key_rollups (
  bucket_start TIMESTAMPTZ NOT NULL,
  principal_id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  upstream_id TEXT NOT NULL,
  model TEXT NOT NULL,
  requests BIGINT NOT NULL,
  errors BIGINT NOT NULL,
  input_tokens BIGINT NOT NULL,
  output_tokens BIGINT NOT NULL,
  cache_creation_input_tokens BIGINT NOT NULL,
  cache_creation_1h_input_tokens BIGINT NOT NULL,
  cache_read_input_tokens BIGINT NOT NULL,
  cost_nanos BIGINT NOT NULL,
  unpriced_requests BIGINT NOT NULL,
  PRIMARY KEY (bucket_start, principal_id, key_id, upstream_id, model)
);
-- Hours already rolled up are filled from the events still kept.
INSERT INTO usage_key_rollups
SELECT date_trunc('hour', at), principal_id, key_id, upstream_id, model, COUNT(*), SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END),
  SUM(input_tokens), SUM(output_tokens), SUM(cache_creation_input_tokens), 0, SUM(cache_read_input_tokens), 0, COUNT(*)
FROM request_events
WHERE date_trunc('hour', at) IN (SELECT bucket_start FROM usage_rollups)
GROUP BY date_trunc('hour', at), principal_id, key_id, upstream_id, model;
