// Package relay is the proxy path: it authenticates a principal's key against
// the current snapshot, checks the model, picks an upstream, swaps in the
// upstream's credential and streams the provider's answer back unbuffered.
package relay

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/affinity"
	"github.com/pillarhq/pillar/impl/gateway/capture"
	"github.com/pillarhq/pillar/impl/gateway/cloud"
	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/money"
	"github.com/pillarhq/pillar/impl/gateway/openai"
	"github.com/pillarhq/pillar/impl/gateway/plugins"
	"github.com/pillarhq/pillar/impl/gateway/proxyerr"
	"github.com/pillarhq/pillar/impl/gateway/routing"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/usage"
	"github.com/pillarhq/pillar/impl/service"
)

// Source yields the snapshot in force.
type Source interface{ Current() *snapshot.Snapshot }

// Recorder receives finished requests.
type Recorder interface{ Record(usage.Pending) }

// Exchange is one finished Messages exchange of a principal with keep-alive
// configured, handed to the Observer after the response was written.
type Exchange struct {
	PrincipalID string
	KeepAlive   json.RawMessage
	UpstreamID  string
	Request     []byte
	Status      int
	// Anchor is the response-begin moment: message_start of a stream, the
	// response headers otherwise, the dispatch time as a fallback.
	Anchor time.Time
	Body   []byte
	SSE    [][]byte
}

// Observer receives finished exchanges (prompt-cache keep-alive). Observe
// must not block.
type Observer interface{ Observe(Exchange) }

// Limiter enforces principals' default_limits (limits.Limiter) and reports
// where the principal stands for its anthropic-ratelimit-* headers.
type Limiter interface {
	AdmitStatus(principal string, ls []limits.Limit, st *limits.Status) *limits.Refusal
}

// Options configures a Handler.
type Options struct {
	Source   Source
	Recorder Recorder
	Observer Observer // optional
	// Plugins runs WASM router plugins of dynamic chains (optional; without
	// it such chains fail closed).
	Plugins PluginRouter
	// Limiter enforces default_limits on /v1/messages (optional: without
	// it limits are not enforced).
	Limiter   Limiter
	Transport http.RoundTripper // default: a tuned http.Transport
	Metrics   *Metrics          // optional
	// Logger (nil: discards) and Clock (nil: the real clock) become the
	// Handler's service.Base.
	Logger *slog.Logger
	Clock  clock.Clock

	// Deadlines and bounds of the proxy path (docs/resilience.md); zero
	// means the Default* constant of the same name.
	HeaderTimeout          time.Duration
	NonStreamHeaderTimeout time.Duration
	IdleTimeout            time.Duration
	BodyReadTimeout        time.Duration
	MaxBodyBytesInFlight   int64
	// Refresher is asked for a lazy refresh of an OAuth upstream's token
	// when a request meets it expired or refused (optional); it owns the
	// deduplication and the cooldown.
	Refresher TokenRefresher
	// Board is the upstreams' live routing state: cooldowns and requests
	// in flight (optional: without it nothing cools down).
	Board *routing.Board
	// MaxAttempts bounds how many upstreams one request is sent to,
	// failover included (zero: DefaultMaxAttempts; at most 16).
	MaxAttempts int
	// Affinity keeps a session's requests on one upstream (optional:
	// without it sessions are spread like other requests).
	Affinity *affinity.Table
	// Admission enforces principals' max_in_flight with a queue
	// (optional: without it no cap is enforced).
	Admission *admission.Controller
	// UpstreamCaps enforces upstreams' max_in_flight with a queue
	// (optional: without it no upstream cap is enforced).
	UpstreamCaps *admission.Controller
	// Tracer traces requests and their attempts (optional: nil traces
	// nothing, at no cost); Propagate sends the attempt's traceparent
	// upstream, TraceCost prices a traced request's span.
	Tracer    trace.Tracer
	Propagate bool
	TraceCost func(*store.RequestEvent) (money.Nanos, bool)
	// Capture receives the exchanges of principals with capture on
	// (optional: without it nothing is captured); CaptureLimit caps each
	// body captured (zero: capture.DefaultLimit).
	Capture      Capturer
	CaptureLimit int
}

