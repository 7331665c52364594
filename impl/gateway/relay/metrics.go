package relay

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/cloud"
	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/proxyerr"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Metrics are the proxy path's Prometheus series. Those every request
// updates (by code, duration, time to first byte) are kept per processor
// (requestSeries), so a request's adds stay in its core's cache. The
// series labelled by principal, upstream and model are fed from the usage
// hand-off (ObserveUsage, on the recorder's goroutine), off the request
// path; docs/operations.md gives their cardinality.
type Metrics struct {
	// cloud counts what Bedrock and Vertex answered.
	cloud     *cloud.Metrics
	series    *requestSeries
	failovers prometheus.Counter
	// cooldowns counts upstreams taken out of routing by a 429/529;
	// allCooling, requests refused because every candidate was.
	cooldowns, allCooling prometheus.Counter
	// affinityMoves counts sessions moved off the upstream they were on.
	affinityMoves prometheus.Counter
	// queueRefused counts requests refused past a principal's
	// max_in_flight (queue full or wait over); queueWait, the waits.
	queueRefused prometheus.Counter
	queueWait    prometheus.Histogram
	// upstreamCap counts what an upstream's max_in_flight did to a
	// request: an attempt spilled past it, a request queued for it, a
	// request refused after queueing.
	upstreamCap [3]prometheus.Counter
	// Resilience of the proxy path (docs/resilience.md).
	headerTimeouts, idleTimeouts prometheus.Counter
	interrupted                  prometheus.Counter
	lazyRefreshes                prometheus.Counter
	limitedBy                    [4]prometheus.Counter // by limits.Kind

	upstreamErrors *prometheus.CounterVec
	// byUpstream caches each upstream's error children under its id,
	// re-resolved when the upstream's name changes.
	byUpstream sync.Map // upstream id -> *upstreamErrorChildren

	usageRequests, usageTokens *prometheus.CounterVec
	usage                      usageCache

	// openAI counts requests in OpenAI's dialect by endpoint (chat
	// completions, models) and outcome (ok, error).
	openAI [2][2]prometheus.Counter
}

// ErrorClass is what went wrong with an upstream attempt.
type ErrorClass uint8

// The upstream error classes (label class of svc_proxy_upstream_errors_total).
const (
	ErrConnect     ErrorClass = iota // no connection, or it broke before the response headers
	ErrTimeout                       // no response headers in time, or the stream went idle
	ErrRateLimited                   // 429
	ErrOverloaded                    // 529
	Err5xx                           // another 5xx
	ErrAuth                          // 401 or 403: the upstream refused its credential
	ErrProtocol                      // a response cut short or not in the provider's shape
	numErrorClasses
)

var errorClassNames = [numErrorClasses]string{"connect", "timeout", "429", "529", "5xx", "auth", "protocol"}

type upstreamErrorChildren struct {
	name string
	c    [numErrorClasses]prometheus.Counter
}

// Usage labels: the token types and status classes.
var (
	tokenTypes   = [4]string{"input", "output", "cache_read", "cache_write"}
	statusGroups = [3]string{"2xx", "4xx", "5xx"} // 1xx and 3xx do not reach the event log
)

// OtherModel is the model label of a model neither the principal's allowed
// list names exactly nor the price catalog knows: clients choose model
// strings, and each would otherwise be a new series.
const OtherModel = "other"

// NoUpstream is the upstream label of a request refused before dispatch.
const NoUpstream = "none"

// cloudMetrics is m's cloud counters; nil without metrics.
func (m *Metrics) cloudMetrics() *cloud.Metrics {
	if m == nil {
		return nil
	}
	return m.cloud
}

