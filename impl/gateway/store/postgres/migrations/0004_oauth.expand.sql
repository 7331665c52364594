-- OAuth upstreams: provider endpoints, pending authorization flows, usage
-- observations with the reset-coupon fence, and the warm-up cycle record.
ALTER TABLE upstreams ADD COLUMN oauth_authorize_url TEXT NOT NULL DEFAULT '';
ALTER TABLE upstreams ADD COLUMN oauth_token_url TEXT NOT NULL DEFAULT '';

CREATE TABLE oauth_flows (
  state TEXT PRIMARY KEY,
  upstream_id TEXT NOT NULL,
  verifier BYTEA NOT NULL,
  redirect_uri TEXT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL,
  expires_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE upstream_quota (
  upstream_id TEXT PRIMARY KEY,
  credential_version BIGINT NOT NULL,
  polled_at TIMESTAMPTZ NOT NULL,
  observed_at TIMESTAMPTZ NOT NULL,
  five_hour_utilization DOUBLE PRECISION NOT NULL,
  five_hour_resets_at TIMESTAMPTZ,
  seven_day_utilization DOUBLE PRECISION NOT NULL,
  seven_day_resets_at TIMESTAMPTZ,
  extra_usage JSONB,
  coupon_reported BOOLEAN NOT NULL,
  coupon_available BOOLEAN NOT NULL,
  coupon_id TEXT,
  coupon_expires_at TIMESTAMPTZ,
  account_uuid TEXT,
  identity_version BIGINT,
  fence_id TEXT,
  fence_state TEXT,
  fence_at TIMESTAMPTZ,
  fence_resolved_at TIMESTAMPTZ
);

CREATE TABLE upstream_warmup (
  upstream_id TEXT PRIMARY KEY,
  cycle_key TEXT,
  cycle_written_at TIMESTAMPTZ,
  reset_cycle_key TEXT,
  reset_recorded_at TIMESTAMPTZ,
  lease_owner TEXT,
  lease_until TIMESTAMPTZ
);
