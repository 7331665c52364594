package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// StatusResponse is the body of GET /admin/v1/status.
type StatusResponse struct {
	Status            string         `json:"status"`
	Version           string         `json:"version"`
	Driver            string         `json:"driver"`
	ReplicaID         string         `json:"replica_id"`
	ConfigGeneration  int64          `json:"config_generation"`
	Snapshot          SnapshotStatus `json:"snapshot"`
	StartedAtUnixSecs int64          `json:"started_at_unix_secs"`
	// Routing is each upstream's routing state as this replica sees it.
	Routing []UpstreamRouting `json:"routing"`
	// Admission is each principal with a max_in_flight: its requests in
	// flight and queued on this replica.
	Admission []PrincipalAdmission `json:"admission"`
	// Tracing is this replica's OpenTelemetry export (docs/tracing.md).
	Tracing TracingStatus `json:"tracing"`
}

// PrincipalAdmission is a capped principal's slots in use and queue on
// the replica answering (docs/routing.md).
type PrincipalAdmission struct {
	PrincipalID string `json:"principal_id"`
	Name        string `json:"name"`
	MaxInFlight int    `json:"max_in_flight"`
	InFlight    int    `json:"in_flight"`
	Queued      int    `json:"queued"`
}

// TracingStatus is the tracing configuration a replica runs with: the
// rest only when enabled; the export headers (a collector's credentials)
// are never shown.
type TracingStatus struct {
	Enabled  bool   `json:"enabled"`
	Protocol string `json:"protocol,omitempty"`
	// Endpoint is the receiver's URL without user information or query.
	Endpoint             string   `json:"endpoint,omitempty"`
	SamplerRatio         *float64 `json:"sampler_ratio,omitempty"`
	PropagateTraceparent *bool    `json:"propagate_traceparent,omitempty"`
}

// UpstreamRouting is one upstream's routing state (docs/routing.md).
type UpstreamRouting struct {
	UpstreamID string `json:"upstream_id"`
	Name       string `json:"name"`
	Kind       string `json:"kind"`
	Enabled    bool   `json:"enabled"`
	RoutingState
}

// RoutingState is how the built-in router sees an upstream, as the
// replica answering knows it (docs/routing.md).
type RoutingState struct {
	Weight int `json:"weight"`
	// CooldownUntilUnixSecs is when a 429/529 cooldown ends; null when
	// the upstream is not cooling down.
	CooldownUntilUnixSecs *int64 `json:"cooldown_until_unix_secs"`
	InFlight              int64  `json:"in_flight"`
	// The usage thresholds (percent, 0: none), the polled utilisation
	// (percent; 0 when unknown or reset since the poll) and whether it is
	// past a threshold (new work goes elsewhere while it can).
	MaxUtilization5h     int     `json:"max_utilization_5h"`
	MaxUtilization7d     int     `json:"max_utilization_7d"`
	Utilization5hPercent float64 `json:"utilization_5h_percent"`
	Utilization7dPercent float64 `json:"utilization_7d_percent"`
	PastThreshold        bool    `json:"past_threshold"`
	// SessionsBound counts the sessions whose requests this replica sent
	// to the upstream within the last hour.
	SessionsBound int `json:"sessions_bound"`
	// MaxInFlight is the upstream's cap (0: none); SlotsInUse the requests
	// this replica has sent it under the cap and not finished (counted
	// only while capped: from the attempt's send, where in_flight counts
	// from the response headers); Queued the requests waiting for one of
	// its slots because every upstream planned for them was at its cap.
	MaxInFlight int `json:"max_in_flight"`
	SlotsInUse  int `json:"slots_in_use"`
	Queued      int `json:"queued"`
}

// SnapshotStatus describes the snapshot this replica serves from.
type SnapshotStatus struct {
	Generation      int64 `json:"generation"`
	BuiltAtUnixSecs int64 `json:"built_at_unix_secs"`
	Upstreams       int   `json:"upstreams"`
	Principals      int   `json:"principals"`
	Keys            int   `json:"keys"`
}

// routingOf is an upstream's routing state on this replica; bound is the
// sessions per upstream (Sessions.Bound).
func (a *api) routingOf(u *store.Upstream, bound map[string]int, now time.Time) RoutingState {
	rs := RoutingState{Weight: u.Weight, MaxUtilization5h: u.MaxUtilization5h, MaxUtilization7d: u.MaxUtilization7d, SessionsBound: bound[u.ID],
		MaxInFlight: u.MaxInFlight}
	if a.UpstreamQueues != nil {
		rs.SlotsInUse, rs.Queued = a.UpstreamQueues.State(u.ID)
	}
	if a.Routing == nil {
		return rs
	}
	st := a.Routing.Read(u.ID, now)
	rs.InFlight, rs.Utilization5hPercent, rs.Utilization7dPercent = st.InFlight, st.FiveHour, st.SevenDay
	rs.PastThreshold = u.MaxUtilization5h > 0 && st.FiveHour >= float64(u.MaxUtilization5h) ||
		u.MaxUtilization7d > 0 && st.SevenDay >= float64(u.MaxUtilization7d)
	if !st.CooldownUntil.IsZero() {
		ts := st.CooldownUntil.Unix()
		rs.CooldownUntilUnixSecs = &ts
	}
	return rs
}

