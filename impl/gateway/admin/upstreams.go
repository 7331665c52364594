package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// UpstreamResponse is the wire form of an upstream. It never carries the
// credential.
type UpstreamResponse struct {
	ID                  string  `json:"id"`
	Name                string  `json:"name"`
	Kind                string  `json:"kind"`
	BaseURL             string  `json:"base_url"`
	Enabled             bool    `json:"enabled"`
	WarmupEnabled       bool    `json:"warmup_enabled"`
	WarmupDialectPlugin *string `json:"warmup_dialect_plugin"`
	SpecRevision        int64   `json:"spec_revision"`
	CredentialMode      *string `json:"credential_mode"`
	OAuthAuthorizeURL   *string `json:"oauth_authorize_url,omitempty"`
	OAuthTokenURL       *string `json:"oauth_token_url,omitempty"`
	HasCredential       bool    `json:"has_credential"`
	Weight              int     `json:"weight"`
	MaxUtilization5h    int     `json:"max_utilization_5h"`
	MaxUtilization7d    int     `json:"max_utilization_7d"`
	MaxInFlight         int     `json:"max_in_flight"`
	// Region, Project and ModelMap: a bedrock or vertex upstream's.
	Region            string            `json:"region,omitempty"`
	Project           string            `json:"project,omitempty"`
	ModelMap          map[string]string `json:"model_map,omitempty"`
	Status            UpstreamStatus    `json:"status"`
	CreatedAtUnixSecs int64             `json:"created_at_unix_secs"`
	UpdatedAtUnixSecs int64             `json:"updated_at_unix_secs"`
}

// UpstreamStatus is system-managed state.
type UpstreamStatus struct {
	LastApplyError       *string `json:"last_apply_error"`
	LastApplyAtUnixSecs  *int64  `json:"last_apply_at_unix_secs"`
	LastWarmupAtUnixSecs *int64  `json:"last_warmup_at_unix_secs"`
	// Routable: requests may be routed to the upstream as configured;
	// UnroutableReason says why not (null when routable).
	Routable         bool    `json:"routable"`
	UnroutableReason *string `json:"unroutable_reason"`
}

// Why an upstream is out of routing, as the admin view names it.
const (
	UnroutableRefreshRefused = "refresh_refused"
	UnroutableNoCredential   = "no_credential"
	UnroutableDisabled       = "disabled"
)

// unroutableReason mirrors the snapshot's routing predicate on the stored
// upstream. When several hold, the one an operator must act on beyond
// enabling the upstream comes first: a revoked credential needs the OAuth
// flow run again, a missing one a credential.
func unroutableReason(u *store.Upstream) *string {
	var r string
	switch {
	case u.Status.RefreshRefused:
		r = UnroutableRefreshRefused
	case len(u.Credential) == 0:
		r = UnroutableNoCredential
	case !u.Enabled:
		r = UnroutableDisabled
	default:
		return nil
	}
	return &r
}

func upstreamResponse(u *store.Upstream) UpstreamResponse {
	r := UpstreamResponse{
		ID: u.ID, Name: u.Name, Kind: u.Kind, BaseURL: u.BaseURL, Enabled: u.Enabled, WarmupEnabled: u.WarmupEnabled,
		WarmupDialectPlugin: u.WarmupDialectPlugin, SpecRevision: u.SpecRevision, HasCredential: len(u.Credential) > 0, Weight: u.Weight,
		MaxUtilization5h: u.MaxUtilization5h, MaxUtilization7d: u.MaxUtilization7d, MaxInFlight: u.MaxInFlight,
		Status: UpstreamStatus{
			// The apply error, else the OAuth refresh failure (scheduler/oauth area: each has its own writer).
			LastApplyError: u.Status.Error(), LastApplyAtUnixSecs: unixp(u.Status.LastApplyAt),
			LastWarmupAtUnixSecs: unixp(u.Status.LastWarmupAt),
			UnroutableReason:     unroutableReason(u),
		},
		CreatedAtUnixSecs: unix(u.CreatedAt), UpdatedAtUnixSecs: unix(u.UpdatedAt),
		Region: u.Cloud.Region, Project: u.Cloud.Project, ModelMap: u.Cloud.ModelMap,
	}
	r.Status.Routable = r.Status.UnroutableReason == nil
	if r.HasCredential && u.CredentialKind != "" {
		m := u.CredentialKind
		r.CredentialMode = &m
	}
	if u.Kind == store.KindVendorOAuth {
		r.OAuthAuthorizeURL, r.OAuthTokenURL = &u.OAuthAuthorizeURL, &u.OAuthTokenURL
	}
	return r
}

