package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"

	"github.com/pillarhq/pillar/impl/gateway/apikey"
	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/money"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// PrincipalResponse is the wire form of a principal.
type PrincipalResponse struct {
	ID                string          `json:"id"`
	Name              string          `json:"name"`
	Kind              string          `json:"kind"`
	Enabled           bool            `json:"enabled"`
	Revision          int64           `json:"revision"`
	AllowedModels     []string        `json:"allowed_models"`
	DefaultLimits     json.RawMessage `json:"default_limits"`
	CacheKeepalive    json.RawMessage `json:"cache_keepalive"`
	MaxInFlight       int             `json:"max_in_flight"`
	CaptureExchanges  bool            `json:"capture_exchanges"`
	CreatedAtUnixSecs int64           `json:"created_at_unix_secs"`
	UpdatedAtUnixSecs int64           `json:"updated_at_unix_secs"`
}

func principalResponse(p *store.Principal) PrincipalResponse {
	r := PrincipalResponse{ID: p.ID, Name: p.Name, Kind: p.Kind, Enabled: p.Enabled, Revision: p.Revision,
		AllowedModels: p.AllowedModels, DefaultLimits: p.DefaultLimits, CacheKeepalive: p.CacheKeepalive, MaxInFlight: p.MaxInFlight,
		CaptureExchanges: p.CaptureExchanges, CreatedAtUnixSecs: unix(p.CreatedAt), UpdatedAtUnixSecs: unix(p.UpdatedAt)}
	if r.AllowedModels == nil {
		r.AllowedModels = []string{}
	}
	if len(r.DefaultLimits) == 0 {
		r.DefaultLimits = json.RawMessage("[]")
	}
	if len(r.CacheKeepalive) == 0 {
		r.CacheKeepalive = json.RawMessage("null")
	}
	return r
}

// CreatePrincipalBody is the body of POST and PUT /admin/v1/principals.
type CreatePrincipalBody struct {
	Name           string          `json:"name"`
	Kind           string          `json:"kind"`
	AllowedModels  []string        `json:"allowed_models"`
	DefaultLimits  json.RawMessage `json:"default_limits"`
	CacheKeepalive json.RawMessage `json:"cache_keepalive"`
	// MaxInFlight caps the principal's requests in flight; past it they
	// queue (docs/routing.md). 0 (default) is no cap.
	MaxInFlight *int `json:"max_in_flight"`
	// CaptureExchanges turns on capturing the principal's request and
	// response bodies (docs/capture.md). Absent is off, on a PUT too: a
	// PUT replaces the principal, so it never keeps capture on unasked.
	CaptureExchanges bool `json:"capture_exchanges"`
}

// PatchPrincipalBody is the body of PATCH /admin/v1/principals/{id}; a
// field present as null clears cache_keepalive.
type PatchPrincipalBody struct {
	Name           *string         `json:"name"`
	Enabled        *bool           `json:"enabled"`
	AllowedModels  *[]string       `json:"allowed_models"`
	DefaultLimits  json.RawMessage `json:"default_limits"`
	CacheKeepalive json.RawMessage `json:"cache_keepalive"`
	MaxInFlight    *int            `json:"max_in_flight"`
	// CaptureExchanges: absent keeps the principal's setting.
	CaptureExchanges *bool `json:"capture_exchanges"`
}

// AllowedModelsBody is the body of PUT …/allowed_models.
type AllowedModelsBody struct {
	AllowedModels []string `json:"allowed_models"`
}

func validPrincipalKind(k string) error {
	if k != "machine" && k != "user" {
		return invalid("kind: must be machine or user, got %q", k)
	}
	return nil
}

func validModels(ms []string) error {
	if len(ms) > 1000 {
		return invalid("allowed_models: at most 1000 entries")
	}
	for i, m := range ms {
		if !validModelID(m) {
			return invalid("allowed_models[%d]: model ids are 1 to %d bytes of text without control characters", i, maxModelID)
		}
	}
	return nil
}