// Handler serves /v1/messages and /v1/messages/count_tokens.
type Handler struct {
	src     Source
	rec     Recorder
	obs     Observer
	plugins PluginRouter
	limiter Limiter
	// transport sends outbound requests directly (no http.Client: its
	// redirect and header-copy machinery costs allocations per request,
	// and redirects must not be followed anyway: the credential must never
	// be replayed to another location).
	transport http.RoundTripper
	// clouds are the transports of bedrock and vertex upstreams, around
	// transport.
	clouds *cloud.Pool
	// cloudsAt is the snapshot clouds was last pruned to.
	cloudsAt atomic.Pointer[snapshot.Snapshot]
	metrics  *Metrics
	service.Base
	// mono times the attempts' deadlines on Clock (deadline.go).
	mono mono

	headerTimeout, nonStreamHeaderTimeout, idleTimeout, bodyReadTimeout time.Duration
	refresh                                                             TokenRefresher // asked for lazy OAuth refreshes (nil: none)
	board                                                               *routing.Board
	affinity                                                            *affinity.Table
	admission                                                           *admission.Controller
	caps                                                                *admission.Controller // upstreams' max_in_flight
	randN                                                               func(uint64) uint64   // the spreading's draw; tests replace it
	maxAttempts                                                         int

	tracer    trace.Tracer // nil: tracing off (trace.go)
	propagate bool
	traceCost func(*store.RequestEvent) (money.Nanos, bool)
	capture   Capturer // nil: nothing captured (capture.go)
	// captureLimit caps each captured body.
	captureLimit int

	// held is the one field every request writes (twice): on a cache line
	// of its own, so the other fields, read by every request, are not
	// pulled back from the core that wrote it last.
	_    [64]byte
	held heldBytes
	_    [64]byte
}

// NewTransport returns the outbound transport: many idle connections per
// upstream (clients stream concurrently), no transparent decompression (the
// relay passes bytes through), HTTP/2 when the upstream offers it.
//
// An HTTP/1 connection holds its two buffers for as long as it lives, an
// open stream included, so they are small (docs/decisions.md, "Memory per
// open stream"). The read buffer stays at 4 KB: every event of a chunked
// stream passes through it, and a burst larger than it costs more reads.
// The write buffer takes the request's headers and what of the body fits
// behind them; the rest is one more write, so it is not made smaller than
// a typical request.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		WriteBufferSize:       4 << 10,
		ReadBufferSize:        4 << 10,
	}
}

// New returns a Handler.
func New(o Options) *Handler {
	if o.Transport == nil {
		o.Transport = NewTransport()
	}
	orDefault := func(d, def time.Duration) time.Duration {
		if d <= 0 {
			return def
		}
		return d
	}
	if o.MaxBodyBytesInFlight <= 0 {
		o.MaxBodyBytesInFlight = DefaultMaxBodyBytesInFlight
	}
	h := &Handler{
		src: o.Source, rec: o.Recorder, obs: o.Observer, plugins: o.Plugins, limiter: o.Limiter, metrics: o.Metrics,
		transport:              o.Transport,
		headerTimeout:          orDefault(o.HeaderTimeout, DefaultHeaderTimeout),
		nonStreamHeaderTimeout: orDefault(o.NonStreamHeaderTimeout, DefaultNonStreamHeaderTimeout),
		idleTimeout:            orDefault(o.IdleTimeout, DefaultIdleTimeout),
		bodyReadTimeout:        orDefault(o.BodyReadTimeout, DefaultBodyReadTimeout),
	}
	service.Init(service.Options{Logger: o.Logger, Clock: o.Clock}, h)
	h.clouds = cloud.NewPool(o.Transport, o.Metrics.cloudMetrics(), h.Clock)
	h.mono = mono{clk: h.Clock, base: h.Clock.Now()}
	h.held.max = o.MaxBodyBytesInFlight
	h.board, h.randN, h.affinity, h.admission, h.caps = o.Board, rand.Uint64N, o.Affinity, o.Admission, o.UpstreamCaps
	h.maxAttempts = o.MaxAttempts
	if h.maxAttempts <= 0 {
		h.maxAttempts = DefaultMaxAttempts
	}
	h.maxAttempts = min(h.maxAttempts, MaxAttemptsCap)
	h.tracer, h.propagate, h.traceCost = o.Tracer, o.Propagate, o.TraceCost
	h.refresh = o.Refresher
	h.capture, h.captureLimit = o.Capture, o.CaptureLimit
	if h.captureLimit <= 0 {
		h.captureLimit = capture.DefaultLimit
	}
	return h
}

