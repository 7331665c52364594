package admin

import (
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/quota"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// liveHours is how many recent hours are computed from request events at
// read time instead of read from the rollups: the usage_rollup job runs
// every few minutes and recomputes the last two hours, so the rollup of
// the current and the previous hour may lag the events.
const liveHours = 2

// usage returns hourly usage of [from, to): rollups for the hours before
// the live ones, a read-time aggregation of request events for the rest.
func (a *api) usage(r *http.Request, from, to time.Time) ([]store.UsageRollup, time.Time, error) {
	live := a.Clock.Now().UTC().Truncate(time.Hour).Add(-(liveHours - 1) * time.Hour)
	if live.Before(from) {
		live = from
	}
	var out []store.UsageRollup
	if from.Before(live) {
		rs, err := a.Store.ListUsageRollups(r.Context(), from)
		if err != nil {
			return nil, live, fromStore(err, resPrincipal, "")
		}
		for _, u := range rs {
			if u.BucketStart.Before(live) {
				out = append(out, u)
			}
		}
	}
	agg, err := a.Store.AggregateRequestEvents(r.Context(), live, to)
	if err != nil {
		return nil, live, fromStore(err, resPrincipal, "")
	}
	return append(out, agg...), live, nil
}

// TrafficSeries is the hourly traffic of one principal through one upstream;
// every array has one entry per hour of the range, zero where nothing ran.
type TrafficSeries struct {
	PrincipalID   string  `json:"principal_id"`
	PrincipalName string  `json:"principal_name"`
	UpstreamID    string  `json:"upstream_id"`
	UpstreamName  string  `json:"upstream_name"`
	Requests      []int64 `json:"requests"`
	Errors        []int64 `json:"errors"`
	Tokens        []int64 `json:"tokens"`
	// CostNanos is each hour's cost of the priced requests, nano-dollars.
	CostNanos []int64 `json:"cost_nanos"`
}

// TrafficResponse is the body of GET /admin/v1/traffic.
type TrafficResponse struct {
	FromUnixSecs int64 `json:"from_unix_secs"`
	ToUnixSecs   int64 `json:"to_unix_secs"`
	BucketSecs   int64 `json:"bucket_secs"`
	// LiveFromUnixSecs is where the read-time aggregation of request events
	// takes over from the rollups.
	LiveFromUnixSecs int64           `json:"live_from_unix_secs"`
	Series           []TrafficSeries `json:"series"`
}

// traffic serves hourly requests, errors and tokens per principal and
// upstream over the last ?hours= hours (1 to 168, default 24), the current
// hour included and live.
func (a *api) traffic(w http.ResponseWriter, r *http.Request) error {
	hours := 24
	for k := range r.URL.Query() {
		if k != "hours" {
			return invalid("%s: unknown query parameter (accepted: hours)", k)
		}
	}
	if v := r.URL.Query().Get("hours"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 168 {
			return invalid("hours: must be 1 to 168, got %q", v)
		}
		hours = n
	}
	to := a.Clock.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	from := to.Add(-time.Duration(hours) * time.Hour)
	rows, live, err := a.usage(r, from, to)
	if err != nil {
		return err
	}
	names, err := a.names(r)
	if err != nil {
		return err
	}
	out := TrafficResponse{FromUnixSecs: from.Unix(), ToUnixSecs: to.Unix(), BucketSecs: 3600, LiveFromUnixSecs: live.Unix(), Series: []TrafficSeries{}}
	index := map[[2]string]int{}
	for _, u := range rows {
		i := int(u.BucketStart.Sub(from) / time.Hour)
		if i < 0 || i >= hours {
			continue
		}
		k := [2]string{u.PrincipalID, u.UpstreamID}
		s, ok := index[k]
		if !ok {
			s = len(out.Series)
			index[k] = s
			out.Series = append(out.Series, TrafficSeries{PrincipalID: u.PrincipalID, PrincipalName: names.principal(u.PrincipalID),
				UpstreamID: u.UpstreamID, UpstreamName: names.upstream(u.UpstreamID),
				Requests: make([]int64, hours), Errors: make([]int64, hours), Tokens: make([]int64, hours), CostNanos: make([]int64, hours)})
		}
		out.Series[s].Requests[i] += u.Requests
		out.Series[s].Errors[i] += u.Errors
		out.Series[s].Tokens[i] += u.InputTokens + u.OutputTokens
		out.Series[s].CostNanos[i] += u.CostNanos
	}
	sort.SliceStable(out.Series, func(i, j int) bool {
		a, b := out.Series[i], out.Series[j]
		if a.PrincipalName != b.PrincipalName {
			return a.PrincipalName < b.PrincipalName
		}
		return a.UpstreamName < b.UpstreamName
	})
	writeJSON(w, http.StatusOK, out)
	return nil
}

// UsageTotals are summed requests, tokens and cost.
type UsageTotals struct {
	Requests                 int64 `json:"requests"`
	Errors                   int64 `json:"errors"`
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	// CacheCreation1hInputTokens is the 1-hour part of the cache writes.
	CacheCreation1hInputTokens int64 `json:"cache_creation_1h_input_tokens"`
	CacheReadInputTokens       int64 `json:"cache_read_input_tokens"`
	// CostUSD is the priced requests' cost in dollars, an exact decimal
	// string ("1.234567"); CostNanos the same in nano-dollars.
	CostUSD   string `json:"cost_usd"`
	CostNanos int64  `json:"cost_nanos"`
	// UnpricedRequests had no price (model not in the catalog): their
	// cost is not in CostUSD.
	UnpricedRequests int64 `json:"unpriced_requests"`
}

func (t *UsageTotals) add(u store.UsageRollup) { t.addCounts(u.UsageCounts) }

func (t *UsageTotals) addCounts(u store.UsageCounts) {
	t.Requests += u.Requests
	t.Errors += u.Errors
	t.InputTokens += u.InputTokens
	t.OutputTokens += u.OutputTokens
	t.CacheCreationInputTokens += u.CacheCreationInputTokens
	t.CacheCreation1hInputTokens += u.CacheCreation1hInputTokens
	t.CacheReadInputTokens += u.CacheReadInputTokens
	t.CostNanos += u.CostNanos
	t.UnpricedRequests += u.UnpricedRequests
	t.CostUSD = formatCost(t.CostNanos)
}

// ModelUsage is today's usage of one model.
type ModelUsage struct {
	Model string `json:"model"`
	UsageTotals
}

// PrincipalUsage is today's usage of one principal.
type PrincipalUsage struct {
	PrincipalID   string `json:"principal_id"`
	PrincipalName string `json:"principal_name"`
	UsageTotals
}

// RecentTraffic is the last hour's rate, errors and latency.
type RecentTraffic struct {
	WindowSecs int64 `json:"window_secs"`
	Requests   int64 `json:"requests"`
	Errors     int64 `json:"errors"`
	// ErrorRate is Errors/Requests (status 400 and above); null without requests.
	ErrorRate *float64 `json:"error_rate"`
	// RequestsPerMinute is over the last five minutes.
	RequestsPerMinute float64 `json:"requests_per_minute"`
	// LatencyMillis are percentiles of the whole request's duration over the
	// newest LatencySample events of the window; null without events.
	LatencyP50Millis *int64 `json:"latency_p50_ms"`
	LatencyP95Millis *int64 `json:"latency_p95_ms"`
	LatencySample    int    `json:"latency_sample"`
	// FirstByteMillis are percentiles of the time to first byte over the
	// same sample's events that relayed an upstream answer (refusals and
	// unreachable upstreams have none); null without such events.
	FirstByteP50Millis *int64 `json:"ttfb_p50_ms"`
	FirstByteP95Millis *int64 `json:"ttfb_p95_ms"`
	FirstByteSample    int    `json:"ttfb_sample"`
}

// UpstreamHealth is one upstream's state as an operator scans it.
type UpstreamHealth struct {
	ID                   string  `json:"id"`
	Name                 string  `json:"name"`
	Kind                 string  `json:"kind"`
	Enabled              bool    `json:"enabled"`
	CredentialMode       *string `json:"credential_mode"`
	LastApplyAtUnixSecs  *int64  `json:"last_apply_at_unix_secs"`
	LastApplyError       *string `json:"last_apply_error"`
	WarmupEnabled        bool    `json:"warmup_enabled"`
	LastWarmupAtUnixSecs *int64  `json:"last_warmup_at_unix_secs"`
	// Routable and UnroutableReason: as the upstream's status.
	Routable         bool    `json:"routable"`
	UnroutableReason *string `json:"unroutable_reason"`
	// Limits are the stored usage windows and coupon of a vendor_oauth
	// upstream (as GET …/limit-resets); null for other kinds.
	Limits *LimitResetObservation `json:"limits"`
	// Routing state (docs/routing.md) as the replica answering sees it.
	RoutingState
}

// OverviewResponse is the body of GET /admin/v1/overview.
type OverviewResponse struct {
	NowUnixSecs      int64            `json:"now_unix_secs"`
	LastHour         RecentTraffic    `json:"last_hour"`
	TodaySinceUnix   int64            `json:"today_since_unix_secs"`
	TodayByModel     []ModelUsage     `json:"today_by_model"`
	TodayByPrincipal []PrincipalUsage `json:"today_by_principal"`
	Snapshot         *SnapshotStatus  `json:"snapshot"`
	Upstreams        []UpstreamHealth `json:"upstreams"`
}

// latencySample bounds the events read for the latency percentiles.
const latencySample = 1000

// overview answers "is it healthy, who used what today" in one read: the
// last hour's rate, errors and latency, today's tokens per model and per
// principal (UTC day, current hour live), and every upstream's state.
func (a *api) overview(w http.ResponseWriter, r *http.Request) error {
	if len(r.URL.Query()) > 0 {
		return invalid("this endpoint takes no query parameters")
	}
	now := a.Clock.Now().UTC()
	out := OverviewResponse{NowUnixSecs: now.Unix(), TodayByModel: []ModelUsage{}, TodayByPrincipal: []PrincipalUsage{}, Upstreams: []UpstreamHealth{}}

	// The last hour: exact counts from an aggregation, latency from a sample.
	hour, err := a.Store.AggregateRequestEvents(r.Context(), now.Add(-time.Hour), now.Add(time.Second))
	if err != nil {
		return fromStore(err, resPrincipal, "")
	}
	five, err := a.Store.AggregateRequestEvents(r.Context(), now.Add(-5*time.Minute), now.Add(time.Second))
	if err != nil {
		return fromStore(err, resPrincipal, "")
	}
	var h, f UsageTotals
	for _, u := range hour {
		h.add(u)
	}
	for _, u := range five {
		f.add(u)
	}
	out.LastHour = RecentTraffic{WindowSecs: 3600, Requests: h.Requests, Errors: h.Errors, RequestsPerMinute: float64(f.Requests) / 5}
	if h.Requests > 0 {
		rate := float64(h.Errors) / float64(h.Requests)
		out.LastHour.ErrorRate = &rate
	}
	evs, err := a.Store.SearchRequestEvents(r.Context(), store.EventQuery{Since: now.Add(-time.Hour), Limit: latencySample})
	if err != nil {
		return fromStore(err, resPrincipal, "")
	}
	if len(evs) > 0 {
		ms := make([]int64, len(evs))
		var fb []int64
		for i, e := range evs {
			ms[i] = e.DurationMillis
			if e.FirstByteMillis > 0 {
				fb = append(fb, e.FirstByteMillis)
			}
		}
		sort.Slice(ms, func(i, j int) bool { return ms[i] < ms[j] })
		p50, p95 := percentile(ms, 50), percentile(ms, 95)
		out.LastHour.LatencyP50Millis, out.LastHour.LatencyP95Millis, out.LastHour.LatencySample = &p50, &p95, len(ms)
		if len(fb) > 0 {
			sort.Slice(fb, func(i, j int) bool { return fb[i] < fb[j] })
			f50, f95 := percentile(fb, 50), percentile(fb, 95)
			out.LastHour.FirstByteP50Millis, out.LastHour.FirstByteP95Millis, out.LastHour.FirstByteSample = &f50, &f95, len(fb)
		}
	}

	// Today (UTC).
	day := now.Truncate(24 * time.Hour)
	out.TodaySinceUnix = day.Unix()
	rows, _, err := a.usage(r, day, now.Truncate(time.Hour).Add(time.Hour))
	if err != nil {
		return err
	}
	names, err := a.names(r)
	if err != nil {
		return err
	}
	byModel, byPrincipal := map[string]*UsageTotals{}, map[string]*UsageTotals{}
	for _, u := range rows {
		for _, m := range []struct {
			agg map[string]*UsageTotals
			key string
		}{{byModel, u.Model}, {byPrincipal, u.PrincipalID}} {
			t := m.agg[m.key]
			if t == nil {
				t = &UsageTotals{}
				m.agg[m.key] = t
			}
			t.add(u)
		}
	}
	for k, t := range byModel {
		out.TodayByModel = append(out.TodayByModel, ModelUsage{Model: k, UsageTotals: *t})
	}
	sort.Slice(out.TodayByModel, func(i, j int) bool { return out.TodayByModel[i].Model < out.TodayByModel[j].Model })
	for k, t := range byPrincipal {
		out.TodayByPrincipal = append(out.TodayByPrincipal, PrincipalUsage{PrincipalID: k, PrincipalName: names.principal(k), UsageTotals: *t})
	}
	sort.Slice(out.TodayByPrincipal, func(i, j int) bool {
		return out.TodayByPrincipal[i].PrincipalName < out.TodayByPrincipal[j].PrincipalName
	})

	if a.Runtime != nil {
		i := a.Runtime.Info()
		out.Snapshot = &SnapshotStatus{Generation: i.Generation, BuiltAtUnixSecs: unix(i.BuiltAt), Upstreams: i.Upstreams, Principals: i.Principals, Keys: i.Keys}
	}
	ups, err := a.Store.ListUpstreams(r.Context())
	if err != nil {
		return fromStore(err, resUpstream, "")
	}
	bound := a.sessionsBound(now)
	for i := range ups {
		u := &ups[i]
		ur := upstreamResponse(u)
		hl := UpstreamHealth{ID: u.ID, Name: u.Name, Kind: u.Kind, Enabled: u.Enabled, CredentialMode: ur.CredentialMode,
			LastApplyAtUnixSecs: ur.Status.LastApplyAtUnixSecs, LastApplyError: ur.Status.LastApplyError,
			WarmupEnabled: u.WarmupEnabled, LastWarmupAtUnixSecs: ur.Status.LastWarmupAtUnixSecs,
			Routable: ur.Status.Routable, UnroutableReason: ur.Status.UnroutableReason, RoutingState: a.routingOf(u, bound, now)}
		if u.Kind == store.KindVendorOAuth {
			v := &quota.View{}
			if a.OAuth != nil {
				if v, err = a.OAuth.Observe(r.Context(), u); err != nil {
					return fromStore(err, resUpstream, u.ID)
				}
			}
			obs := observationResponse(u.ID, v, now)
			hl.Limits = &obs
		}
		out.Upstreams = append(out.Upstreams, hl)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []int64, p int) int64 {
	rank := (p*len(sorted) + 99) / 100
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}
