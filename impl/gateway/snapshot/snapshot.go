// Package snapshot builds the immutable, in-memory view of the gateway's
// configuration that the request path reads, and swaps it atomically when
// configuration changes. Readers never lock: they load one pointer.
package snapshot

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"sync"
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

	// keys are split by the hash's first byte, so a rebuild that changes a
	// few keys copies a few small maps, not one of every key (Apply).
	keys       *[keyShards]map[[sha256.Size]byte]*Key
	principals map[string]*Principal
	// routes are the built-in routers' candidate lists by pin set
	// (resolveRoutes): shared by principals, and by snapshots while the
	// upstreams do not change.
	routes map[string][]*Upstream
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
	// Lead is what a dynamic chain's leading built-in routers decide,
	// precomputed (nil when not dynamic): the request path starts there.
	Lead *Lead
	// Limits are the principal's default_limits (nil: unlimited).
	Limits []limits.Limit
	// MaxInFlight caps the principal's requests in flight (0: no cap).
	MaxInFlight int
	// Capture: the relay captures this principal's exchanges (package
	// capture).
	Capture bool
	// keyHashes are the principal's keys in this snapshot: what Apply
	// removes when the principal changes.
	keyHashes [][sha256.Size]byte
}

// keyShards is the number of key maps (one per first hash byte).
const keyShards = 256

// Lead is the start of a dynamic chain's pipeline: the candidates left by
// the built-in entries before its first WASM entry (every usable upstream
// when it has none), their positions in Snapshot.Usable (what a plugin is
// offered) and the first entry the request path runs. It depends only on
// the snapshot: built with it, read-only after.
type Lead struct {
	Candidates []*Upstream
	// Indexes are the candidates' UsableIndex; nil when Usable is too
	// long for 16-bit indexes (a router binding refuses such a table).
	Indexes []uint16
	Next    int
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
	// unknown or not OAuth): the relay asks for a refresh past it.
	CredentialExpiresAt time.Time
	// RefreshRefused: the provider refused the OAuth credential's refresh
	// grant for good (revoked); only the OAuth flow run again (a new
	// credential) clears it.
	RefreshRefused bool
	// MessagesURL and CountTokensURL are precomputed request targets.
	MessagesURL    string
	CountTokensURL string
	// MessagesTarget and CountTokensTarget are the same, parsed once per
	// snapshot for the proxy path (nil on an Upstream not made by Build).
	// Shared by every request: never modify them.
	MessagesTarget, CountTokensTarget *url.URL
	SpecRevision                      int64
	// Weight is the upstream's share of new work within its priority
	// class (the built-in router's spreading); 0 weighs as 1.
	Weight int
	// MaxUtilization5h and MaxUtilization7d are the usage thresholds in
	// percent (0: none): past either, the upstream weighs as standby.
	MaxUtilization5h, MaxUtilization7d int
	// MaxInFlight caps the requests this replica has sent to the upstream
	// and not finished; 0 is no cap (docs/routing.md).
	MaxInFlight int
	// UsableIndex is the upstream's position in Snapshot.Usable, -1 when
	// it is not usable: router plugins name upstreams by it.
	UsableIndex int
	// Cloud is a bedrock or vertex upstream's region, project and model
	// map (docs/cloud.md).
	Cloud store.CloudConfig
}

// Routable reports whether requests may be sent to the upstream now: it
// is enabled and holds a credential its provider has not revoked. A
// revoked one would be refused on every request, and a client cannot fix
// that by retrying; the relay passes over upstreams that are not.
func (u *Upstream) Routable() bool {
	return u.Enabled && u.Credential != "" && !u.RefreshRefused
}

// Opener decrypts an upstream credential bound to its upstream id.
type Opener interface {
	Open(ciphertext, associatedData []byte) ([]byte, error)
}

