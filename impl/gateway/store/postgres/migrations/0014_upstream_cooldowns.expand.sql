-- Upstreams cooling down after a 429/529 (package routing): each replica
-- stores the cooldowns it learnt and reads every replica's back once a
-- second. Times are Unix milliseconds in both dialects.
CREATE TABLE upstream_cooldowns (
  upstream_id TEXT PRIMARY KEY,
  until_ms BIGINT NOT NULL
);
