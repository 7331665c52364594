// Package snapshot builds the immutable, in-memory view of the gateway's
// configuration that the request path reads, and swaps it atomically when
// configuration changes. Readers never lock: they load one pointer.
package snapshot

import (
	"crypto/sha256"
	"encoding/json"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Snapshot is one immutable configuration. Nothing in it changes after Build
// returns, so any number of requests may read it concurrently.
type Snapshot struct {
	Generation int64
	BuiltAt    time.Time

	keys       map[[sha256.Size]byte]*Key
	principals map[string]*Principal
	// Upstreams are the live upstreams in creation order.
	Upstreams  []*Upstream
	upstreamID map[string]*Upstream
	// Errors lists per-upstream apply errors (such as an undecryptable
	// credential), keyed by upstream id.
	Errors map[string]string
	// Usable are the enabled upstreams holding a credential, in creation
	// order: what dynamic (WASM) router chains start from.
	Usable []*Upstream
	// Plugins are the registry entries by id.
	Plugins map[string]store.RegistryEntry
}

// Key is an issued, non-revoked proxy key.
type Key struct {
	ID        string
	Principal *Principal
}

// Principal is the request-path view of a principal.
type Principal struct {
	ID      string
	Name    string
	Kind    string
	Enabled bool
	models  modelMatcher
	// Routers are the principal's enabled router-slot chain entries in order.
	Routers []Router
	// CacheKeepalive is the persisted keep-alive configuration, nil when off.
	CacheKeepalive json.RawMessage
	// KeepAliveEnabled: CacheKeepalive is set with enabled true.
	KeepAliveEnabled bool
	// Candidates is the precomputed, ordered upstream choice of the
	// principal's built-in routers; the request path tries them in order.
	Candidates []*Upstream
	// Dynamic is true when a router must run per request (WASM plugins).
	Dynamic bool
	// Limits are the principal's default_limits (nil: unlimited).
	Limits []limits.Limit
}

// Router is one router-slot chain entry.
type Router struct {
	EntryID        string
	Builtin        string // built-in plugin name, empty for WASM entries
	WasmRegistryID string
	// WasmDigest and WasmName identify the entry's module ("" when the
	// registry entry is gone: the router then fails closed).
	WasmDigest string
	WasmName   string
	Config     json.RawMessage
	// Pinned restricts candidates to these upstream ids when non-empty
	// (config keys upstream_id / upstream_ids).
	Pinned []string
	// Bound holds the WASM entry's plugin binding for this snapshot (its
	// module bound to Config and Usable), set by the first request that
	// runs it (nil for built-in entries).
	Bound *Bound
}

// Bound is a slot set once, lazily, by the request path: what a WASM
// router entry needs per snapshot is prepared on first use rather than
// when the snapshot is built, so building stays free of plugin work.
type Bound struct{ v atomic.Value }

// Load returns the value set, or nil.
func (b *Bound) Load() any { return b.v.Load() }

// Set stores v unless a value is already set; it returns the value in
// force and whether it is v.
func (b *Bound) Set(v any) (any, bool) {
	if b.v.CompareAndSwap(nil, v) {
		return v, true
	}
	return b.v.Load(), false
}

// Upstream is the request-path view of an upstream with its credential
// opened. It is only present in a snapshot while it can be used.
type Upstream struct {
	ID             string
	Name           string
	Kind           string
	BaseURL        string
	Enabled        bool
	CredentialKind string
	// Credential is the opened credential (API key, or OAuth access token).
	Credential string
	// CredentialExpiresAt is when an OAuth access token expires (zero when
	// unknown or not OAuth): the relay refreshes lazily past it (issue 18).
	CredentialExpiresAt time.Time
	// MessagesURL and CountTokensURL are precomputed request targets.
	MessagesURL    string
	CountTokensURL string
	// MessagesTarget and CountTokensTarget are the same, parsed once per
	// snapshot for the proxy path (nil on an Upstream not made by Build).
	// Shared by every request: never modify them.
	MessagesTarget, CountTokensTarget *url.URL
	SpecRevision                      int64
	// UsableIndex is the upstream's position in Snapshot.Usable, -1 when
	// it is not usable: router plugins name upstreams by it.
	UsableIndex int
}

// Opener decrypts an upstream credential bound to its upstream id.
type Opener interface {
	Open(ciphertext, associatedData []byte) ([]byte, error)
}

// Build makes a snapshot from a consistent configuration read.
func Build(cfg *store.Config, open Opener, now time.Time) *Snapshot {
	s := &Snapshot{
		Generation: cfg.Generation,
		BuiltAt:    now,
		keys:       make(map[[sha256.Size]byte]*Key, len(cfg.Keys)),
		principals: make(map[string]*Principal, len(cfg.Principals)),
		upstreamID: make(map[string]*Upstream, len(cfg.Upstreams)),
		Errors:     map[string]string{},
	}
	for i := range cfg.Upstreams {
		u := &cfg.Upstreams[i]
		v := &Upstream{
			ID: u.ID, Name: u.Name, Kind: u.Kind, BaseURL: strings.TrimRight(u.BaseURL, "/"),
			Enabled: u.Enabled, CredentialKind: u.CredentialKind, SpecRevision: u.SpecRevision,
		}
		if len(u.Credential) > 0 && open != nil {
			pt, err := open.Open(u.Credential, credential.AD(u.ID))
			if err != nil {
				s.Errors[u.ID] = "credential cannot be decrypted with the configured master key"
				v.CredentialKind = ""
			} else {
				v.Credential, v.CredentialExpiresAt = credentialToken(u.CredentialKind, pt)
			}
		}
		if _, err := url.Parse(v.BaseURL); err != nil {
			s.Errors[u.ID] = "invalid base_url"
			continue
		}
		v.MessagesURL = v.BaseURL + "/v1/messages"
		v.CountTokensURL = v.BaseURL + "/v1/messages/count_tokens"
		v.MessagesTarget, _ = url.Parse(v.MessagesURL)
		v.CountTokensTarget, _ = url.Parse(v.CountTokensURL)
		s.Upstreams = append(s.Upstreams, v)
		s.upstreamID[v.ID] = v
	}
	s.Plugins = make(map[string]store.RegistryEntry, len(cfg.Plugins))
	for _, pe := range cfg.Plugins {
		s.Plugins[pe.ID] = pe
	}
	for _, u := range s.Upstreams {
		u.UsableIndex = -1
		if u.Enabled && u.Credential != "" {
			u.UsableIndex = len(s.Usable)
			s.Usable = append(s.Usable, u)
		}
	}
	// One allocation for all principals and one for all keys: at 10,000
	// and 50,000 of them, one each was most of the build's garbage.
	prs := make([]Principal, len(cfg.Principals))
	for i := range cfg.Principals {
		p := &cfg.Principals[i]
		prs[i] = Principal{
			ID: p.ID, Name: p.Name, Kind: p.Kind, Enabled: p.Enabled,
			models:           newModelMatcher(p.AllowedModels),
			CacheKeepalive:   p.CacheKeepalive,
			KeepAliveEnabled: keepAliveEnabled(p.CacheKeepalive),
			Limits:           principalLimits(p),
		}
		s.principals[p.ID] = &prs[i]
	}
	chains := append([]store.ChainEntry(nil), cfg.Chains...)
	sort.SliceStable(chains, func(i, j int) bool {
		if chains[i].PrincipalID != chains[j].PrincipalID {
			return chains[i].PrincipalID < chains[j].PrincipalID
		}
		return chains[i].Position < chains[j].Position
	})
	for _, e := range chains {
		p := s.principals[e.PrincipalID]
		if p == nil || !e.Enabled || e.Slot != store.SlotRouter {
			continue
		}
		r := Router{EntryID: e.ID, Config: e.Config, Pinned: pinnedUpstreams(e.Config)}
		if e.Builtin != nil {
			r.Builtin = *e.Builtin
		}
		if e.WasmRegistryID != nil {
			r.WasmRegistryID = *e.WasmRegistryID
			if pe, ok := s.Plugins[r.WasmRegistryID]; ok {
				r.WasmDigest, r.WasmName = pe.Digest, pe.Name
			}
			r.Bound = &Bound{}
		}
		p.Routers = append(p.Routers, r)
	}
	memo := map[string][]*Upstream{}
	for _, p := range s.principals {
		s.resolveRoutes(p, memo)
	}
	ks := make([]Key, 0, len(cfg.Keys))
	for i := range cfg.Keys {
		k := &cfg.Keys[i]
		p := s.principals[k.PrincipalID]
		if p == nil || k.RevokedAt != nil || len(k.Hash) != sha256.Size {
			continue
		}
		var h [sha256.Size]byte
		copy(h[:], k.Hash)
		ks = append(ks, Key{ID: k.ID, Principal: p})
		s.keys[h] = &ks[len(ks)-1]
	}
	return s
}

// principalLimits parses stored default_limits. The admin API validated
// them on write; a row that no longer parses (written by a newer version)
// is enforced as no limits rather than refusing the principal's traffic.
func principalLimits(p *store.Principal) []limits.Limit {
	if string(p.DefaultLimits) == "[]" {
		return nil // most principals: skip the JSON decoder
	}
	ls, err := limits.Parse(p.DefaultLimits)
	if err != nil {
		return nil
	}
	return ls
}

func keepAliveEnabled(raw json.RawMessage) bool {
	var c struct {
		Enabled bool `json:"enabled"`
	}
	return len(raw) > 0 && json.Unmarshal(raw, &c) == nil && c.Enabled
}

// credentialToken extracts the bearer material from an opened credential.
// OAuth credentials are a JSON token bundle; API keys are the key itself.
func credentialToken(kind string, pt []byte) (string, time.Time) {
	if kind == credential.OAuth {
		var b struct {
			AccessToken string `json:"access_token"`
			ExpiresAt   int64  `json:"expires_at"` // unix seconds, as the OAuth client stores it
		}
		if json.Unmarshal(pt, &b) == nil {
			var exp time.Time
			if b.ExpiresAt > 0 {
				exp = time.Unix(b.ExpiresAt, 0)
			}
			return b.AccessToken, exp
		}
	}
	return string(pt), time.Time{}
}

func pinnedUpstreams(cfg json.RawMessage) []string {
	if len(cfg) == 0 || string(cfg) == "{}" {
		return nil
	}
	var c struct {
		UpstreamID  string   `json:"upstream_id"`
		UpstreamIDs []string `json:"upstream_ids"`
	}
	if json.Unmarshal(cfg, &c) != nil {
		return nil
	}
	out := c.UpstreamIDs
	if c.UpstreamID != "" {
		out = append([]string{c.UpstreamID}, out...)
	}
	return out
}

// KeyByHash finds a live key by the SHA-256 of its plaintext.
func (s *Snapshot) KeyByHash(h [sha256.Size]byte) *Key { return s.keys[h] }

// Principal returns a principal by id, or nil.
func (s *Snapshot) Principal(id string) *Principal { return s.principals[id] }

// Upstream returns a live upstream by id, or nil.
func (s *Snapshot) Upstream(id string) *Upstream { return s.upstreamID[id] }

// Counts reports the sizes of the snapshot.
func (s *Snapshot) Counts() (upstreams, principals, keys int) {
	return len(s.Upstreams), len(s.principals), len(s.keys)
}

// AllowsModel reports whether the principal may use model.
func (p *Principal) AllowsModel(model string) bool { return p.models.match(model) }

// NamesModel reports whether the principal's allowed_models lists model
// exactly (not through a pattern): such names are bounded by the
// configuration, so metrics may use them as labels.
func (p *Principal) NamesModel(model string) bool {
	_, ok := p.models.exact[model]
	return ok
}

// modelMatcher matches exact ids and prefix patterns ending in '*'.
type modelMatcher struct {
	any      bool
	exact    map[string]struct{}
	prefixes []string
}

func newModelMatcher(patterns []string) modelMatcher {
	m := modelMatcher{exact: make(map[string]struct{}, len(patterns))}
	for _, p := range patterns {
		switch {
		case p == "*":
			m.any = true
		case strings.HasSuffix(p, "*"):
			m.prefixes = append(m.prefixes, strings.TrimSuffix(p, "*"))
		default:
			m.exact[p] = struct{}{}
		}
	}
	return m
}

func (m modelMatcher) match(model string) bool {
	if m.any {
		return true
	}
	if _, ok := m.exact[model]; ok {
		return true
	}
	for _, p := range m.prefixes {
		if strings.HasPrefix(model, p) {
			return true
		}
	}
	return false
}