// UpstreamCreateBody is the body of POST /admin/v1/upstreams.
type UpstreamCreateBody struct {
	Name          string  `json:"name"`
	Kind          string  `json:"kind"`
	BaseURL       string  `json:"base_url"`
	APIKeyEnv     *string `json:"api_key_env"`
	APIKeyValue   *string `json:"api_key_value"`
	Enabled       *bool   `json:"enabled"`
	WarmupEnabled *bool   `json:"warmup_enabled"`
	// OAuthAuthorizeURL and OAuthTokenURL override the provider's OAuth
	// endpoints of a vendor_oauth upstream.
	OAuthAuthorizeURL *string `json:"oauth_authorize_url"`
	OAuthTokenURL     *string `json:"oauth_token_url"`
	// Weight is the upstream's share of new work in its priority class
	// (docs/routing.md); default 1, 0 is standby.
	Weight *int `json:"weight"`
	// MaxUtilization5h and MaxUtilization7d are the usage thresholds in
	// percent of the polled windows (docs/routing.md); 0 (default) is none.
	MaxUtilization5h *int `json:"max_utilization_5h"`
	MaxUtilization7d *int `json:"max_utilization_7d"`
	// MaxInFlight caps the requests each replica has in flight to the
	// upstream (docs/routing.md); 0 (default) is no cap.
	MaxInFlight *int `json:"max_in_flight"`
	CloudFields
}

// UpstreamUpdateBody is the body of PUT /admin/v1/upstreams/{id}: the
// user-managed fields, replaced. The credential is kept unless one is given.
type UpstreamUpdateBody struct {
	Name          string  `json:"name"`
	Kind          *string `json:"kind"`
	BaseURL       string  `json:"base_url"`
	APIKeyEnv     *string `json:"api_key_env"`
	APIKeyValue   *string `json:"api_key_value"`
	Enabled       *bool   `json:"enabled"`
	WarmupEnabled *bool   `json:"warmup_enabled"`
	// OAuth endpoints are kept unless given.
	OAuthAuthorizeURL *string `json:"oauth_authorize_url"`
	OAuthTokenURL     *string `json:"oauth_token_url"`
	// Weight is kept unless given.
	Weight *int `json:"weight"`
	// The usage thresholds are kept unless given.
	MaxUtilization5h *int `json:"max_utilization_5h"`
	MaxUtilization7d *int `json:"max_utilization_7d"`
	// MaxInFlight is kept unless given.
	MaxInFlight *int `json:"max_in_flight"`
	// Cloud fields: the credential and model_map are kept unless given.
	CloudFields
}

// UpstreamPatchBody is the body of PATCH /admin/v1/upstreams/{id}.
type UpstreamPatchBody struct {
	WarmupEnabled *bool   `json:"warmup_enabled"`
	Enabled       *bool   `json:"enabled"`
	Name          *string `json:"name"`
	BaseURL       *string `json:"base_url"`
	// APIKeyEnv and APIKeyValue replace a vendor_api_key upstream's key; a
	// base_url of another origin needs one of them while a key is held.
	APIKeyEnv   *string `json:"api_key_env"`
	APIKeyValue *string `json:"api_key_value"`
	Weight      *int    `json:"weight"`
	// MaxUtilization5h, MaxUtilization7d: usage thresholds, 0 is none.
	MaxUtilization5h *int `json:"max_utilization_5h"`
	MaxUtilization7d *int `json:"max_utilization_7d"`
	// MaxInFlight: the cap on requests in flight, 0 is none.
	MaxInFlight *int `json:"max_in_flight"`
	// WarmupDialectPlugin binds a registry entry supporting the
	// warmup_dialect slot (null unbinds).
	WarmupDialectPlugin json.RawMessage `json:"warmup_dialect_plugin"`
	CloudFields
}