// limit is one default_limits element: max for requests and tokens,
// limit (decimal dollars) for a usd budget.
type limit struct {
	Kind       string  `json:"kind"`
	WindowSecs int64   `json:"window_secs"`
	Max        int64   `json:"max,omitempty"`
	Limit      *string `json:"limit,omitempty"`
}

// normLimits validates default_limits and returns its normalised JSON.
func normLimits(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage("[]"), nil
	}
	var ls []limit
	if err := decodeStrict(raw, &ls, "default_limits."); err != nil {
		var ae *APIError
		if errors.As(err, &ae) {
			ae.Message += ` (elements are {"kind":"requests"|"tokens","window_secs":N,"max":N} or {"kind":"usd","window_secs":N,"limit":"25.00"})`
		}
		return nil, err
	}
	// The bounds are the enforcer's (package limits), checked by its parser.
	if _, err := limits.Parse(raw); err != nil {
		if slices.ContainsFunc(ls, func(l limit) bool { return l.Kind == "usd" || l.Limit != nil }) {
			return nil, newErr("invalid_budget", "%s", err.Error())
		}
		return nil, invalid("%s", err.Error())
	}
	for i := range ls {
		if ls[i].Limit != nil {
			// Stored in its canonical spelling ("25" becomes "25.00").
			n, _ := money.ParseUSD(*ls[i].Limit)
			canon := n.String()
			ls[i].Limit = &canon
		}
	}
	if ls == nil {
		ls = []limit{}
	}
	b, _ := json.Marshal(ls)
	return b, nil
}

func (a *api) principalFromBody(b *CreatePrincipalBody) (store.Principal, error) {
	if err := validName(b.Name); err != nil {
		return store.Principal{}, err
	}
	if err := validPrincipalKind(b.Kind); err != nil {
		return store.Principal{}, err
	}
	if err := validModels(b.AllowedModels); err != nil {
		return store.Principal{}, err
	}
	limits, err := normLimits(b.DefaultLimits)
	if err != nil {
		return store.Principal{}, err
	}
	ka, err := NormalizeCacheKeepalive(b.CacheKeepalive)
	if err != nil {
		return store.Principal{}, err
	}
	if err := validMaxInFlight(b.MaxInFlight); err != nil {
		return store.Principal{}, err
	}
	models := b.AllowedModels
	if models == nil {
		models = []string{}
	}
	p := store.Principal{Name: b.Name, Kind: b.Kind, Enabled: true, AllowedModels: models, DefaultLimits: limits, CacheKeepalive: ka, CaptureExchanges: b.CaptureExchanges}
	if b.MaxInFlight != nil {
		p.MaxInFlight = *b.MaxInFlight
	}
	return p, nil
}

// validMaxInFlight checks a cap on requests in flight, when given.
func validMaxInFlight(n *int) error {
	if n != nil && (*n < 0 || *n > store.MaxPrincipalInFlight) {
		return invalid("max_in_flight: must be 0 (no cap) to %d, got %d", store.MaxPrincipalInFlight, *n)
	}
	return nil
}

func (a *api) createPrincipal(w http.ResponseWriter, r *http.Request) error {
	var b CreatePrincipalBody
	if err := decode(r, &b); err != nil {
		return err
	}
	p, err := a.principalFromBody(&b)
	if err != nil {
		return err
	}
	out, err := a.Store.CreatePrincipal(r.Context(), p)
	if err != nil {
		return fromStore(err, resPrincipal, "")
	}
	a.changed(r.Context())
	w.Header().Set("Location", "/admin/v1/principals/"+out.ID)
	etag(w, out.Revision)
	writeJSON(w, http.StatusCreated, principalResponse(out))
	return nil
}

func (a *api) listPrincipals(w http.ResponseWriter, r *http.Request) error {
	ps, err := a.Store.ListPrincipals(r.Context())
	if err != nil {
		return fromStore(err, resPrincipal, "")
	}
	out := make([]PrincipalResponse, 0, len(ps))
	for i := range ps {
		out = append(out, principalResponse(&ps[i]))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *api) getPrincipal(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	p, err := a.Store.GetPrincipal(r.Context(), id)
	if err != nil {
		return fromStore(err, resPrincipal, id)
	}
	etag(w, p.Revision)
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return nil
	}
	writeJSON(w, http.StatusOK, principalResponse(p))
	return nil
}

