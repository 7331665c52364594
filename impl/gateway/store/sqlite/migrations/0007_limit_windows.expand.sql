-- Shared windows of principals' default_limits (see package limits): each
-- replica adds its counts once a second and reads the totals back. Times
-- are Unix seconds in both dialects: windows are integer-aligned.
CREATE TABLE limit_windows (
  principal_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  window_secs BIGINT NOT NULL,
  window_start BIGINT NOT NULL,
  count BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  PRIMARY KEY (principal_id, kind, window_secs, window_start)
);
CREATE INDEX limit_windows_expires ON limit_windows (expires_at);
