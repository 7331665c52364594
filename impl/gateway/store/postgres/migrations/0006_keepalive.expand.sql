-- Prompt-cache keep-alive sessions (one per principal and conversation).
CREATE TABLE keepalive_sessions (
  id TEXT PRIMARY KEY,
  principal_id TEXT NOT NULL,
  session_hash TEXT NOT NULL,
  upstream_id TEXT NOT NULL,
  model TEXT NOT NULL,
  generation BIGINT NOT NULL,
  ttl_secs BIGINT NOT NULL,
  turn_started_at TIMESTAMPTZ NOT NULL,
  anchor_at TIMESTAMPTZ NOT NULL,
  expires_at TIMESTAMPTZ NOT NULL,
  refreshes BIGINT NOT NULL,
  refresh_budget BIGINT NOT NULL,
  snapshot BYTEA NOT NULL,
  state TEXT NOT NULL,
  stop_reason TEXT NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL
);
CREATE UNIQUE INDEX keepalive_sessions_conversation ON keepalive_sessions (principal_id, session_hash);
CREATE INDEX keepalive_sessions_expires ON keepalive_sessions (expires_at);
