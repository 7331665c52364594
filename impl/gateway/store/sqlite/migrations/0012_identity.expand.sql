-- Identity: who made each change (the kind of credential, the issuer, the
-- scoped token's name, the client address) and the resource before and
-- after it, secrets removed; and the scoped admin API tokens, stored as
-- SHA-256 only.
ALTER TABLE audit_log ADD COLUMN actor_kind TEXT NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN issuer TEXT NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN token_name TEXT NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN remote TEXT NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN before_doc TEXT;
ALTER TABLE audit_log ADD COLUMN after_doc TEXT;

CREATE TABLE admin_tokens (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  role TEXT NOT NULL,
  prefix TEXT NOT NULL,
  hash BLOB NOT NULL UNIQUE,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  revoked_at INTEGER,
  created_by TEXT NOT NULL
);