// NewMetrics registers the proxy metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		cloud: cloud.NewMetrics(reg),
		series: newRequestSeries("Time from request arrival to the last byte relayed.",
			"Time from request arrival to the first byte of the upstream's answer relayed to the client (Messages requests that reached an upstream).",
			prometheus.ExponentialBuckets(0.001, 2.5, histBuckets), prometheus.ExponentialBuckets(0.005, 2, histBuckets)),
		failovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svc_proxy_upstream_failovers_total",
			Help: "Times a request moved on to the next candidate upstream.",
		}),
	}
	m.cooldowns = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svc_proxy_upstream_cooldowns_total",
		Help: "Times a 429 or 529 took an upstream out of routing (or extended its cooldown) on this replica.",
	})
	m.allCooling = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svc_proxy_all_upstreams_cooling_total",
		Help: "Requests answered 429 by the proxy itself because every candidate upstream was cooling down.",
	})
	m.affinityMoves = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svc_proxy_affinity_moves_total",
		Help: "Sessions this replica moved off the upstream they were on (it could not take them: cooling down, out of routing or past a usage threshold).",
	})
	m.queueRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svc_proxy_queue_refused_total",
		Help: "Requests answered 429 past their principal's max_in_flight: the queue was full or the wait ran out.",
	})
	upstreamCap := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_proxy_upstream_cap_total",
		Help: "Requests an upstream's max_in_flight acted on, by what it did: spilled (sent to the next upstream of the plan), queued (every planned upstream was at its cap), refused (answered 429: the queue was full or the wait ran out).",
	}, []string{"reason"})
	for i, r := range [...]string{capSpilled: "spilled", capQueued: "queued", capRefused: "refused"} {
		m.upstreamCap[i] = upstreamCap.WithLabelValues(r)
	}
	m.queueWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "svc_proxy_queue_wait_seconds",
		Help:    "Time requests past their principal's max_in_flight waited in its queue (admitted or not).",
		Buckets: prometheus.ExponentialBuckets(0.005, 3, 10),
	})
	limited := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_proxy_principal_limited_total",
		Help: "Requests refused with 429 by a principal's default_limits, by limit kind.",
	}, []string{"kind"})
	for _, k := range []limits.Kind{limits.Requests, limits.Tokens, limits.USD} {
		m.limitedBy[k] = limited.WithLabelValues(k.String())
	}
	timeouts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_proxy_upstream_timeouts_total",
		Help: "Upstream responses given up on: phase headers (no response headers within the header timeout; the request fails over) or idle (nothing read within the idle deadline).",
	}, []string{"phase"})
	m.headerTimeouts, m.idleTimeouts = timeouts.WithLabelValues("headers"), timeouts.WithLabelValues("idle")
	m.interrupted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svc_proxy_upstream_interrupted_total",
		Help: "Upstream responses cut or gone idle after their headers: the client got an error event (streams) or a 502.",
	})
	m.lazyRefreshes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svc_proxy_lazy_refresh_started_total",
		Help: "Lazy OAuth token refreshes the proxy path started (a request met an expired or refused token).",
	})
	m.upstreamErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_proxy_upstream_errors_total",
		Help: "Failed upstream attempts by upstream name and class: connect, timeout, 429, 529, 5xx, auth (401/403) or protocol (response cut short). Attempts that failed over count too, and streams the upstream ended with an error event, classed by its error type (rate_limit_error 429, overloaded_error 529, api_error 5xx, authentication_error and permission_error auth, others protocol).",
	}, []string{"upstream", "class"})
	m.usageRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_proxy_usage_requests_total",
		Help: "Recorded requests (Messages and count_tokens) by principal, upstream and model name (model \"other\" when neither the principal's allowed list nor the price catalog names it; upstream \"none\" when refused before dispatch) and status class.",
	}, []string{"principal", "upstream", "model", "status_class"})
	m.usageTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_proxy_usage_tokens_total",
		Help: "Tokens of recorded requests by principal, upstream, model (as svc_proxy_usage_requests_total) and type: input, output, cache_read, cache_write.",
	}, []string{"principal", "upstream", "model", "type"})
	m.usage.entries = map[usageKey]*usageChildren{}
	openAI := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_proxy_openai_requests_total",
		Help: "Requests in OpenAI's dialect (docs/openai.md) by endpoint (chat_completions, models) and outcome (ok; error: an error status or a stream that ended with an error). They count in svc_proxy_requests_total too.",
	}, []string{"endpoint", "outcome"})
	for i, ep := range []string{"chat_completions", "models"} {
		for j, out := range []string{"ok", "error"} {
			m.openAI[i][j] = openAI.WithLabelValues(ep, out)
		}
	}
	reg.MustRegister(m.series, m.failovers, m.cooldowns, m.allCooling, m.affinityMoves, m.queueRefused, m.queueWait, upstreamCap, limited, timeouts, m.interrupted, m.lazyRefreshes,
		m.upstreamErrors, m.usageRequests, m.usageTokens, openAI)
	return m
}

func (m *Metrics) limited(k limits.Kind) {
	if int(k) < len(m.limitedBy) && m.limitedBy[k] != nil {
		m.limitedBy[k].Inc()
	}
}

func (m *Metrics) observe(code int, d time.Duration) { m.series.request(code, d.Seconds()) }

// upstreamError counts a failed attempt at up. The children are resolved
// once per upstream (and name), so the steady state allocates nothing.
func (m *Metrics) upstreamError(up *snapshot.Upstream, class ErrorClass) {
	if m == nil || up == nil || class >= numErrorClasses {
		return
	}
	m.upstreamErrorChildren(up).c[class].Inc()
}

// upstreamErrorChildren resolves (once per upstream id and name) the error
// series of up, every class at zero until counted: a dashboard then shows
// an upstream without errors as 0, not as no data.
func (m *Metrics) upstreamErrorChildren(up *snapshot.Upstream) *upstreamErrorChildren {
	v, ok := m.byUpstream.Load(up.ID)
	if ok && v.(*upstreamErrorChildren).name == up.Name {
		return v.(*upstreamErrorChildren)
	}
	ch := &upstreamErrorChildren{name: up.Name}
	for i := range ch.c {
		ch.c[i] = m.upstreamErrors.WithLabelValues(up.Name, errorClassNames[i])
	}
	m.byUpstream.Store(up.ID, ch)
	return ch
}

