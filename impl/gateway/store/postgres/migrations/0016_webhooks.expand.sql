-- Alert webhooks (package alerts): where alert notifications go, the
-- HMAC key of their signatures sealed under the master key (bound to the
-- webhook and its URL's origin), the conditions each receives. Alert
-- states record each condition's current episode, so that the replicas
-- notify a condition once when it fires and once when it resolves.
CREATE TABLE webhooks (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  url TEXT NOT NULL,
  secret BYTEA NOT NULL,
  conditions TEXT NOT NULL,
  enabled BOOLEAN NOT NULL,
  revision BIGINT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE alert_states (
  alert_key TEXT PRIMARY KEY,
  firing BOOLEAN NOT NULL,
  episode BIGINT NOT NULL,
  since TIMESTAMPTZ NOT NULL
);