// validThresholds checks the usage thresholds, when given.
func validThresholds(fiveHour, sevenDay *int) error {
	for _, t := range []struct {
		name string
		v    *int
	}{{"max_utilization_5h", fiveHour}, {"max_utilization_7d", sevenDay}} {
		if t.v != nil && (*t.v < 0 || *t.v > store.MaxUtilizationThreshold) {
			return invalid("%s: must be 0 (no threshold) to %d percent, got %d", t.name, store.MaxUtilizationThreshold, *t.v)
		}
	}
	return nil
}

// validUpstreamMaxInFlight checks an upstream's cap on requests in
// flight, when given.
func validUpstreamMaxInFlight(v *int) error {
	if v != nil && (*v < 0 || *v > store.MaxUpstreamInFlight) {
		return invalid("max_in_flight: must be 0 (no cap) to %d, got %d", store.MaxUpstreamInFlight, *v)
	}
	return nil
}

// validWeight checks a routing weight, when given.
func validWeight(w *int) error {
	if w != nil && (*w < 0 || *w > store.MaxWeight) {
		return invalid("weight: must be 0 (standby) to %d, got %d", store.MaxWeight, *w)
	}
	return nil
}

// validName checks a resource name: 1 to 128 characters of valid UTF-8,
// no control characters, no leading or trailing space.
func validName(name string) error {
	ok := utf8.ValidString(name) && strings.TrimSpace(name) == name && name != "" && utf8.RuneCountInString(name) <= 128 &&
		!strings.ContainsFunc(name, unicode.IsControl)
	if !ok {
		return invalid("name: required, 1 to 128 characters without control characters or leading and trailing spaces")
	}
	return nil
}

// validLocation checks a location (base_url, the OAuth endpoints): an
// absolute http(s) URL with a host and no user info, query or fragment. The message does not repeat the value: user
// info may hold a password, and refusals are logged.
func validLocation(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil ||
		strings.ContainsAny(raw, "?#") || u.Opaque != "" || len(raw) > maxLocation {
		return newErr("invalid_location", "%s: must be an absolute http or https URL (at most %d bytes) with a host and without user info, query or fragment", field, maxLocation)
	}
	return nil
}

// location checks a location the proxy will connect to: its syntax, then
// the destination policy (link-local, metadata, the proxy's own listeners,
// and private ranges unless the operator allows them).
func (a *api) location(ctx context.Context, field, raw string) error {
	if err := validLocation(field, raw); err != nil {
		return err
	}
	if a.Destinations == nil {
		return nil
	}
	if err := a.Destinations.CheckURL(ctx, raw); err != nil {
		return newErr("invalid_location", "%s: %v", field, err)
	}
	return nil
}

// credential resolves api_key_env / api_key_value into the credential
// sealed for upstream id at baseURL (bound to its origin, credential.AD).
// No message repeats a value given for either field unless it is a
// variable name the operator allowed: a secret pasted into
// api_key_env must not reach the response or the log.
func (a *api) credential(r *http.Request, id, kind, baseURL string, env, value *string, required bool) ([]byte, error) {
	// A variable's value is a key the caller never sees, sent to the
	// base_url the caller chooses: only the admin role may name one.
	if caller, ok := IdentityFrom(r.Context()); env != nil && ok && caller.Role != RoleAdmin {
		e := newErr("forbidden", "the %s role may not name api_key_env (a key from the server's environment); give api_key_value, or ask an admin", caller.Role)
		e.Details = map[string]any{"role": caller.Role}
		return nil, e
	}
	if env != nil && value != nil {
		return nil, newErr("conflicting_api_key", "give either api_key_env or api_key_value, not both")
	}
	if kind == store.KindVendorOAuth {
		if env != nil || value != nil {
			return nil, invalid("vendor_oauth upstreams get their credential from the OAuth flow; api_key_env and api_key_value are not accepted")
		}
		return nil, nil
	}
	var plain string
	switch {
	case env != nil:
		if *env == "" {
			return nil, invalid("api_key_env: name an environment variable")
		}
		if !envName.MatchString(*env) {
			return nil, invalid("api_key_env: not a valid variable name (letters, digits and _, at most 128); to send a key itself use api_key_value")
		}
		if !a.keyEnvAllowed(*env) {
			return nil, newErr("api_key_env_not_allowed", "api_key_env: the server does not allow this variable; name one starting with %s or one listed in --upstream-key-env-allow (the proxy's own variables are never allowed)", UpstreamKeyEnvPrefix)
		}
		plain = a.Getenv(*env)
		if plain == "" {
			return nil, invalid("api_key_env: the variable %s is not set or empty in the server's environment", *env)
		}
	case value != nil:
		if *value == "" {
			return nil, invalid("api_key_value: must not be empty")
		}
		if len(*value) > maxAPIKeyValue {
			return nil, invalid("api_key_value: at most %d bytes", maxAPIKeyValue)
		}
		plain = *value
	default:
		if required {
			return nil, invalid("vendor_api_key upstreams need api_key_env or api_key_value")
		}
		return nil, nil
	}
	return a.Sealer.Seal([]byte(plain), credential.AD(id, kind, baseURL, ""))
}