// statusErrorClass classifies an upstream's error status; ok is false for
// statuses that are not the upstream's failure (the client's 4xx).
func statusErrorClass(code int) (ErrorClass, bool) {
	switch {
	case code == 429:
		return ErrRateLimited, true
	case code == 529:
		return ErrOverloaded, true
	case code == 401 || code == 403:
		return ErrAuth, true
	case code >= 500:
		return Err5xx, true
	}
	return 0, false
}

// errorEventClass is the class of an error event an upstream ends a
// stream with, by its error type, as statusErrorClass classes a status.
func errorEventClass(typ string) ErrorClass {
	switch typ {
	case proxyerr.TypeRateLimit:
		return ErrRateLimited
	case proxyerr.TypeOverloaded:
		return ErrOverloaded
	case proxyerr.TypeAuthentication, proxyerr.TypePermission:
		return ErrAuth
	case proxyerr.TypeAPI:
		return Err5xx
	}
	return ErrProtocol
}

func (m *Metrics) firstByte(d time.Duration) {
	if m != nil {
		m.series.firstByte(d.Seconds())
	}
}

type usageKey struct{ principal, upstream, model string }

type usageChildren struct {
	requests [len(statusGroups)]prometheus.Counter
	tokens   [len(tokenTypes)]prometheus.Counter
}

// usageCache holds the resolved children per (principal, upstream, folded
// model) of one snapshot generation: names can change with a generation,
// so the cache starts over then. The model is folded before it is a key,
// so clients cannot grow the cache with made-up model names.
type usageCache struct {
	mu         sync.Mutex // the recorder calls from one goroutine: uncontended
	generation int64
	entries    map[usageKey]*usageChildren
}

// ModelKnown reports whether the price catalog lists a model.
type ModelKnown func(model string) bool

// ObserveUsage counts a recorded request and its tokens under bounded
// labels: the principal's and upstream's names from snap, the model when
// the principal's allowed list names it exactly or known says the catalog
// lists it, else OtherModel. It runs on the usage recorder's goroutine.
func (m *Metrics) ObserveUsage(ev store.RequestEvent, snap *snapshot.Snapshot, known ModelKnown) {
	if m == nil || snap == nil {
		return
	}
	m.usage.mu.Lock()
	defer m.usage.mu.Unlock()
	if m.usage.generation != snap.Generation {
		clear(m.usage.entries)
		m.usage.generation = snap.Generation
	}
	p := snap.Principal(ev.PrincipalID)
	model := OtherModel
	if (p != nil && p.NamesModel(ev.Model)) || (known != nil && known(ev.Model)) {
		model = ev.Model
	}
	k := usageKey{ev.PrincipalID, ev.UpstreamID, model}
	ch := m.usage.entries[k]
	if ch == nil {
		principal, upstream := "unknown", NoUpstream
		if p != nil {
			principal = p.Name
		}
		if ev.UpstreamID != "" {
			upstream = "unknown"
			if u := snap.Upstream(ev.UpstreamID); u != nil {
				upstream = u.Name
				m.upstreamErrorChildren(u) // its error series start at zero
			}
		}
		ch = &usageChildren{}
		for i, g := range statusGroups {
			ch.requests[i] = m.usageRequests.WithLabelValues(principal, upstream, model, g)
		}
		for i, t := range tokenTypes {
			ch.tokens[i] = m.usageTokens.WithLabelValues(principal, upstream, model, t)
		}
		m.usage.entries[k] = ch
	}
	switch {
	case ev.Status >= 500:
		ch.requests[2].Inc()
	case ev.Status >= 400:
		ch.requests[1].Inc()
	default:
		ch.requests[0].Inc()
	}
	for i, n := range [len(tokenTypes)]int64{ev.InputTokens, ev.OutputTokens, ev.CacheReadInputTokens, ev.CacheCreationInputTokens} {
		if n > 0 {
			ch.tokens[i].Add(float64(n))
		}
	}
}

// ObserveQueueWait records a wait in a principal's queue
// (admission.Options.Observe).
func (m *Metrics) ObserveQueueWait(waited time.Duration, _ bool) {
	if m != nil {
		m.queueWait.Observe(waited.Seconds())
	}
}

// NewQueueCollector reports the requests waiting in the principals'
// queues at scrape time.
func NewQueueCollector(c *admission.Controller) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "svc_proxy_queued_requests",
		Help: "Requests this replica holds waiting for a slot under their principal's max_in_flight.",
	}, func() float64 { return float64(c.Queued()) })
}