type endpoint int

const (
	epMessages endpoint = iota
	epCountTokens
)

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ep endpoint
	var chat *openai.Writer
	var q admitted
	switch r.URL.Path {
	case "/v1/messages":
		ep = epMessages
	case "/v1/chat/completions":
		// OpenAI's Chat Completions, translated: the Messages pipeline
		// writes into a writer that answers in OpenAI's shapes.
		ep, chat = epMessages, openai.NewWriter(w, openai.Chat, h.Clock)
		defer h.finishChat(chat, &q)
		w = chat
		openai.Prepare(r)
	case "/v1/messages/count_tokens":
		ep = epCountTokens
	case "/healthz":
		// Liveness for load balancers and probes; reveals nothing.
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok\n")
		return
	default:
		if r.URL.Path == "/v1/models" || strings.HasPrefix(r.URL.Path, "/v1/models/") {
			if openai.Dialect(r) {
				mw := openai.NewWriter(w, openai.Models, h.Clock)
				defer h.finishOpenAI(mw, openAIModels)
				w = mw
				openai.Prepare(r)
			}
			h.models(w, r)
			return
		}
		dontWaitForBody(w)
		h.reply(w, r, proxyerr.NotFound("no such endpoint: "+r.URL.Path), nil)
		return
	}
	if r.Method != http.MethodPost {
		dontWaitForBody(w)
		h.reply(w, r, proxyerr.MethodNotAllowed(r.Method, http.MethodPost), nil)
		return
	}
	// The checks before dispatch and the relay run in functions of their
	// own, so the relay's stack does not carry the checks' frames: a
	// stream's goroutine keeps the deepest stack it ever reached for as
	// long as it is open, and with this split it stays in its first size
	// class.
	q.start, q.chat = h.Clock.Now(), chat
	if h.tracer != nil {
		var span trace.Span
		r, span = h.traceRequest(r, ep)
		// Not deferred directly: End would record the relay's deliberate
		// abort (http.ErrAbortHandler) as an exception with its stack.
		defer func() { span.End() }()
	}
	// Deferred before admit reserves: a panic in its checks (recovered by
	// net/http) must still give the body bytes back to the global cap.
	defer func() {
		h.held.give(q.held)
		q.slot.Release()
		// A Chat Completions answer's last bytes are written by its
		// translation's Finish: finishChat hands that capture over.
		if q.capture != nil && q.chat == nil {
			h.endCapture(&q)
		}
	}()
	if h.admit(w, r, ep, &q) {
		if h.capture != nil && q.key.Principal.Capture {
			w = h.startCapture(w, &q)
		}
		h.forward(w, r, ep, &q)
	}
}

// admitted is a request that passed the checks before dispatch.
type admitted struct {
	start    time.Time
	key      *snapshot.Key
	body     []byte
	held     int64 // body bytes reserved against the global cap, given back when the handler returns
	model    string
	stream   bool        // the request asks for a stream (count_tokens answers none)
	attempts attemptList // the upstreams to try, in order
	cands    []*snapshot.Upstream
	session  affinity.Key     // zero: none
	standing *limits.Status   // the principal's standing for its anthropic-ratelimit-* headers (nil: no limits)
	slot     admission.Ticket // the principal's slot under its max_in_flight (zero: uncapped)
	chat     *openai.Writer   // set for a Chat Completions request: its body is translated
	received []byte           // the body as the client sent it (before a translation)
	capture  *captured        // nil: the principal does not capture (capture.go)
}

// dialect names the API the client spoke, for its request event.
func (q *admitted) dialect() string {
	if q.chat != nil {
		return store.DialectOpenAI
	}
	return store.DialectMessages
}