func (a *api) respondPrincipal(w http.ResponseWriter, r *http.Request, p *store.Principal, err error, id string) error {
	if err != nil {
		return fromStore(err, resPrincipal, id)
	}
	a.changed(r.Context())
	etag(w, p.Revision)
	writeJSON(w, http.StatusOK, principalResponse(p))
	return nil
}

func (a *api) putPrincipal(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	expect, err := ifMatch(r, false)
	if err != nil {
		return err
	}
	var b CreatePrincipalBody
	if err := decode(r, &b); err != nil {
		return err
	}
	p, err := a.principalFromBody(&b)
	if err != nil {
		return err
	}
	out, err := a.Store.UpdatePrincipal(r.Context(), id, expect, p)
	return a.respondPrincipal(w, r, out, err, id)
}

func (a *api) patchPrincipal(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	expect, err := ifMatch(r, false)
	if err != nil {
		return err
	}
	var b PatchPrincipalBody
	if err := decode(r, &b); err != nil {
		return err
	}
	if b.Name == nil && b.Enabled == nil && b.AllowedModels == nil && b.DefaultLimits == nil && b.CacheKeepalive == nil && b.MaxInFlight == nil && b.CaptureExchanges == nil {
		return invalid("the body names no field to change (name, enabled, allowed_models, default_limits, cache_keepalive, max_in_flight, capture_exchanges)")
	}
	if err := validMaxInFlight(b.MaxInFlight); err != nil {
		return err
	}
	patch := store.PrincipalPatch{Name: b.Name, Enabled: b.Enabled, AllowedModels: b.AllowedModels, MaxInFlight: b.MaxInFlight,
		CaptureExchanges: b.CaptureExchanges}
	if b.Name != nil {
		if err := validName(*b.Name); err != nil {
			return err
		}
	}
	if b.AllowedModels != nil {
		if err := validModels(*b.AllowedModels); err != nil {
			return err
		}
	}
	if b.DefaultLimits != nil {
		l, err := normLimits(b.DefaultLimits)
		if err != nil {
			return err
		}
		patch.DefaultLimits = &l
	}
	if b.CacheKeepalive != nil { // present: an object sets, null clears
		ka, err := NormalizeCacheKeepalive(b.CacheKeepalive)
		if err != nil {
			return err
		}
		patch.SetCacheKeepalive, patch.CacheKeepalive = true, ka
	}
	out, err := a.Store.PatchPrincipal(r.Context(), id, expect, patch)
	return a.respondPrincipal(w, r, out, err, id)
}

func (a *api) deletePrincipal(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	expect, err := ifMatch(r, false)
	if err != nil {
		return err
	}
	if err := a.Store.DeletePrincipal(r.Context(), id, expect); err != nil {
		return fromStore(err, resPrincipal, id)
	}
	a.changed(r.Context())
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *api) setPrincipalEnabled(on bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		id := r.PathValue("id")
		expect, err := ifMatch(r, false)
		if err != nil {
			return err
		}
		out, err := a.Store.PatchPrincipal(r.Context(), id, expect, store.PrincipalPatch{Enabled: &on})
		return a.respondPrincipal(w, r, out, err, id)
	}
}

func (a *api) putAllowedModels(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	expect, err := ifMatch(r, false)
	if err != nil {
		return err
	}
	var b AllowedModelsBody
	if err := decode(r, &b); err != nil {
		return err
	}
	if b.AllowedModels == nil {
		return invalid("allowed_models: required (an empty list allows no model)")
	}
	if err := validModels(b.AllowedModels); err != nil {
		return err
	}
	out, err := a.Store.PatchPrincipal(r.Context(), id, expect, store.PrincipalPatch{AllowedModels: &b.AllowedModels})
	return a.respondPrincipal(w, r, out, err, id)
}

// ---------------------------------------------------------------- keys