func validKind(kind string) error {
	if kind != store.KindVendorAPIKey && kind != store.KindVendorOAuth && !store.IsCloud(kind) {
		return invalid("kind: must be vendor_api_key, vendor_oauth, bedrock or vertex, got %q", kind)
	}
	return nil
}

func (a *api) createUpstream(w http.ResponseWriter, r *http.Request) error {
	var b UpstreamCreateBody
	if err := decode(r, &b); err != nil {
		return err
	}
	if err := validName(b.Name); err != nil {
		return err
	}
	if err := validKind(b.Kind); err != nil {
		return err
	}
	cloudCfg, err := cloudConfig(b.Kind, &b.CloudFields, store.CloudConfig{})
	if err != nil {
		return err
	}
	b.BaseURL = cloudBaseURL(b.Kind, b.BaseURL, cloudCfg.Region)
	if err := a.location(r.Context(), "base_url", b.BaseURL); err != nil {
		return err
	}
	if err := cloudRefusesAPIKey(b.Kind, b.APIKeyEnv, b.APIKeyValue); err != nil {
		return err
	}
	id := store.NewID("up")
	var cred []byte
	if !store.IsCloud(b.Kind) {
		if cred, err = a.credential(r, id, b.Kind, b.BaseURL, b.APIKeyEnv, b.APIKeyValue, true); err != nil {
			return err
		}
	}
	sealed, err := a.cloudCredential(r, id, b.Kind, b.BaseURL, &b.CloudFields, true)
	if err != nil {
		return err
	}
	if err := validWeight(b.Weight); err != nil {
		return err
	}
	if err := validThresholds(b.MaxUtilization5h, b.MaxUtilization7d); err != nil {
		return err
	}
	if err := validUpstreamMaxInFlight(b.MaxInFlight); err != nil {
		return err
	}
	spec := store.UpstreamSpec{ID: id, Name: b.Name, Kind: b.Kind, BaseURL: b.BaseURL, Enabled: true,
		WarmupEnabled: b.Kind == store.KindVendorOAuth, Weight: b.Weight, MaxUtilization5h: b.MaxUtilization5h, MaxUtilization7d: b.MaxUtilization7d,
		MaxInFlight: b.MaxInFlight}
	if b.Enabled != nil {
		spec.Enabled = *b.Enabled
	}
	if b.WarmupEnabled != nil {
		// Only the vendor_oauth default may be on before credentials exist
		// (it takes effect once OAuth completes); asking for warm-up on any
		// other upstream is refused like the PATCH.
		if *b.WarmupEnabled && b.Kind != store.KindVendorOAuth {
			return warmupNeedsOAuth()
		}
		spec.WarmupEnabled = *b.WarmupEnabled
	}
	if cred != nil {
		spec.Credential, spec.CredentialKind = cred, credential.APIKey
	}
	if spec.OAuthAuthorizeURL, spec.OAuthTokenURL, err = a.oauthEndpoints(r.Context(), b.Kind, b.OAuthAuthorizeURL, b.OAuthTokenURL, "", ""); err != nil {
		return err
	}
	spec.Cloud = cloudCfg
	if sealed != nil {
		spec.Credential, spec.CredentialKind, spec.OAuthTokenURL = sealed.ciphertext, sealed.kind, sealed.tokenURI
	}
	u, err := a.Store.CreateUpstream(r.Context(), spec)
	if err != nil {
		return fromStore(err, resUpstream, id)
	}
	a.changed(r.Context())
	w.Header().Set("Location", "/admin/v1/upstreams/"+u.ID)
	etag(w, u.SpecRevision)
	writeJSON(w, http.StatusCreated, upstreamResponse(u))
	return nil
}