// admit authenticates the request, reads and checks its body, applies the
// principal's limits and routes it, filling q; false when it answered the
// refusal itself. q.held is set even then.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request, ep endpoint, q *admitted) bool {
	start := q.start
	snap := h.src.Current()
	k, ok := h.principalIn(snap, w, r)
	if !ok {
		return false
	}
	p := k.Principal
	// Refusals after authentication are recorded as request events, so the
	// principal's traffic shows them (a 401 has no principal to record).
	refused := store.RequestEvent{At: start, PrincipalID: p.ID, KeyID: k.ID, Dialect: q.dialect()}

	body, held, err := h.readBody(w, r)
	q.held, q.received = held, body
	if err != nil {
		// Too large, over the cap, timed out or broken: do not wait for
		// the rest of the body either.
		dontWaitForBody(w)
		h.reply(w, r, bodyError(err), &refused)
		return false
	}
	var model string
	var stream bool
	if q.chat != nil {
		if body, err = h.translate(q, body); err != nil {
			h.reply(w, r, translateError(err), &refused)
			return false
		}
		// The translation read the model and the stream flag and wrote
		// the body itself: scanning it again would find the same.
		model, stream = q.chat.Requested()
	} else if model, stream, err = scanRequest(body); err != nil {
		h.reply(w, r, proxyerr.InvalidRequest(err.Error()), &refused)
		return false
	}
	if model == "" {
		h.reply(w, r, proxyerr.InvalidRequest("model: field required"), &refused)
		return false
	}
	// A model id is short text, and it is stored with every request event.
	if !validModelID(model) {
		h.reply(w, r, proxyerr.InvalidRequest("model: at most 256 bytes of valid UTF-8 without control characters"), &refused)
		return false
	}
	refused.Model, refused.Stream = model, stream && ep == epMessages
	if !p.AllowsModel(model) {
		h.reply(w, r, proxyerr.Permission("model "+strconv.Quote(model)+" is not allowed for this principal"), &refused)
		return false
	}
	// The principal's standing, sent as its anthropic-ratelimit-* headers
	// on the answer (nil: no limits, the upstream's headers pass).
	var standing *limits.Status
	if ep == epMessages && len(p.Limits) > 0 && h.limiter != nil {
		standing = new(limits.Status)
		if lr := h.limiter.AdmitStatus(p.ID, p.Limits, standing); lr != nil {
			setLimitHeaders(w.Header(), standing)
			if h.metrics != nil {
				h.metrics.limited(lr.Limit.Kind)
			}
			if h.tracer != nil {
				traceLimit(r, lr)
			}
			// Anthropic's answer to a rate limit: 429 rate_limit_error
			// with retry-after, which the SDKs honour.
			h.reply(w, r, proxyerr.RateLimited(lr.Message(), lr.RetryAfter), &refused)
			return false
		}
	}
	if !h.admitSlot(w, r, p, q, &refused) {
		return false
	}
	cands := p.Candidates
	if p.Dynamic {
		var plugRefusal *plugins.Refusal
		cands, plugRefusal, err = h.route(r, snap, p, model, stream && ep == epMessages)
		if err != nil {
			h.Logger.Warn("routing plugin failed; request refused", "principal_id", p.ID, "error", err)
			h.reply(w, r, proxyerr.API(http.StatusServiceUnavailable, "routing failed: "+err.Error()), &refused)
			return false
		}
		if plugRefusal != nil {
			h.reply(w, r, proxyerr.New(plugRefusal.Status, plugRefusal.Type, plugRefusal.Message), &refused)
			return false
		}
	}
	if len(cands) == 0 {
		h.reply(w, r, errNoUpstream(), &refused)
		return false
	}
	// The built-in router spreads by weight within each priority class; a
	// router plugin's order is kept.
	var session affinity.Key
	if ep == epMessages && !p.Dynamic && h.affinity != nil {
		session = sessionOf(r, p, body)
	}
	h.plan(&q.attempts, cands, !p.Dynamic, session, start)
	if q.attempts.n == 0 {
		// Every candidate is cooling down: the client learns when the
		// first comes back rather than a provider's 429 per request.
		if h.metrics != nil {
			h.metrics.allCooling.Inc()
		}
		h.reply(w, r, proxyerr.RateLimited("every upstream of this principal is rate limited; retry after "+q.attempts.soonest.UTC().Format(time.RFC3339),
			q.attempts.soonest.Sub(start)), &refused)
		return false
	}
	q.key, q.body, q.model, q.stream, q.standing = k, body, model, stream, standing
	q.cands, q.session = cands, session
	return true
}

