-- OAuth upstreams: provider endpoints, pending authorization flows, usage
-- observations with the reset-coupon fence, and the warm-up cycle record.
ALTER TABLE upstreams ADD COLUMN oauth_authorize_url TEXT NOT NULL DEFAULT '';
ALTER TABLE upstreams ADD COLUMN oauth_token_url TEXT NOT NULL DEFAULT '';

CREATE TABLE oauth_flows (
  state TEXT PRIMARY KEY,
  upstream_id TEXT NOT NULL,
  verifier BLOB NOT NULL,
  redirect_uri TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
);

CREATE TABLE upstream_quota (
  upstream_id TEXT PRIMARY KEY,
  credential_version INTEGER NOT NULL,
  polled_at INTEGER NOT NULL,
  observed_at INTEGER NOT NULL,
  five_hour_utilization REAL NOT NULL,
  five_hour_resets_at INTEGER,
  seven_day_utilization REAL NOT NULL,
  seven_day_resets_at INTEGER,
  extra_usage TEXT,
  coupon_reported INTEGER NOT NULL,
  coupon_available INTEGER NOT NULL,
  coupon_id TEXT,
  coupon_expires_at INTEGER,
  account_uuid TEXT,
  identity_version INTEGER,
  fence_id TEXT,
  fence_state TEXT,
  fence_at INTEGER,
  fence_resolved_at INTEGER
);

CREATE TABLE upstream_warmup (
  upstream_id TEXT PRIMARY KEY,
  cycle_key TEXT,
  cycle_written_at INTEGER,
  reset_cycle_key TEXT,
  reset_recorded_at INTEGER,
  lease_owner TEXT,
  lease_until INTEGER
);