func warmupNeedsOAuth() error {
	return newErr("warmup_requires_oauth_credentials", "warm-up needs a vendor_oauth upstream holding OAuth credentials; complete the OAuth flow first")
}

func (a *api) listUpstreams(w http.ResponseWriter, r *http.Request) error {
	us, err := a.Store.ListUpstreams(r.Context())
	if err != nil {
		return fromStore(err, resUpstream, "")
	}
	out := make([]UpstreamResponse, 0, len(us))
	for i := range us {
		out = append(out, upstreamResponse(&us[i]))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *api) getUpstream(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	u, err := a.Store.GetUpstream(r.Context(), id)
	if err != nil {
		return fromStore(err, resUpstream, id)
	}
	etag(w, u.SpecRevision)
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return nil
	}
	writeJSON(w, http.StatusOK, upstreamResponse(u))
	return nil
}

func (a *api) putUpstream(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	expect, err := ifMatch(r, false)
	if err != nil {
		return err
	}
	var b UpstreamUpdateBody
	if err := decode(r, &b); err != nil {
		return err
	}
	if err := validName(b.Name); err != nil {
		return err
	}
	if b.Kind != nil {
		if err := validKind(*b.Kind); err != nil {
			return err
		}
	}
	cur, err := a.Store.GetUpstream(r.Context(), id)
	if err != nil {
		return fromStore(err, resUpstream, id)
	}
	if b.Kind != nil && *b.Kind != cur.Kind {
		return invalid("kind: an upstream's kind cannot change (it is %s); create a new upstream instead", cur.Kind)
	}
	// PUT replaces the configuration: a map not given is no map.
	base := store.CloudConfig{Region: cur.Cloud.Region, Project: cur.Cloud.Project}
	cloudCfg, err := cloudConfig(cur.Kind, &b.CloudFields, base)
	if err != nil {
		return err
	}
	b.BaseURL = cloudBaseURL(cur.Kind, b.BaseURL, cloudCfg.Region)
	if err := a.location(r.Context(), "base_url", b.BaseURL); err != nil {
		return err
	}
	if err := cloudRefusesAPIKey(cur.Kind, b.APIKeyEnv, b.APIKeyValue); err != nil {
		return err
	}
	var cred []byte
	if !store.IsCloud(cur.Kind) {
		if cred, err = a.credential(r, id, cur.Kind, b.BaseURL, b.APIKeyEnv, b.APIKeyValue, false); err != nil {
			return err
		}
	}
	sealed, err := a.cloudCredential(r, id, cur.Kind, b.BaseURL, &b.CloudFields, false)
	if err != nil {
		return err
	}
	if err := validWeight(b.Weight); err != nil {
		return err
	}
	if err := validThresholds(b.MaxUtilization5h, b.MaxUtilization7d); err != nil {
		return err
	}
	if err := validUpstreamMaxInFlight(b.MaxInFlight); err != nil {
		return err
	}
	spec := store.UpstreamSpec{Name: b.Name, Kind: cur.Kind, BaseURL: b.BaseURL, Enabled: cur.Enabled, WarmupEnabled: cur.WarmupEnabled, Weight: b.Weight,
		MaxUtilization5h: b.MaxUtilization5h, MaxUtilization7d: b.MaxUtilization7d, MaxInFlight: b.MaxInFlight}
	if b.Enabled != nil {
		spec.Enabled = *b.Enabled
	}
	if b.WarmupEnabled != nil {
		if *b.WarmupEnabled && !cur.WarmupEnabled && !hasOAuth(cur) {
			return warmupNeedsOAuth()
		}
		spec.WarmupEnabled = *b.WarmupEnabled
	}
	if cred != nil {
		spec.Credential, spec.CredentialKind = cred, credential.APIKey
	}
	if spec.OAuthAuthorizeURL, spec.OAuthTokenURL, err = a.oauthEndpoints(r.Context(), cur.Kind, b.OAuthAuthorizeURL, b.OAuthTokenURL,
		cur.OAuthAuthorizeURL, cur.OAuthTokenURL); err != nil {
		return err
	}
	spec.Cloud = cloudCfg
	if store.IsCloud(cur.Kind) {
		// A service account's token endpoint stays with its credential.
		spec.OAuthTokenURL = cur.OAuthTokenURL
	}
	if sealed != nil {
		spec.Credential, spec.CredentialKind, spec.OAuthTokenURL = sealed.ciphertext, sealed.kind, sealed.tokenURI
	}
	u, err := a.Store.UpdateUpstream(r.Context(), id, expect, spec)
	if err != nil {
		return fromStore(err, resUpstream, id)
	}
	a.changed(r.Context())
	if u.WarmupEnabled && !cur.WarmupEnabled {
		a.warmupEnabled(r.Context(), u)
	}
	etag(w, u.SpecRevision)
	writeJSON(w, http.StatusOK, upstreamResponse(u))
	return nil
}

