-- Prompt-cache keep-alive sessions (one per principal and conversation).
CREATE TABLE keepalive_sessions (
  id TEXT PRIMARY KEY,
  principal_id TEXT NOT NULL,
  session_hash TEXT NOT NULL,
  upstream_id TEXT NOT NULL,
  model TEXT NOT NULL,
  generation INTEGER NOT NULL,
  ttl_secs INTEGER NOT NULL,
  turn_started_at INTEGER NOT NULL,
  anchor_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  refreshes INTEGER NOT NULL,
  refresh_budget INTEGER NOT NULL,
  snapshot BLOB NOT NULL,
  state TEXT NOT NULL,
  stop_reason TEXT NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX keepalive_sessions_conversation ON keepalive_sessions (principal_id, session_hash);
CREATE INDEX keepalive_sessions_expires ON keepalive_sessions (expires_at);