// forward dispatches an admitted request and relays the answer.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, ep endpoint, q *admitted) {
	k, start := q.key, q.start
	p := k.Principal
	ev := store.RequestEvent{At: start, PrincipalID: p.ID, KeyID: k.ID, Model: q.model, Stream: q.stream && ep == epMessages, Dialect: q.dialect()}
	if q.capture != nil {
		ev.ID = q.capture.id // the exchange is read by its event's id
	}
	headerTimeout := h.headerTimeout
	if ep == epMessages && !q.stream {
		headerTimeout = h.nonStreamHeaderTimeout
	}
	resp, up, a, spilled, err := h.dispatch(r, ep, q.attempts.ups(), q.body, headerTimeout, start)
	if err != nil {
		h.unreachable(w, r, err, up, &ev)
		return
	}
	defer a.done()
	defer h.board.Begin(up.ID).End()
	// A session spilled past an upstream at its cap is not moved: the cap
	// is momentary, and its next request goes back where it was.
	if served(resp.StatusCode) && !spilled {
		h.land(q.session, q.cands, up)
	}
	ev.UpstreamID, ev.Status = up.ID, resp.StatusCode
	ev.UpstreamModel = upstreamModel(up, ev.Model)
	var x *Exchange
	if h.obs != nil && ep == epMessages && p.KeepAliveEnabled {
		x = &Exchange{PrincipalID: p.ID, KeepAlive: p.CacheKeepalive, UpstreamID: up.ID, Request: q.body, Anchor: h.Clock.Now()}
	}
	h.relayResponse(w, r, resp, a, up, &ev, start, x, q.standing)
}

// unreachable records and answers a request no candidate answered (up is
// the last one tried, if any).
func (h *Handler) unreachable(w http.ResponseWriter, r *http.Request, err error, up *snapshot.Upstream, ev *store.RequestEvent) {
	if up != nil {
		ev.UpstreamID = up.ID
	}
	e := unreachableError(err)
	if shuttingDown(r) {
		e = errShutdown()
	} else if r.Context().Err() == nil {
		h.Logger.Warn("upstream unreachable", "principal_id", ev.PrincipalID, "upstream_id", ev.UpstreamID, "error", err)
	}
	h.reply(w, r, e, ev)
}

func (h *Handler) principalIn(snap *snapshot.Snapshot, w http.ResponseWriter, r *http.Request) (*snapshot.Key, bool) {
	key := clientKey(r)
	if key == "" {
		dontWaitForBody(w)
		h.reply(w, r, proxyerr.Authentication("missing API key: send x-api-key or Authorization: Bearer"), nil)
		return nil, false
	}
	k := snap.KeyByHash(sha256.Sum256([]byte(key)))
	if k == nil {
		dontWaitForBody(w)
		h.reply(w, r, proxyerr.Authentication("invalid API key"), nil)
		return nil, false
	}
	if !k.Principal.Enabled {
		dontWaitForBody(w)
		h.reply(w, r, proxyerr.Permission("principal is disabled"), nil)
		return nil, false
	}
	return k, true
}

// ceilMillis is d in whole milliseconds, rounded up.
func ceilMillis(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// finish hands the event to the recorder and updates metrics, off the
// client's critical path: the response bytes are already written.
func (h *Handler) finish(ctx context.Context, ev store.RequestEvent, start time.Time) {
	h.finishWith(ctx, ev, start, nil, nil)
}

// finishWith is finish with the captured response: the body of a
// non-streaming answer, the usage lines of a stream.
func (h *Handler) finishWith(ctx context.Context, ev store.RequestEvent, start time.Time, body []byte, sse [][]byte) {
	took := h.Clock.Since(start)
	// Rounded up like the time to first byte, so an event never shows a
	// first byte later than its end.
	ev.DurationMillis = ceilMillis(took)
	if h.tracer != nil {
		h.traceFinish(ctx, &ev, body, sse)
	}
	if h.metrics != nil {
		h.metrics.observe(ev.Status, took)
	}
	if h.rec == nil {
		return
	}
	h.rec.Record(usage.Pending{Event: ev, Body: body, SSE: sse})
}

var _ http.Handler = (*Handler)(nil)