func hasOAuth(u *store.Upstream) bool {
	return u.Kind == store.KindVendorOAuth && u.CredentialKind == credential.OAuth && len(u.Credential) > 0
}

func (a *api) patchUpstream(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	expect, err := ifMatch(r, true)
	if err != nil {
		return err
	}
	var b UpstreamPatchBody
	if err := decode(r, &b); err != nil {
		return err
	}
	if b.WarmupEnabled == nil && b.Enabled == nil && b.Name == nil && b.BaseURL == nil && b.WarmupDialectPlugin == nil &&
		b.APIKeyEnv == nil && b.APIKeyValue == nil && b.Weight == nil && b.MaxUtilization5h == nil && b.MaxUtilization7d == nil &&
		b.MaxInFlight == nil && !b.configGiven() && !b.credentialGiven() {
		return invalid("the body names no field to change (warmup_enabled, enabled, name, base_url, warmup_dialect_plugin, api_key_env, api_key_value, weight, max_utilization_5h, max_utilization_7d, max_in_flight, region, project, model_map, or a cloud credential)")
	}
	if err := validWeight(b.Weight); err != nil {
		return err
	}
	if err := validThresholds(b.MaxUtilization5h, b.MaxUtilization7d); err != nil {
		return err
	}
	if err := validUpstreamMaxInFlight(b.MaxInFlight); err != nil {
		return err
	}
	patch := store.UpstreamPatch{Name: b.Name, BaseURL: b.BaseURL, Enabled: b.Enabled, WarmupEnabled: b.WarmupEnabled, Weight: b.Weight,
		MaxUtilization5h: b.MaxUtilization5h, MaxUtilization7d: b.MaxUtilization7d, MaxInFlight: b.MaxInFlight}
	if b.WarmupDialectPlugin != nil {
		patch.SetWarmupDialect = true
		if string(b.WarmupDialectPlugin) != "null" {
			var id string
			if json.Unmarshal(b.WarmupDialectPlugin, &id) != nil || id == "" {
				return invalid("warmup_dialect_plugin: a registry entry id or null")
			}
			patch.WarmupDialectPlugin = &id
		}
	}
	if b.Name != nil {
		if err := validName(*b.Name); err != nil {
			return err
		}
	}
	if b.BaseURL != nil {
		if err := a.location(r.Context(), "base_url", *b.BaseURL); err != nil {
			return err
		}
	}
	wasWarm := false
	if b.configGiven() || b.credentialGiven() {
		if err := a.patchCloud(r, id, &b, &patch); err != nil {
			return err
		}
	}
	if b.APIKeyEnv != nil || b.APIKeyValue != nil || (b.WarmupEnabled != nil && *b.WarmupEnabled) {
		cur, err := a.Store.GetUpstream(r.Context(), id)
		if err != nil {
			return fromStore(err, resUpstream, id)
		}
		if b.WarmupEnabled != nil && *b.WarmupEnabled {
			if !hasOAuth(cur) {
				return warmupNeedsOAuth()
			}
			wasWarm = cur.WarmupEnabled
		}
		if err := cloudRefusesAPIKey(cur.Kind, b.APIKeyEnv, b.APIKeyValue); err != nil {
			return err
		}
		if b.APIKeyEnv != nil || b.APIKeyValue != nil {
			// Sealed for the base_url the patch leaves: the new one when given.
			base := cur.BaseURL
			if b.BaseURL != nil {
				base = *b.BaseURL
			}
			if patch.Credential, err = a.credential(r, id, cur.Kind, base, b.APIKeyEnv, b.APIKeyValue, false); err != nil {
				return err
			}
			patch.CredentialKind = credential.APIKey
		}
	}
	u, err := a.Store.PatchUpstream(r.Context(), id, expect, patch)
	if err != nil {
		var se *store.SlotError
		if errors.As(err, &se) {
			return pluginErr(err, se.RegistryID)
		}
		return fromStore(err, resUpstream, id)
	}
	a.changed(r.Context())
	if b.WarmupEnabled != nil && *b.WarmupEnabled && !wasWarm {
		a.warmupEnabled(r.Context(), u)
	}
	etag(w, u.SpecRevision)
	writeJSON(w, http.StatusOK, upstreamResponse(u))
	return nil
}

