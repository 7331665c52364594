-- Usage thresholds of the built-in router (docs/routing.md): past either
-- percentage of the polled 5-hour or 7-day utilisation an upstream takes
-- no new work while another of its class can. 0 is no threshold.
ALTER TABLE upstreams ADD COLUMN max_utilization_5h INTEGER NOT NULL DEFAULT 0;
ALTER TABLE upstreams ADD COLUMN max_utilization_7d INTEGER NOT NULL DEFAULT 0;

-- Sessions the router moved away from their rendezvous upstream (package
-- affinity), shared by the replicas once a second and pruned with
-- retention.upstream_affinity. A table of its own rather than a reshaped
-- upstream_affinity: replicas of the previous release keep upserting
-- that table's per-principal rows during a rolling upgrade. Times are
-- Unix milliseconds in both dialects.
CREATE TABLE upstream_affinity_sessions (
  session_key TEXT PRIMARY KEY,
  upstream_id TEXT NOT NULL,
  at_ms BIGINT NOT NULL
);
CREATE INDEX upstream_affinity_sessions_at ON upstream_affinity_sessions (at_ms);

-- A principal's cap on requests in flight (package admission): past it
-- requests wait in a bounded queue. 0 is no cap.
ALTER TABLE principals ADD COLUMN max_in_flight INTEGER NOT NULL DEFAULT 0;
