-- Captured exchanges (package capture): the request and response bodies
-- of a principal that opted in, sealed under the master key and bound to
-- the exchange id and its principal. One row per request event it
-- belongs to (event_id); pruned by its own retention.
CREATE TABLE captured_exchanges (
  event_id TEXT PRIMARY KEY,
  principal_id TEXT NOT NULL,
  at INTEGER NOT NULL,
  request_bytes BIGINT NOT NULL,
  response_bytes BIGINT NOT NULL,
  truncated INTEGER NOT NULL,
  sealed BLOB NOT NULL
);

CREATE INDEX captured_exchanges_at ON captured_exchanges (at);

-- A principal's opt-in to capture (off by default): the relay captures
-- its exchanges only when set.
ALTER TABLE principals ADD COLUMN capture_exchanges INTEGER NOT NULL DEFAULT 0;
