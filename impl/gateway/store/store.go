// Package store defines the gateway's persistent model and the storage
// interface its consumers (admin API, snapshot builder, request recorder)
// depend on. Drivers live in subpackages: sqlite (embedded default) and
// postgres; both are built on sqlstore and pass the shared storetest suite.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Sentinel errors. Drivers wrap them; callers test with errors.Is. The admin
// API maps each to one stable error code at its edge.
var (
	// ErrNotFound: the addressed row does not exist (or is soft-deleted).
	ErrNotFound = errors.New("not found")
	// ErrConflict: a unique constraint (such as a name) would be violated.
	ErrConflict = errors.New("conflict")
	// ErrStaleRevision: the caller's expected revision is not the current one.
	ErrStaleRevision = errors.New("stale revision")
	// ErrReferenced: the row is still referenced and cannot be deleted.
	ErrReferenced = errors.New("referenced")
	// ErrUnavailable: the database cannot be reached.
	ErrUnavailable = errors.New("storage unavailable")
)

// ReferencedError carries what still references a row; it matches ErrReferenced.
type ReferencedError struct {
	References []Reference
}

func (e *ReferencedError) Error() string { return "referenced" }
func (e *ReferencedError) Is(target error) bool {
	return target == ErrReferenced
}

// Reference names one resource that refers to another.
type Reference struct {
	Kind string `json:"kind"` // "plugin_chain_entry", "upstream"
	ID   string `json:"id"`
	// Owner is the principal owning a chain entry, empty otherwise.
	Owner string `json:"owner,omitempty"`
}

// AnyRevision disables the optimistic-lock check of a mutation.
const AnyRevision int64 = 0

// Upstream kinds.
const (
	KindVendorAPIKey = "vendor_api_key"
	KindVendorOAuth  = "vendor_oauth"
	// KindBedrock is Claude through AWS Bedrock Runtime, KindVertex through
	// Google Vertex AI (docs/cloud.md).
	KindBedrock = "bedrock"
	KindVertex  = "vertex"
)

// IsCloud reports whether an upstream kind reaches Claude through a cloud
// platform rather than the Anthropic API.
func IsCloud(kind string) bool { return kind == KindBedrock || kind == KindVertex }

// CloudConfig is where a cloud upstream sends requests and what it calls
// each model; the zero value for the Anthropic kinds.
type CloudConfig struct {
	Region string `json:"region,omitempty"`
	// Project is the Google Cloud project of a Vertex upstream.
	Project string `json:"project,omitempty"`
	// ModelMap maps the model a client names (an alias such as
	// claude-sonnet-4-5) to this upstream's id for it; a model it does not
	// name is sent as named.
	ModelMap map[string]string `json:"model_map,omitempty"`
}