// patchCloud applies a patch's cloud fields: the configuration merged
// into the stored one, a credential sealed for the base_url the patch
// leaves.
func (a *api) patchCloud(r *http.Request, id string, b *UpstreamPatchBody, patch *store.UpstreamPatch) error {
	cur, err := a.Store.GetUpstream(r.Context(), id)
	if err != nil {
		return fromStore(err, resUpstream, id)
	}
	if b.configGiven() {
		c, err := cloudConfig(cur.Kind, &b.CloudFields, cur.Cloud)
		if err != nil {
			return err
		}
		patch.Cloud = &c
	}
	base := cur.BaseURL
	if b.BaseURL != nil {
		base = *b.BaseURL
	}
	sealed, err := a.cloudCredential(r, id, cur.Kind, base, &b.CloudFields, false)
	if err != nil || sealed == nil {
		return err
	}
	patch.Credential, patch.CredentialKind, patch.OAuthTokenURL = sealed.ciphertext, sealed.kind, &sealed.tokenURI
	return nil
}

func (a *api) deleteUpstream(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	expect, err := ifMatch(r, false)
	if err != nil {
		return err
	}
	if err := a.Store.DeleteUpstream(r.Context(), id, expect); err != nil {
		return fromStore(err, resUpstream, id)
	}
	a.changed(r.Context())
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *api) setUpstreamEnabled(on bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		id := r.PathValue("id")
		expect, err := ifMatch(r, false)
		if err != nil {
			return err
		}
		u, err := a.Store.PatchUpstream(r.Context(), id, expect, store.UpstreamPatch{Enabled: &on})
		if err != nil {
			return fromStore(err, resUpstream, id)
		}
		a.changed(r.Context())
		etag(w, u.SpecRevision)
		writeJSON(w, http.StatusOK, upstreamResponse(u))
		return nil
	}
}

// UpstreamModel is one model an upstream offers, as last refreshed.
type UpstreamModel struct {
	ID                  string `json:"id"`
	DisplayName         string `json:"display_name"`
	RefreshedAtUnixSecs int64  `json:"refreshed_at_unix_secs"`
}

// upstreamModels lists the models the metadata refresh job stored.
func (a *api) upstreamModels(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, err := a.Store.GetUpstream(r.Context(), id); err != nil {
		return fromStore(err, resUpstream, id)
	}
	ms, err := a.Store.ListUpstreamModels(r.Context(), id)
	if err != nil {
		return fromStore(err, resUpstream, id)
	}
	out := make([]UpstreamModel, 0, len(ms))
	for _, m := range ms {
		out = append(out, UpstreamModel{ID: m.ModelID, DisplayName: m.DisplayName, RefreshedAtUnixSecs: m.RefreshedAt.Unix()})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
