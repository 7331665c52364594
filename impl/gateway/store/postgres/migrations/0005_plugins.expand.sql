-- The WASM plugin registry; chain entries and upstreams reference it by id.
CREATE TABLE plugin_registry (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  version TEXT,
  version_key TEXT NOT NULL,
  digest TEXT NOT NULL,
  slots JSONB NOT NULL,
  module BYTEA NOT NULL,
  size_bytes BIGINT NOT NULL,
  revision BIGINT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL
);
CREATE UNIQUE INDEX plugin_registry_name_version ON plugin_registry (name, version_key);
CREATE INDEX plugin_chain_entries_registry ON plugin_chain_entries (wasm_registry_id);
