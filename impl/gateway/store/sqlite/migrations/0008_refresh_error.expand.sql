-- The OAuth token refresh's own status columns: its last failure (message,
-- time, and whether the provider refused the grant for good). They have
-- their own writer, so a snapshot rebuild recording its apply outcome
-- never wipes them; a new credential clears them.
ALTER TABLE upstreams ADD COLUMN refresh_error TEXT;
ALTER TABLE upstreams ADD COLUMN refresh_error_at INTEGER;
ALTER TABLE upstreams ADD COLUMN refresh_refused INTEGER NOT NULL DEFAULT 0;