// KeyResponse is a key record; Key (the plaintext) is set only in the
// response that issues it.
type KeyResponse struct {
	ID                string `json:"id"`
	PrincipalID       string `json:"principal_id"`
	Name              string `json:"name"`
	Prefix            string `json:"prefix"`
	Key               string `json:"key,omitempty"`
	CreatedAtUnixSecs int64  `json:"created_at_unix_secs"`
	RevokedAtUnixSecs *int64 `json:"revoked_at_unix_secs"`
}

func keyResponse(k *store.Key) KeyResponse {
	return KeyResponse{ID: k.ID, PrincipalID: k.PrincipalID, Name: k.Name, Prefix: k.Prefix,
		CreatedAtUnixSecs: unix(k.CreatedAt), RevokedAtUnixSecs: unixp(k.RevokedAt)}
}

// IssueKeyBody is the optional body of POST …/keys.
type IssueKeyBody struct {
	Name *string `json:"name"`
}

func (a *api) issueKey(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	var b IssueKeyBody
	if err := decodeOptional(r, &b); err != nil {
		return err
	}
	var name string
	if b.Name != nil {
		// A given name is a real one, not empty, not blank: the dashboard
		// and the logs name the principal by it.
		if err := validName(*b.Name); err != nil {
			return err
		}
		name = *b.Name
	}
	plain, display, hash := apikey.New()
	k, err := a.Store.CreateKey(r.Context(), store.Key{PrincipalID: id, Name: name, Prefix: display, Hash: hash[:]})
	if err != nil {
		return fromStore(err, resPrincipal, id)
	}
	a.changed(r.Context())
	out := keyResponse(k)
	out.Key = plain // the only time the plaintext leaves the server
	w.Header().Set("Location", "/admin/v1/principals/"+id+"/keys/"+k.ID)
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (a *api) listKeys(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	ks, err := a.Store.ListKeys(r.Context(), id)
	if err != nil {
		return fromStore(err, resPrincipal, id)
	}
	out := make([]KeyResponse, 0, len(ks))
	for i := range ks {
		out = append(out, keyResponse(&ks[i]))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *api) revokeKey(w http.ResponseWriter, r *http.Request) error {
	id, keyID := r.PathValue("id"), r.PathValue("key_id")
	if _, err := a.Store.GetPrincipal(r.Context(), id); err != nil {
		return fromStore(err, resPrincipal, id)
	}
	k, err := a.Store.RevokeKey(r.Context(), id, keyID)
	if err != nil {
		return fromStore(err, resKey, keyID)
	}
	a.changed(r.Context())
	writeJSON(w, http.StatusOK, keyResponse(k))
	return nil
}

// --------------------------------------------------------------- chain

// PluginChainEntry is the wire form of a chain entry.
type PluginChainEntry struct {
	ID             string          `json:"id"`
	PrincipalID    string          `json:"principal_id"`
	Slot           string          `json:"slot"`
	Builtin        *string         `json:"builtin"`
	WasmRegistryID *string         `json:"wasm_registry_id"`
	Config         json.RawMessage `json:"config"`
	Position       int64           `json:"position"`
	Enabled        bool            `json:"enabled"`
	Revision       int64           `json:"revision"`
}

func chainEntry(e *store.ChainEntry) PluginChainEntry {
	cfg := e.Config
	if len(cfg) == 0 {
		cfg = json.RawMessage("{}")
	}
	return PluginChainEntry{ID: e.ID, PrincipalID: e.PrincipalID, Slot: e.Slot, Builtin: e.Builtin,
		WasmRegistryID: e.WasmRegistryID, Config: cfg, Position: e.Position, Enabled: e.Enabled, Revision: e.Revision}
}

// ChainListResponse is the body of GET …/plugin-chain.
type ChainListResponse struct {
	PrincipalID string             `json:"principal_id"`
	Entries     []PluginChainEntry `json:"entries"`
}

func (a *api) listChain(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("principal_id")
	es, err := a.Store.ListChain(r.Context(), id)
	if err != nil {
		return fromStore(err, resPrincipal, id)
	}
	out := ChainListResponse{PrincipalID: id, Entries: make([]PluginChainEntry, 0, len(es))}
	for i := range es {
		out.Entries = append(out.Entries, chainEntry(&es[i]))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