// Build makes a snapshot from a consistent configuration read, keys
// included: built from a configuration without them (store.Config
// ApplyWithoutKeys), every key would be refused.
func Build(cfg *store.Config, open Opener, now time.Time) *Snapshot {
	if cfg.KeysOmitted {
		panic("snapshot: Build on a configuration without its keys")
	}
	s := &Snapshot{
		Generation: cfg.Generation,
		BuiltAt:    now,
		keys:       new([keyShards]map[[sha256.Size]byte]*Key),
		principals: make(map[string]*Principal, len(cfg.Principals)),
		routes:     map[string][]*Upstream{},
	}
	// One allocation for all principals and one for all keys: at 10,000
	// and 50,000 of them, one each was most of the build's garbage.
	prs := make([]Principal, len(cfg.Principals))
	for i := range cfg.Principals {
		s.principals[cfg.Principals[i].ID] = &prs[i]
	}
	// The keys go into their maps on another goroutine while this one
	// builds the rest: they only need where each principal will be.
	keys := make(chan mappedKeys, 1) // never blocks: nothing leaks if the build panics
	go func() {
		for i := range s.keys {
			s.keys[i] = make(map[[sha256.Size]byte]*Key, len(cfg.Keys)/keyShards+1)
		}
		keys <- s.mapKeys(cfg.Keys, s.principals)
	}()
	s.buildUpstreams(cfg, open)
	s.setPlugins(cfg.Plugins)
	for i := range cfg.Principals {
		prs[i] = newPrincipal(&cfg.Principals[i])
	}
	s.addRouters(cfg.Chains, s.principals)
	memo := routesMemo{shared: s.routes, owned: true}
	for _, p := range s.principals {
		s.resolveRoutes(p, &memo)
	}
	setKeyHashes(<-keys)
	return s
}