// sessionsBound is the sessions per upstream on this replica.
func (a *api) sessionsBound(now time.Time) map[string]int {
	if a.Sessions == nil {
		return nil
	}
	return a.Sessions.Bound(now)
}

// status and export exist to tell an operator whether the database answers,
// so any failed query there is storage_unavailable, whatever its cause.
func (a *api) status(w http.ResponseWriter, r *http.Request) error {
	if err := a.Store.Ping(r.Context()); err != nil {
		return storageUnavailable(err)
	}
	gen, err := a.Store.ConfigGeneration(r.Context())
	if err != nil {
		return storageUnavailable(err)
	}
	out := StatusResponse{Status: "ok", Version: a.Version, Driver: a.Store.Driver(), ReplicaID: a.ReplicaID,
		ConfigGeneration: gen, StartedAtUnixSecs: unix(a.StartedAt), Tracing: a.Tracing}
	if a.Runtime != nil {
		i := a.Runtime.Info()
		out.Snapshot = SnapshotStatus{Generation: i.Generation, BuiltAtUnixSecs: unix(i.BuiltAt), Upstreams: i.Upstreams, Principals: i.Principals, Keys: i.Keys}
	}
	ups, err := a.Store.ListUpstreams(r.Context())
	if err != nil {
		return storageUnavailable(err)
	}
	now := a.Clock.Now()
	out.Routing = make([]UpstreamRouting, 0, len(ups))
	bound := a.sessionsBound(now)
	for i := range ups {
		u := &ups[i]
		out.Routing = append(out.Routing, UpstreamRouting{UpstreamID: u.ID, Name: u.Name, Kind: u.Kind, Enabled: u.Enabled,
			RoutingState: a.routingOf(u, bound, now)})
	}
	ps, err := a.Store.ListPrincipals(r.Context())
	if err != nil {
		return storageUnavailable(err)
	}
	out.Admission = []PrincipalAdmission{}
	for i := range ps {
		p := &ps[i]
		if p.MaxInFlight <= 0 {
			continue
		}
		pa := PrincipalAdmission{PrincipalID: p.ID, Name: p.Name, MaxInFlight: p.MaxInFlight}
		if a.PrincipalQueues != nil {
			pa.InFlight, pa.Queued = a.PrincipalQueues.State(p.ID)
		}
		out.Admission = append(out.Admission, pa)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// ExportPrincipal is a principal with its keys and plugin chain.
type ExportPrincipal struct {
	PrincipalResponse
	Keys        []KeyResponse      `json:"keys"`
	PluginChain []PluginChainEntry `json:"plugin_chain"`
}

// ExportResponse is the body of GET /admin/v1/export: the whole
// configuration without any secret, key hash or ciphertext.
type ExportResponse struct {
	ExportedAtUnixSecs int64              `json:"exported_at_unix_secs"`
	ConfigGeneration   int64              `json:"config_generation"`
	Upstreams          []UpstreamResponse `json:"upstreams"`
	Principals         []ExportPrincipal  `json:"principals"`
}

func (a *api) export(w http.ResponseWriter, r *http.Request) error {
	cfg, err := a.Store.LoadConfig(r.Context())
	if err != nil {
		return storageUnavailable(err)
	}
	out := ExportResponse{ExportedAtUnixSecs: unix(a.Clock.Now()), ConfigGeneration: cfg.Generation,
		Upstreams: []UpstreamResponse{}, Principals: []ExportPrincipal{}}
	for i := range cfg.Upstreams {
		out.Upstreams = append(out.Upstreams, upstreamResponse(&cfg.Upstreams[i]))
	}
	for i := range cfg.Principals {
		p := &cfg.Principals[i]
		ep := ExportPrincipal{PrincipalResponse: principalResponse(p), Keys: []KeyResponse{}, PluginChain: []PluginChainEntry{}}
		keys, err := a.Store.ListKeys(r.Context(), p.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return storageUnavailable(err)
		}
		for j := range keys {
			ep.Keys = append(ep.Keys, keyResponse(&keys[j]))
		}
		for j := range cfg.Chains {
			if cfg.Chains[j].PrincipalID == p.ID {
				ep.PluginChain = append(ep.PluginChain, chainEntry(&cfg.Chains[j]))
			}
		}
		out.Principals = append(out.Principals, ep)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// RequestEventResponse is one recorded proxied request.
type RequestEventResponse struct {
	ID                       string `json:"id"`
	AtUnixSecs               int64  `json:"at_unix_secs"`
	PrincipalID              string `json:"principal_id"`
	KeyID                    string `json:"key_id"`
	UpstreamID               string `json:"upstream_id"`
	Model                    string `json:"model"`
	Stream                   bool   `json:"stream"`
	Status                   int    `json:"status"`
	ErrorType                string `json:"error_type"`
	InputTokens              int64  `json:"input_tokens"`
	OutputTokens             int64  `json:"output_tokens"`
	CacheCreationInputTokens int64  `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64  `json:"cache_read_input_tokens"`
	DurationMillis           int64  `json:"duration_ms"`
	// Spend: the 1-hour cache writes, the cost (null when the model was not
	// priced) and the catalog version that priced it.
	CacheCreation1hInputTokens int64   `json:"cache_creation_1h_input_tokens"`
	CostUSD                    *string `json:"cost_usd"`
	PriceVersion               *string `json:"price_version"`
	// FirstByteMillis is the time to first byte; null when no upstream
	// answer was relayed (and on events recorded before it was measured).
	FirstByteMillis *int64 `json:"ttfb_ms"`
	// Dialect is the API the client spoke ("messages" or "openai"); null on
	// events recorded before it was kept.
	Dialect *string `json:"dialect"`
	// UpstreamModel is the id the upstream was asked for when its
	// model_map renamed Model (the client's name); omitted otherwise.
	UpstreamModel string `json:"upstream_model,omitempty"`
}

// requestEvents lists recent proxied requests, newest first (?limit=N, at
// most 1000; ?since_unix_secs=T).
func (a *api) requestEvents(w http.ResponseWriter, r *http.Request) error {
	limit, since := 100, int64(0)
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return invalid("limit: must be 1 to 1000")
		}
		limit = n
	}
	if v := r.URL.Query().Get("since_unix_secs"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return invalid("since_unix_secs: must be a unix time in seconds")
		}
		since = n
	}
	evs, err := a.Store.ListRequestEvents(r.Context(), time.Unix(since, 0), limit)
	if err != nil {
		return fromStore(err, resPrincipal, "")
	}
	out := make([]RequestEventResponse, 0, len(evs))
	for _, e := range evs {
		out = append(out, requestEventResponse(e)) // the request log's conversion (requestlog.go)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// PriceCatalogResponse is this replica's installed price catalog.
type PriceCatalogResponse struct {
	ReplicaID           string          `json:"replica_id"`
	InstalledVersion    *string         `json:"installed_version"`
	InstalledAtUnixSecs *int64          `json:"installed_at_unix_secs"`
	Catalog             json.RawMessage `json:"catalog"`
}

func (a *api) priceCatalog(w http.ResponseWriter, r *http.Request) error {
	out := PriceCatalogResponse{ReplicaID: a.ReplicaID, Catalog: json.RawMessage("null")}
	if a.PriceCatalog != nil {
		if v, at, body, ok := a.PriceCatalog.Installed(); ok {
			ts := at.Unix()
			out.InstalledVersion, out.InstalledAtUnixSecs, out.Catalog = &v, &ts, body
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// UsageRollupResponse is one hour of usage of a principal, upstream and model.
type UsageRollupResponse struct {
	BucketStartUnixSecs      int64  `json:"bucket_start_unix_secs"`
	PrincipalID              string `json:"principal_id"`
	UpstreamID               string `json:"upstream_id"`
	Model                    string `json:"model"`
	Requests                 int64  `json:"requests"`
	Errors                   int64  `json:"errors"`
	InputTokens              int64  `json:"input_tokens"`
	OutputTokens             int64  `json:"output_tokens"`
	CacheCreationInputTokens int64  `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64  `json:"cache_read_input_tokens"`
	// Spend (see UsageTotals).
	CacheCreation1hInputTokens int64  `json:"cache_creation_1h_input_tokens"`
	CostUSD                    string `json:"cost_usd"`
	CostNanos                  int64  `json:"cost_nanos"`
	UnpricedRequests           int64  `json:"unpriced_requests"`
}

// usageRollups serves the hourly rollups the usage_rollup job computed
// (since_unix_secs, default the last 24 hours), oldest first.
func (a *api) usageRollups(w http.ResponseWriter, r *http.Request) error {
	since := a.Clock.Now().Add(-24 * time.Hour).Unix()
	if v := r.URL.Query().Get("since_unix_secs"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return invalid("since_unix_secs: must be a unix time in seconds")
		}
		since = n
	}
	rs, err := a.Store.ListUsageRollups(r.Context(), time.Unix(since, 0))
	if err != nil {
		return fromStore(err, resPrincipal, "")
	}
	out := make([]UsageRollupResponse, 0, len(rs))
	for _, u := range rs {
		out = append(out, UsageRollupResponse{BucketStartUnixSecs: u.BucketStart.Unix(), PrincipalID: u.PrincipalID, UpstreamID: u.UpstreamID,
			Model: u.Model, Requests: u.Requests, Errors: u.Errors, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			CacheCreationInputTokens: u.CacheCreationInputTokens, CacheReadInputTokens: u.CacheReadInputTokens,
			CacheCreation1hInputTokens: u.CacheCreation1hInputTokens, CostUSD: formatCost(u.CostNanos), CostNanos: u.CostNanos,
			UnpricedRequests: u.UnpricedRequests})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
