-- Times are unix seconds (INTEGER); JSON is TEXT; booleans are 0/1.
CREATE TABLE config_generation (id INTEGER PRIMARY KEY CHECK (id = 1), generation INTEGER NOT NULL);
INSERT INTO config_generation (id, generation) VALUES (1, 0);

CREATE TABLE upstreams (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  kind TEXT NOT NULL,
  base_url TEXT NOT NULL,
  enabled INTEGER NOT NULL,
  warmup_enabled INTEGER NOT NULL,
  warmup_dialect_plugin TEXT,
  credential BLOB,
  credential_kind TEXT NOT NULL DEFAULT '',
  credential_version INTEGER NOT NULL DEFAULT 0,
  spec_revision INTEGER NOT NULL,
  last_apply_error TEXT,
  last_apply_at INTEGER,
  last_warmup_at INTEGER,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  deleted_at INTEGER
);
CREATE UNIQUE INDEX upstreams_live_name ON upstreams (name) WHERE deleted_at IS NULL;

CREATE TABLE principals (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  kind TEXT NOT NULL,
  enabled INTEGER NOT NULL,
  revision INTEGER NOT NULL,
  allowed_models TEXT NOT NULL,
  default_limits TEXT NOT NULL,
  cache_keepalive TEXT,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);

CREATE TABLE principal_keys (
  id TEXT PRIMARY KEY,
  principal_id TEXT NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  prefix TEXT NOT NULL,
  hash BLOB NOT NULL UNIQUE,
  created_at INTEGER NOT NULL,
  revoked_at INTEGER
);
CREATE INDEX principal_keys_principal ON principal_keys (principal_id);

CREATE TABLE plugin_chain_entries (
  id TEXT PRIMARY KEY,
  principal_id TEXT NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
  slot TEXT NOT NULL,
  builtin TEXT,
  wasm_registry_id TEXT,
  config TEXT NOT NULL,
  position INTEGER NOT NULL,
  enabled INTEGER NOT NULL,
  revision INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE INDEX plugin_chain_entries_principal ON plugin_chain_entries (principal_id);

CREATE TABLE request_events (
  id TEXT PRIMARY KEY,
  at INTEGER NOT NULL,
  principal_id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  upstream_id TEXT NOT NULL,
  model TEXT NOT NULL,
  stream INTEGER NOT NULL,
  status INTEGER NOT NULL,
  error_type TEXT NOT NULL,
  input_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL,
  cache_creation_input_tokens INTEGER NOT NULL,
  cache_read_input_tokens INTEGER NOT NULL,
  duration_ms INTEGER NOT NULL
);
CREATE INDEX request_events_at ON request_events (at);

CREATE TABLE audit_log (
  id TEXT PRIMARY KEY,
  at INTEGER NOT NULL,
  actor TEXT NOT NULL,
  action TEXT NOT NULL,
  resource_kind TEXT NOT NULL,
  resource_id TEXT NOT NULL,
  revision INTEGER
);
CREATE INDEX audit_log_at ON audit_log (at);

CREATE TABLE upstream_affinity (
  principal_id TEXT NOT NULL,
  upstream_id TEXT NOT NULL,
  last_used_at INTEGER NOT NULL,
  PRIMARY KEY (principal_id, upstream_id)
);