// buildUpstreams opens every upstream of cfg: Upstreams, upstreamID,
// Errors and Usable.
func (s *Snapshot) buildUpstreams(cfg *store.Config, open Opener) {
	s.upstreamID = make(map[string]*Upstream, len(cfg.Upstreams))
	s.Errors = map[string]string{}
	for i := range cfg.Upstreams {
		u := &cfg.Upstreams[i]
		v := &Upstream{
			ID: u.ID, Name: u.Name, Kind: u.Kind, BaseURL: strings.TrimRight(u.BaseURL, "/"),
			Enabled: u.Enabled, CredentialKind: u.CredentialKind, SpecRevision: u.SpecRevision, Weight: u.Weight,
			MaxUtilization5h: u.MaxUtilization5h, MaxUtilization7d: u.MaxUtilization7d, MaxInFlight: u.MaxInFlight,
			RefreshRefused: u.Status.RefreshRefused, Cloud: u.Cloud,
		}
		if len(u.Credential) > 0 && open != nil {
			pt, err := open.Open(u.Credential, credential.UpstreamAD(u))
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
	for _, u := range s.Upstreams {
		u.UsableIndex = -1
		if u.Enabled && u.Credential != "" {
			u.UsableIndex = len(s.Usable)
			s.Usable = append(s.Usable, u)
		}
	}
}

func (s *Snapshot) setPlugins(entries []store.RegistryEntry) {
	s.Plugins = make(map[string]store.RegistryEntry, len(entries))
	for _, pe := range entries {
		s.Plugins[pe.ID] = pe
	}
}

func newPrincipal(p *store.Principal) Principal {
	return Principal{
		ID: p.ID, Name: p.Name, Kind: p.Kind, Enabled: p.Enabled,
		models:           newModelMatcher(p.AllowedModels),
		CacheKeepalive:   p.CacheKeepalive,
		KeepAliveEnabled: keepAliveEnabled(p.CacheKeepalive),
		Limits:           principalLimits(p),
		MaxInFlight:      p.MaxInFlight,
		Capture:          p.CaptureExchanges,
	}
}

// addRouters appends the enabled router entries of chains to the
// principals of to that they belong to, in chain order.
func (s *Snapshot) addRouters(chains []store.ChainEntry, to map[string]*Principal) {
	order := func(a, b *store.ChainEntry) int {
		return cmp.Or(strings.Compare(a.PrincipalID, b.PrincipalID), cmp.Compare(a.Position, b.Position))
	}
	// A configuration's chains are in this order already (by principal,
	// slot, position): sorted only when not.
	for i := 1; i < len(chains); i++ {
		if order(&chains[i-1], &chains[i]) > 0 {
			chains = slices.Clone(chains)
			slices.SortStableFunc(chains, func(a, b store.ChainEntry) int { return order(&a, &b) })
			break
		}
	}
	// One backing array for every principal's routers, cut by principal:
	// a principal's entries are adjacent.
	n := 0
	for i := range chains {
		if chains[i].Enabled && chains[i].Slot == store.SlotRouter {
			n++
		}
	}
	all := make([]Router, 0, n)
	var p *Principal
	start := 0
	flush := func() {
		switch {
		case p == nil || len(all) == start:
		case p.Routers == nil:
			p.Routers = all[start:len(all):len(all)]
		default:
			p.Routers = append(p.Routers, all[start:]...)
		}
		start = len(all)
	}
	for i := range chains {
		e := &chains[i]
		if p == nil || p.ID != e.PrincipalID {
			flush()
			p = to[e.PrincipalID]
		}
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
		all = append(all, r)
	}
	flush()
}

// addKeys adds the live keys among keys whose principal is in owners; the
// key maps they land in must be this snapshot's own.
func (s *Snapshot) addKeys(keys []store.Key, owners map[string]*Principal) {
	setKeyHashes(s.mapKeys(keys, owners))
}

// mappedKeys are the keys a build put in its maps, with their hashes.
type mappedKeys struct {
	keys   []Key
	hashes [][sha256.Size]byte
}

// mapKeys puts the live keys among keys whose principal is in owners into
// the snapshot's key maps. It reads no field of the principals, so they
// may still be being built. The owners are looked up and the maps filled
// on two goroutines (halves of the keys, then halves of the shards): at
// 50,000 keys this was most of a build, on one processor of two.
func (s *Snapshot) mapKeys(keys []store.Key, owners map[string]*Principal) mappedKeys {
	parts := 1
	if len(keys) >= 4096 { // below, a goroutine costs more than it saves
		parts = 2
	}
	own := make([]*Principal, len(keys))
	inParallel(parts, func(part int) {
		for i := part * len(keys) / parts; i < (part+1)*len(keys)/parts; i++ {
			k := &keys[i]
			if p := owners[k.PrincipalID]; p != nil && k.RevokedAt == nil && len(k.Hash) == sha256.Size {
				own[i] = p
			}
		}
	})
	m := mappedKeys{keys: make([]Key, 0, len(keys)), hashes: make([][sha256.Size]byte, 0, len(keys))}
	for i := range keys {
		if own[i] != nil {
			m.keys = append(m.keys, Key{ID: keys[i].ID, Principal: own[i]})
			m.hashes = append(m.hashes, [sha256.Size]byte(keys[i].Hash))
		}
	}
	inParallel(parts, func(part int) {
		lo, hi := part*keyShards/parts, (part+1)*keyShards/parts
		for i := range m.hashes {
			h := &m.hashes[i]
			if sh := int(h[0]); sh >= lo && sh < hi {
				s.keys[sh][*h] = &m.keys[i]
			}
		}
	})
	return m
}

// inParallel runs f(0) … f(n-1) at once and returns when all are done.
func inParallel(n int, f func(part int)) {
	var wg sync.WaitGroup
	wg.Add(n - 1)
	for part := 1; part < n; part++ {
		go func() {
			defer wg.Done()
			f(part)
		}()
	}
	f(0)
	wg.Wait()
}

// setKeyHashes gives each principal of m the hashes of its keys, for
// Apply: one backing array, cut by owner.
func setKeyHashes(m mappedKeys) {
	n := map[*Principal]int{}
	for i := range m.keys {
		n[m.keys[i].Principal]++
	}
	all := make([][sha256.Size]byte, len(m.keys))
	off := 0
	for i := range m.keys {
		p := m.keys[i].Principal
		if p.keyHashes == nil {
			p.keyHashes = all[off : off : off+n[p]]
			off += n[p]
		}
		p.keyHashes = append(p.keyHashes, m.hashes[i])
	}
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
func (s *Snapshot) KeyByHash(h [sha256.Size]byte) *Key { return s.keys[h[0]][h] }

// Principal returns a principal by id, or nil.
func (s *Snapshot) Principal(id string) *Principal { return s.principals[id] }

// Principals returns the snapshot's principals, in no order.
func (s *Snapshot) Principals() []*Principal {
	out := make([]*Principal, 0, len(s.principals))
	for _, p := range s.principals {
		out = append(out, p)
	}
	return out
}

// Upstream returns a live upstream by id, or nil.
func (s *Snapshot) Upstream(id string) *Upstream { return s.upstreamID[id] }

// Counts reports the sizes of the snapshot.
func (s *Snapshot) Counts() (upstreams, principals, keys int) {
	n := 0
	for _, m := range s.keys {
		n += len(m)
	}
	return len(s.Upstreams), len(s.principals), n
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
	var m modelMatcher
	for _, p := range patterns {
		switch {
		case p == "*":
			m.any = true
		case strings.HasSuffix(p, "*"):
			m.prefixes = append(m.prefixes, strings.TrimSuffix(p, "*"))
		default:
			// Made only when needed: most principals allow "*", and a map
			// each was a fifth of a build's allocations.
			if m.exact == nil {
				m.exact = make(map[string]struct{}, len(patterns))
			}
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