// Upstream is a provider endpoint requests are routed to.
type Upstream struct {
	ID                  string
	Name                string
	Kind                string
	BaseURL             string
	Enabled             bool
	WarmupEnabled       bool
	WarmupDialectPlugin *string // registry entry id, nil when unset
	// Credential is the AEAD ciphertext of the provider credential (API key or
	// OAuth token bundle); nil when the upstream has none yet.
	Credential []byte
	// OAuthAuthorizeURL and OAuthTokenURL are the provider's OAuth
	// endpoints for vendor_oauth upstreams; empty means the defaults.
	OAuthAuthorizeURL string
	OAuthTokenURL     string
	// CredentialKind is "api_key", "oauth" or "" (none); for the cloud
	// kinds "aws_keys", "service_account" or "host" (credential package).
	CredentialKind string
	// Cloud is a bedrock or vertex upstream's configuration.
	Cloud CloudConfig
	// CredentialVersion increments whenever the credential is replaced. It is
	// a background counter and never bumps SpecRevision.
	CredentialVersion int64
	// Weight is the upstream's share of new work within its priority class
	// (the built-in router's spreading); 0 is standby: tried only after
	// every weighted upstream of its class.
	Weight int
	// MaxUtilization5h and MaxUtilization7d are the router's usage
	// thresholds in percent of the polled windows (docs/routing.md): past
	// either, the upstream takes new work only when no other upstream of
	// its class can. 0 is no threshold.
	MaxUtilization5h int
	MaxUtilization7d int
	// MaxInFlight caps the requests this replica has sent to the upstream
	// and not finished (docs/routing.md); 0 is no cap.
	MaxInFlight  int
	SpecRevision int64
	Status       UpstreamStatus
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// DefaultWeight is an upstream's weight unless set: equal shares.
const DefaultWeight = 1

// MaxWeight bounds an upstream's weight.
const MaxWeight = 1000

// MaxUtilizationThreshold bounds a usage threshold (percent).
const MaxUtilizationThreshold = 100

// MaxUpstreamInFlight bounds an upstream's max_in_flight.
const MaxUpstreamInFlight = 100000

// UpstreamStatus is system-managed operational state. Each group of
// fields has exactly one writer, which writes only its own columns, so a
// writer holding a stale read never undoes another's write: the snapshot
// rebuild owns LastApplyError/LastApplyAt (SetUpstreamStatus), the warm-up
// owns LastWarmupAt (WriteCycleKey), the OAuth refresh owns the Refresh*
// fields (RecordRefreshFailure; a new credential clears them).
type UpstreamStatus struct {
	LastApplyError *string
	LastApplyAt    *time.Time
	LastWarmupAt   *time.Time
	// RefreshError is the last failure of the OAuth token refresh of the
	// current credential, nil when none; RefreshRefused marks a permanent
	// refusal by the provider (invalid_grant): only a new flow helps.
	RefreshError   *string
	RefreshErrorAt *time.Time
	RefreshRefused bool
}

// Error is what an operator reads as the upstream's last_apply_error: the
// snapshot's apply error, else the OAuth refresh's failure.
func (s UpstreamStatus) Error() *string {
	if s.LastApplyError != nil {
		return s.LastApplyError
	}
	return s.RefreshError
}

// UpstreamSpec holds the user-managed fields written by create and update.
// Credential, when non-nil, replaces the stored credential.
type UpstreamSpec struct {
	// ID is used by create when non-empty (callers that bind ciphertext to
	// the id pick it first); otherwise the store generates one.
	ID            string
	Name          string
	Kind          string
	BaseURL       string
	Enabled       bool
	WarmupEnabled bool
	// Credential and CredentialKind are applied only when Credential != nil.
	Credential     []byte
	CredentialKind string
	// OAuthAuthorizeURL and OAuthTokenURL: see Upstream.
	OAuthAuthorizeURL string
	OAuthTokenURL     string
	// Weight: nil keeps it (update) or means DefaultWeight (create).
	Weight *int
	// MaxUtilization5h, MaxUtilization7d: nil keeps them (update) or
	// means none (create).
	MaxUtilization5h, MaxUtilization7d *int
	// MaxInFlight: nil keeps it (update) or means no cap (create).
	MaxInFlight *int
	// Cloud: see Upstream.
	Cloud CloudConfig
}

// UpstreamPatch changes individual user-managed fields; nil means unchanged.
type UpstreamPatch struct {
	Name          *string
	BaseURL       *string
	Enabled       *bool
	WarmupEnabled *bool
	// WarmupDialectPlugin: set SetWarmupDialect to apply (nil value clears).
	SetWarmupDialect    bool
	WarmupDialectPlugin *string
	Weight              *int
	MaxUtilization5h    *int
	MaxUtilization7d    *int
	MaxInFlight         *int
	// Credential, when not nil, replaces the sealed credential (of kind
	// CredentialKind) in the same change. A base_url of another origin is
	// refused with ErrCredentialRequired without one while the upstream
	// holds a credential.
	Credential     []byte
	CredentialKind string
	// Cloud, when not nil, replaces a cloud upstream's configuration.
	Cloud *CloudConfig
	// OAuthTokenURL, when not nil, replaces the token endpoint (a vertex
	// service account's token_uri, given with its credential).
	OAuthTokenURL *string
}

// Principal is an identity that holds proxy keys.
type Principal struct {
	ID             string
	Name           string
	Kind           string
	Enabled        bool
	Revision       int64
	AllowedModels  []string
	DefaultLimits  json.RawMessage // JSON array, validated by the API
	CacheKeepalive json.RawMessage // JSON object or nil when unset
	// MaxInFlight caps the principal's requests in flight (0: no cap);
	// past it requests queue (docs/routing.md).
	MaxInFlight int
	// CaptureExchanges: the relay captures this principal's request and
	// response bodies (package capture). Off by default.
	CaptureExchanges bool
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

// PrincipalPatch changes individual fields; nil means unchanged.
type PrincipalPatch struct {
	Name          *string
	Enabled       *bool
	AllowedModels *[]string
	DefaultLimits *json.RawMessage
	// SetCacheKeepalive applies CacheKeepalive (nil clears it).
	SetCacheKeepalive bool
	CacheKeepalive    json.RawMessage
	MaxInFlight       *int
	CaptureExchanges  *bool
}

// MaxPrincipalInFlight bounds a principal's cap on requests in flight.
const MaxPrincipalInFlight = 10000

// Key is an issued proxy key. Only its SHA-256 hash is stored.
type Key struct {
	ID          string
	PrincipalID string
	Name        string
	Prefix      string // first characters of the plaintext, for recognition
	Hash        []byte // SHA-256 of the plaintext key
	CreatedAt   time.Time
	RevokedAt   *time.Time
}

// Chain entry slots and built-in plugins.
const (
	SlotRouter = "router"
	// BuiltinSubscriptionPreference is the router every principal receives at
	// creation: enabled subscription (OAuth) upstreams first, then API-key ones.
	BuiltinSubscriptionPreference = "subscription_preference"
)

// ChainEntry is one plugin bound into a principal's chain.
type ChainEntry struct {
	ID             string
	PrincipalID    string
	Slot           string
	Builtin        *string // built-in plugin name, or nil for a WASM entry
	WasmRegistryID *string
	Config         json.RawMessage // JSON object
	Position       int64
	Enabled        bool
	Revision       int64
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// RequestEvent is one proxied request, recorded for usage accounting.
type RequestEvent struct {
	ID                       string
	At                       time.Time
	PrincipalID              string
	KeyID                    string
	UpstreamID               string // empty when no upstream was reached
	Model                    string
	Stream                   bool
	Status                   int
	ErrorType                string
	InputTokens              int64
	OutputTokens             int64
	CacheCreationInputTokens int64
	CacheReadInputTokens     int64
	DurationMillis           int64
	// CacheCreation1hInputTokens is the part of CacheCreationInputTokens
	// written with the 1-hour TTL.
	CacheCreation1hInputTokens int64
	// CostNanos is the request's cost in nano-dollars (1e-9 USD), nil when
	// the price catalog did not price the model; PriceVersion is the
	// catalog version that priced it.
	CostNanos    *int64
	PriceVersion string
	// FirstByteMillis is the time to first byte: from arrival to the first
	// byte of the upstream's answer relayed to the client, rounded up to a
	// whole millisecond; 0 when no upstream answer was relayed.
	FirstByteMillis int64
	// Dialect is the API the client spoke (DialectMessages or
	// DialectOpenAI); empty on events recorded before it was kept.
	Dialect string
	// UpstreamModel is the id the upstream was asked for when its model
	// map turned Model (the client's name) into another; empty otherwise.
	UpstreamModel string
}

// The dialects a request event names.
const (
	DialectMessages = "messages" // Anthropic's Messages API (and count_tokens)
	DialectOpenAI   = "openai"   // OpenAI's Chat Completions, translated
)

// Config is a consistent read of everything a snapshot is built from.
type Config struct {
	// Generation is the config_generation counter at the time of the read.
	Generation int64
	Upstreams  []Upstream // non-deleted, ordered by created time then id
	Principals []Principal
	Keys       []Key // non-revoked keys only, in no order; only ID, PrincipalID and Hash are read
	// KeysOmitted: Keys was left out (ApplyWithoutKeys) by a holder that
	// keeps the live keys elsewhere; Keys is then empty, not "no keys".
	KeysOmitted bool
	Chains      []ChainEntry // ordered by principal, slot, position
	// Plugins are the registry entries (metadata, no modules).
	Plugins []RegistryEntry
}

// Store is the gateway's storage. Every mutation of configuration bumps the
// config generation in the same transaction, so replicas can detect change.
type Store interface {
	// IdentityStore is the admin API's scoped tokens and audit trail.
	IdentityStore
	// OAuthStore is the background state of vendor_oauth upstreams.
	OAuthStore
	// KeepAliveStore is the prompt-cache keep-alive state.
	KeepAliveStore
	// PluginStore is the WASM plugin registry and chain editing.
	PluginStore
	// LimitStore is the shared counting of principals' default_limits.
	LimitStore
	// CooldownStore shares the upstreams' cooldowns between replicas.
	CooldownStore
	// AffinityStore shares the router's session moves between replicas.
	AffinityStore
	// SealedStore re-seals every sealed value (master-key rotation).
	SealedStore
	// WebhookStore holds the alert webhooks and alert episodes.
	WebhookStore
	// CaptureStore holds the captured exchanges of opted-in principals.
	CaptureStore
	// EventReader searches and aggregates request events (dashboard).
	EventReader
	// UsageReader sums usage by principal, key, upstream and model.
	UsageReader

	// Ping checks the database is reachable; failures wrap ErrUnavailable.
	Ping(ctx context.Context) error
	// Driver names the backend: "sqlite" or "postgres".
	Driver() string
	Close() error

	// LoadConfig reads the whole live configuration in one transaction.
	LoadConfig(ctx context.Context) (*Config, error)
	// ConfigGeneration returns the current config generation counter.
	ConfigGeneration(ctx context.Context) (int64, error)
	// LoadConfigDelta reads, in one transaction, what changed after
	// generation since (see ConfigDelta); ErrDeltaUnavailable when the
	// change log cannot tell it exactly.
	LoadConfigDelta(ctx context.Context, since int64) (*ConfigDelta, error)

	CreateUpstream(ctx context.Context, spec UpstreamSpec) (*Upstream, error)
	GetUpstream(ctx context.Context, id string) (*Upstream, error)
	ListUpstreams(ctx context.Context) ([]Upstream, error)
	// UpdateUpstream replaces the user-managed fields (PUT). Without a
	// credential in spec, a change of the origins the stored credential is
	// sent to (CredentialOrigins) fails with ErrCredentialRequired, nothing
	// changed; PatchUpstream likewise for its base_url.
	UpdateUpstream(ctx context.Context, id string, expectRevision int64, spec UpstreamSpec) (*Upstream, error)
	PatchUpstream(ctx context.Context, id string, expectRevision int64, patch UpstreamPatch) (*Upstream, error)
	// DeleteUpstream soft-deletes; fails with *ReferencedError while chain
	// entries name the upstream in their config.
	DeleteUpstream(ctx context.Context, id string, expectRevision int64) error
	// SetUpstreamStatus records a snapshot rebuild's apply outcome: it
	// writes LastApplyError and LastApplyAt only (the other status fields
	// have their own writers and are ignored here). A background write: it
	// never bumps SpecRevision.
	SetUpstreamStatus(ctx context.Context, id string, status UpstreamStatus) error
	// RecordRefreshFailure records a failed OAuth token refresh of
	// credential version credentialVersion in the upstream's Refresh*
	// status fields; recorded is false when the credential was replaced
	// since (the failure is moot). A background write: it never bumps
	// SpecRevision, but a refusal (refused: only a new credential helps)
	// is a configuration change naming the upstream, since routing leaves
	// the upstream out until then.
	RecordRefreshFailure(ctx context.Context, id string, credentialVersion int64, msg string, refused bool, at time.Time) (recorded bool, err error)
	// SetUpstreamCredential is a background write (OAuth tokens, refresh):
	// it bumps CredentialVersion but never SpecRevision, and clears the
	// refresh failure of the replaced credential.
	SetUpstreamCredential(ctx context.Context, id string, kind string, ciphertext []byte) (*Upstream, error)
	// DisableWarmupForOAuthUpstreams is the storage-level mass disable: every
	// non-deleted vendor_oauth upstream with warm-up on gets it off, its
	// SpecRevision incremented and its updated time refreshed. Returns the count.
	DisableWarmupForOAuthUpstreams(ctx context.Context) (int64, error)

	// CreatePrincipal uses p.ID when non-empty. It also seeds the built-in router chain entry at position 0.
	CreatePrincipal(ctx context.Context, p Principal) (*Principal, error)
	GetPrincipal(ctx context.Context, id string) (*Principal, error)
	ListPrincipals(ctx context.Context) ([]Principal, error)
	// UpdatePrincipal replaces name, kind, allowed models, limits and keep-alive (PUT).
	UpdatePrincipal(ctx context.Context, id string, expectRevision int64, p Principal) (*Principal, error)
	PatchPrincipal(ctx context.Context, id string, expectRevision int64, patch PrincipalPatch) (*Principal, error)
	// DeletePrincipal removes the principal with its keys and chain entries.
	DeletePrincipal(ctx context.Context, id string, expectRevision int64) error

	// CreateKey uses k.ID when non-empty; fails with ErrNotFound when the
	// principal does not exist.
	CreateKey(ctx context.Context, k Key) (*Key, error)
	// ListKeys lists a principal's keys, revoked ones included.
	ListKeys(ctx context.Context, principalID string) ([]Key, error)
	// RevokeKey marks the key revoked; revoking twice is not an error.
	RevokeKey(ctx context.Context, principalID, keyID string) (*Key, error)

	ListChain(ctx context.Context, principalID string) ([]ChainEntry, error)
	// UpdateChainEntry replaces an entry's config and enabled flag.
	UpdateChainEntry(ctx context.Context, id string, expectRevision int64, config json.RawMessage, enabled bool) (*ChainEntry, error)

	// InsertRequestEvents appends usage events in one batch.
	InsertRequestEvents(ctx context.Context, events []RequestEvent) error
	// ListRequestEvents returns events at or after since, newest first, at most limit.
	ListRequestEvents(ctx context.Context, since time.Time, limit int) ([]RequestEvent, error)

	// RollupUsage recomputes the hourly usage rollups of every hour that
	// overlaps [from, to) from request events. Recomputing is idempotent, so
	// a rollup job may run more than once.
	RollupUsage(ctx context.Context, from, to time.Time) (buckets int64, err error)
	// ListUsageRollups returns rollups of buckets at or after since, oldest first.
	ListUsageRollups(ctx context.Context, since time.Time) ([]UsageRollup, error)
	// Prune deletes rows of a prunable table older than before; see PrunableTables.
	Prune(ctx context.Context, table string, before time.Time) (int64, error)

	// ListAudit returns audit entries at or after since, newest first, at most limit.
	ListAudit(ctx context.Context, since time.Time, limit int) ([]AuditEntry, error)

	// SetUpstreamModels replaces the model list of an upstream.
	SetUpstreamModels(ctx context.Context, upstreamID string, models []UpstreamModel) error
	ListUpstreamModels(ctx context.Context, upstreamID string) ([]UpstreamModel, error)
	// GetPriceCatalog returns the stored catalog, or ErrNotFound before the first fetch.
	GetPriceCatalog(ctx context.Context) (*PriceCatalog, error)
	// PutPriceCatalog stores a catalog; changed is false when the stored
	// version was already this one.
	PutPriceCatalog(ctx context.Context, c PriceCatalog) (changed bool, err error)
}

// UpstreamModel is one model an upstream offers.
type UpstreamModel struct {
	ModelID     string
	DisplayName string
	RefreshedAt time.Time
}

// PriceCatalog is the fetched price list.
type PriceCatalog struct {
	Version   string
	ETag      string
	Body      json.RawMessage
	FetchedAt time.Time
}

// PrunableTables are the tables Prune accepts.
var PrunableTables = []string{"request_events", "audit_log", "upstream_affinity", "captured_exchanges"}

// UsageRollup is one hour of usage for a principal, upstream and model.
type UsageRollup struct {
	BucketStart time.Time
	PrincipalID string
	UpstreamID  string
	Model       string
	UsageCounts
}

// UsageCounts are the sums of a group of request events.
type UsageCounts struct {
	Requests                   int64
	Errors                     int64
	InputTokens                int64
	OutputTokens               int64
	CacheCreationInputTokens   int64
	CacheCreation1hInputTokens int64
	CacheReadInputTokens       int64
	// CostNanos sums the priced requests' costs; UnpricedRequests counts
	// the requests without a cost (not in CostNanos).
	CostNanos        int64
	UnpricedRequests int64
}

type actorKey struct{}

// WithActor names who makes the changes done with ctx; they are recorded in
// the audit log.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorFrom returns the actor of ctx, "system" when none was set.
func ActorFrom(ctx context.Context) string {
	if a, ok := ctx.Value(actorKey{}).(string); ok && a != "" {
		return a
	}
	return "system"
}

// AuditEntry is one recorded configuration change.
type AuditEntry struct {
	ID           string
	At           time.Time
	Actor        string
	Action       string
	ResourceKind string
	ResourceID   string
	// ActorKind, Issuer, TokenName and Remote complete the actor (Actor);
	// empty on rows written before they were recorded.
	ActorKind, Issuer, TokenName, Remote string
	Revision                             *int64
	// Before and After are the resource's representation around the
	// change, secrets removed; nil when not recorded.
	Before, After json.RawMessage
}
