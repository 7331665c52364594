package store

import "context"

// Kinds of sealed value (Sealed.Kind): every column the gateway writes
// sealed under the master key.
const (
	// SealedUpstreamCredential is upstreams.credential (API keys and OAuth
	// tokens), soft-deleted upstreams included.
	SealedUpstreamCredential = "upstream_credential"
	// SealedOAuthVerifier is oauth_flows.verifier (a pending PKCE flow).
	SealedOAuthVerifier = "oauth_flow_verifier"
	// SealedKeepAliveSnapshot is keepalive_sessions.snapshot.
	SealedKeepAliveSnapshot = "keepalive_snapshot"
)

// Sealed is one sealed value with the fields its associated data is made
// of, so the caller can open it and seal it again under another key.
type Sealed struct {
	Kind string
	// UpstreamID: upstream credentials and keep-alive snapshots.
	UpstreamID string
	// UpstreamKind, BaseURL and OAuthTokenURL: upstream credentials (the
	// origins they are bound to, CredentialOrigins).
	UpstreamKind  string
	BaseURL       string
	OAuthTokenURL string
	// State: OAuth flows.
	State string
	// WebhookID: webhook secrets (BaseURL is then the webhook's URL).
	WebhookID string
	// ExchangeID: captured exchanges (with PrincipalID).
	ExchangeID string
	// PrincipalID, SessionHash, Generation: keep-alive snapshots
	// (PrincipalID also captured exchanges).
	PrincipalID string
	SessionHash string
	Generation  int64
	Ciphertext  []byte
}

// SealedStore re-seals the sealed values, as master-key rotation needs.
type SealedStore interface {
	// ResealAll calls reseal for every sealed value and writes back what
	// it returns, all in one transaction: when reseal fails for any value
	// nothing is written and its error is returned. It returns how many
	// values were re-sealed. Nothing else changes: no config generation,
	// no revision; one audit row records the rotation.
	ResealAll(ctx context.Context, reseal func(Sealed) ([]byte, error)) (int, error)
	// RebindUpstreamCredentials calls rebind for every upstream credential
	// (soft-deleted upstreams included) and writes back what it returns
	// when not nil, each in its own change and only while the row still
	// holds the ciphertext, base_url and token endpoint rebind was given:
	// a credential stored or moved meanwhile is left alone. The config
	// generation moves when anything was written (replicas rebuild and
	// open the rebound credentials); spec revisions and credential
	// versions do not. It returns how many were written.
	RebindUpstreamCredentials(ctx context.Context, rebind func(Sealed) ([]byte, error)) (int, error)
}
