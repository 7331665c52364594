-- Models each upstream offers, refreshed by the metadata refresh job.
CREATE TABLE upstream_models (
  upstream_id TEXT NOT NULL,
  model_id TEXT NOT NULL,
  display_name TEXT NOT NULL,
  refreshed_at INTEGER NOT NULL,
  PRIMARY KEY (upstream_id, model_id)
);
-- The price catalog fetched by the durable job; replicas install it locally.
CREATE TABLE price_catalog (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  version TEXT NOT NULL,
  etag TEXT NOT NULL,
  body TEXT NOT NULL,
  fetched_at INTEGER NOT NULL
);
