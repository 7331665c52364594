-- Times are timestamptz; JSON is jsonb; booleans are boolean.
CREATE TABLE config_generation (id INTEGER PRIMARY KEY CHECK (id = 1), generation BIGINT NOT NULL);
INSERT INTO config_generation (id, generation) VALUES (1, 0);

CREATE TABLE upstreams (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  kind TEXT NOT NULL,
  base_url TEXT NOT NULL,
  enabled BOOLEAN NOT NULL,
  warmup_enabled BOOLEAN NOT NULL,
  warmup_dialect_plugin TEXT,
  credential BYTEA,
  credential_kind TEXT NOT NULL DEFAULT '',
  credential_version BIGINT NOT NULL DEFAULT 0,
  spec_revision BIGINT NOT NULL,
  last_apply_error TEXT,
  last_apply_at TIMESTAMPTZ,
  last_warmup_at TIMESTAMPTZ,
  created_at TIMESTAMPTZ NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL,
  deleted_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX upstreams_live_name ON upstreams (name) WHERE deleted_at IS NULL;

CREATE TABLE principals (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  kind TEXT NOT NULL,
  enabled BOOLEAN NOT NULL,
  revision BIGINT NOT NULL,
  allowed_models JSONB NOT NULL,
  default_limits JSONB NOT NULL,
  cache_keepalive JSONB,
  created_at TIMESTAMPTZ NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE principal_keys (
  id TEXT PRIMARY KEY,
  principal_id TEXT NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  prefix TEXT NOT NULL,
  hash BYTEA NOT NULL UNIQUE,
  created_at TIMESTAMPTZ NOT NULL,
  revoked_at TIMESTAMPTZ
);
CREATE INDEX principal_keys_principal ON principal_keys (principal_id);

CREATE TABLE plugin_chain_entries (
  id TEXT PRIMARY KEY,
  principal_id TEXT NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
  slot TEXT NOT NULL,
  builtin TEXT,
  wasm_registry_id TEXT,
  config JSONB NOT NULL,
  position INTEGER NOT NULL,
  enabled BOOLEAN NOT NULL,
  revision BIGINT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX plugin_chain_entries_principal ON plugin_chain_entries (principal_id);

CREATE TABLE request_events (
  id TEXT PRIMARY KEY,
  at TIMESTAMPTZ NOT NULL,
  principal_id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  upstream_id TEXT NOT NULL,
  model TEXT NOT NULL,
  stream BOOLEAN NOT NULL,
  status INTEGER NOT NULL,
  error_type TEXT NOT NULL,
  input_tokens BIGINT NOT NULL,
  output_tokens BIGINT NOT NULL,
  cache_creation_input_tokens BIGINT NOT NULL,
  cache_read_input_tokens BIGINT NOT NULL,
  duration_ms BIGINT NOT NULL
);
CREATE INDEX request_events_at ON request_events (at);

CREATE TABLE audit_log (
  id TEXT PRIMARY KEY,
  at TIMESTAMPTZ NOT NULL,
  actor TEXT NOT NULL,
  action TEXT NOT NULL,
  resource_kind TEXT NOT NULL,
  resource_id TEXT NOT NULL,
  revision BIGINT
);
CREATE INDEX audit_log_at ON audit_log (at);

CREATE TABLE upstream_affinity (
  principal_id TEXT NOT NULL,
  upstream_id TEXT NOT NULL,
  last_used_at TIMESTAMPTZ NOT NULL,
  PRIMARY KEY (principal_id, upstream_id)
);
