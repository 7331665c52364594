// Package relay is the proxy path: it authenticates a principal's key against
// the current snapshot, checks the model, picks an upstream, swaps in the
// upstream's credential and streams the provider's answer back unbuffered.
package relay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/money"
	"github.com/pillarhq/pillar/impl/gateway/openai"
	"github.com/pillarhq/pillar/impl/gateway/plugins"
	"github.com/pillarhq/pillar/impl/gateway/routing"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/usage"
)

// MaxBodyBytes bounds a request body; Anthropic's own limit is 32 MB.
const MaxBodyBytes = 32 << 20

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
	Logger    *slog.Logger
	Now       func() time.Time

	// Deadlines and bounds of the proxy path (docs/resilience.md); zero
	// means the Default* constant of the same name.
	HeaderTimeout          time.Duration
	NonStreamHeaderTimeout time.Duration
	IdleTimeout            time.Duration
	BodyReadTimeout        time.Duration
	MaxBodyBytesInFlight   int64
	// Refresher refreshes an OAuth upstream's token lazily when a request
	// meets it expired or refused (optional).
	Refresher TokenRefresher
	// Board is the upstreams' live routing state: cooldowns and requests
	// in flight (optional: without it nothing cools down).
	Board *routing.Board
	// MaxAttempts bounds how many upstreams one request is sent to,
	// failover included (zero: DefaultMaxAttempts; at most 16).
	MaxAttempts int
	// Tracer traces requests and their attempts (optional: nil traces
	// nothing, at no cost); Propagate sends the attempt's traceparent
	// upstream, TraceCost prices a traced request's span.
	Tracer    trace.Tracer
	Propagate bool
	TraceCost func(*store.RequestEvent) (money.Nanos, bool)
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
	metrics   *Metrics
	log       *slog.Logger
	now       func() time.Time
	realClock bool // now is time.Now (Options.Now unset)

	headerTimeout, nonStreamHeaderTimeout, idleTimeout, bodyReadTimeout time.Duration
	refresh                                                             *refresher
	board                                                               *routing.Board
	randN                                                               func(uint64) uint64 // the spreading's draw; tests replace it
	maxAttempts                                                         int
	// afterFunc, set by tests, replaces the attempts' deadline timers.
	afterFunc func(time.Duration, func()) timer
	tracer    trace.Tracer // nil: tracing off (trace.go)
	propagate bool
	traceCost func(*store.RequestEvent) (money.Nanos, bool)

	// held is the one field every request writes (twice): on a cache line
	// of its own, so the other fields, read by every request, are not
	// pulled back from the core that wrote it last (issue 22).
	_    [64]byte
	held heldBytes
	_    [64]byte
}

// NewTransport returns the outbound transport: many idle connections per
// upstream (clients stream concurrently), no transparent decompression (the
// relay passes bytes through), HTTP/2 when the upstream offers it.
//
// An HTTP/1 connection holds its two buffers for as long as it lives, an
// open stream included, so they are small (issue 22: at 32 KB each they were
// most of the proxy's heap per open stream). The read buffer stays at 4 KB:
// every event of a chunked stream passes through it, and a burst larger
// than it costs more reads. The write buffer takes the request's headers
// and what of the body fits behind them; the rest is one more write. It
// stays at 4 KB, not 1 KB: 3 KB less per open stream would cost every
// request with a body of 0.6 to 3 KB a second write (and TLS record).
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
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	realClock := o.Now == nil
	if realClock {
		o.Now = time.Now
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
		src: o.Source, rec: o.Recorder, obs: o.Observer, plugins: o.Plugins, limiter: o.Limiter, metrics: o.Metrics, log: o.Logger, now: o.Now, realClock: realClock,
		transport:              o.Transport,
		headerTimeout:          orDefault(o.HeaderTimeout, DefaultHeaderTimeout),
		nonStreamHeaderTimeout: orDefault(o.NonStreamHeaderTimeout, DefaultNonStreamHeaderTimeout),
		idleTimeout:            orDefault(o.IdleTimeout, DefaultIdleTimeout),
		bodyReadTimeout:        orDefault(o.BodyReadTimeout, DefaultBodyReadTimeout),
	}
	h.held.max = o.MaxBodyBytesInFlight
	h.board, h.randN = o.Board, rand.Uint64N
	h.maxAttempts = o.MaxAttempts
	if h.maxAttempts <= 0 {
		h.maxAttempts = DefaultMaxAttempts
	}
	h.maxAttempts = min(h.maxAttempts, MaxAttemptsCap)
	h.tracer, h.propagate, h.traceCost = o.Tracer, o.Propagate, o.TraceCost
	if o.Refresher != nil {
		h.refresh = &refresher{r: o.Refresher, now: o.Now, run: func(f func()) { go f() },
			busy: map[string]bool{}, ended: map[string]time.Time{},
			onErr: func(id string, err error) {
				h.log.Warn("lazy OAuth token refresh failed", "upstream_id", id, "error", err)
			}}
	}
	return h
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Event streams are read through a streamBuf: the 32 KB buffer of other
// answers was half the proxy's memory per open stream (issue 22: 2,000
// streams), and a stream spends most of its life waiting for its next
// event.
var (
	sseIdlePool = sync.Pool{New: func() any { b := make([]byte, sseIdleBuf); return &b }}
	sseBufPool  = sync.Pool{New: func() any { b := make([]byte, 4<<10); return &b }}
)

// sseIdleBuf is the buffer a stream waits with: most events are a few
// hundred bytes.
const sseIdleBuf = 1 << 10

// streamBuf is an event stream's read buffer. The stream waits for its
// next event with a 1 KB buffer; a read that fills it means more was
// waiting (the transport's body returns what it has without blocking for
// more), so the reads after it use a 4 KB buffer, given back as soon as a
// read returns less than 1 KB. Either way every read is relayed at once.
type streamBuf struct{ idle, burst *[]byte }

// first returns the buffer of the first read.
func (s *streamBuf) first() []byte {
	s.idle = sseIdlePool.Get().(*[]byte)
	return *s.idle
}

// next returns the buffer of the read after one that returned n bytes
// into a buffer of size; the previous buffer's bytes must be written out.
func (s *streamBuf) next(n, size int) []byte {
	if s.burst == nil {
		if n < size {
			return *s.idle
		}
		s.burst = sseBufPool.Get().(*[]byte)
		return *s.burst
	}
	if n >= sseIdleBuf {
		return *s.burst
	}
	sseBufPool.Put(s.burst)
	s.burst = nil
	return *s.idle
}

func (s *streamBuf) release() {
	if s.burst != nil {
		sseBufPool.Put(s.burst)
		s.burst = nil
	}
	sseIdlePool.Put(s.idle)
}

type endpoint int

const (
	epMessages endpoint = iota
	epCountTokens
)

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ep endpoint
	var chat *openai.Writer
	switch r.URL.Path {
	case "/v1/messages":
		ep = epMessages
	case "/v1/chat/completions":
		// OpenAI's Chat Completions, translated: the Messages pipeline
		// writes into a writer that answers in OpenAI's shapes.
		ep, chat = epMessages, openai.NewWriter(w, openai.Chat, h.now)
		defer h.finishOpenAI(chat, openAIChat)
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
				mw := openai.NewWriter(w, openai.Models, h.now)
				defer h.finishOpenAI(mw, openAIModels)
				w = mw
				openai.Prepare(r)
			}
			h.models(w, r)
			return
		}
		dontWaitForBody(w)
		writeError(w, http.StatusNotFound, "not_found_error", "no such endpoint: "+r.URL.Path)
		return
	}
	if r.Method != http.MethodPost {
		dontWaitForBody(w)
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method "+r.Method+" is not allowed; use POST")
		return
	}
	// The checks before dispatch and the relay run in functions of their
	// own, so the relay's stack does not carry the checks' frames: a
	// stream's goroutine keeps the deepest stack it ever reached for as
	// long as it is open, and with this split it stays within 8 KB rather
	// than doubling to 16 KB (issue 22: 2,000 streams).
	var q admitted
	q.start, q.chat = h.now(), chat
	if h.tracer != nil {
		var span trace.Span
		r, span = h.traceRequest(r, ep)
		// Not deferred directly: End would record the relay's deliberate
		// abort (http.ErrAbortHandler) as an exception with its stack.
		defer func() { span.End() }()
	}
	// Deferred before admit reserves: a panic in its checks (recovered by
	// net/http) must still give the body bytes back to the global cap.
	defer func() { h.held.give(q.held) }()
	if h.admit(w, r, ep, &q) {
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
	stream   bool           // the request asks for a stream (count_tokens answers none)
	attempts attemptList    // the upstreams to try, in order
	standing *limits.Status // the principal's standing for its anthropic-ratelimit-* headers (nil: no limits)
	chat     *openai.Writer // set for a Chat Completions request: its body is translated
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
	refused := store.RequestEvent{At: start, PrincipalID: p.ID, KeyID: k.ID}
	refuse := func(status int, typ, msg string) {
		writeError(w, status, typ, msg) // finish counts it in the metrics
		ev := refused
		ev.Status, ev.ErrorType = status, typ
		h.finish(r.Context(), ev, start)
	}

	body, held, err := h.readBody(w, r)
	q.held = held
	if err != nil {
		switch {
		case errors.Is(err, errTooLarge):
			dontWaitForBody(w)
			refuse(http.StatusRequestEntityTooLarge, "request_too_large", "request body exceeds 32 MB")
		case errors.Is(err, errOverloaded):
			// Past the global cap on held bodies: Anthropic's own answer
			// to overload, which the SDKs retry with backoff.
			dontWaitForBody(w)
			refuse(529, "overloaded_error", "the proxy holds too many request bodies at once; retry shortly")
		default:
			// Timed out or broken: do not wait for the rest either.
			dontWaitForBody(w)
			refuse(http.StatusBadRequest, "invalid_request_error", "cannot read request body")
		}
		return false
	}
	if q.chat != nil {
		if body, err = h.translate(q, body); err != nil {
			status, typ := http.StatusBadRequest, "invalid_request_error"
			if errors.Is(err, errOverloaded) {
				status, typ = 529, "overloaded_error"
			}
			refuse(status, typ, err.Error())
			return false
		}
	}
	model, stream, err := scanRequest(body)
	if err != nil {
		refuse(http.StatusBadRequest, "invalid_request_error", err.Error())
		return false
	}
	if model == "" {
		refuse(http.StatusBadRequest, "invalid_request_error", "model: field required")
		return false
	}
	// Security (issue 19.4): a model id is short text, and it is stored
	// with every request event.
	if !validModelID(model) {
		refuse(http.StatusBadRequest, "invalid_request_error", "model: at most 256 bytes of valid UTF-8 without control characters")
		return false
	}
	refused.Model, refused.Stream = model, stream && ep == epMessages
	if !p.AllowsModel(model) {
		refuse(http.StatusForbidden, "permission_error", "model "+strconv.Quote(model)+" is not allowed for this principal")
		return false
	}
	// The principal's standing, sent as its anthropic-ratelimit-* headers
	// on the answer (nil: no limits, the upstream's headers pass).
	var standing *limits.Status
	if ep == epMessages && len(p.Limits) > 0 && h.limiter != nil {
		standing = new(limits.Status)
		if lr := h.limiter.AdmitStatus(p.ID, p.Limits, standing); lr != nil {
			setLimitHeaders(w.Header(), standing)
			// Anthropic's answer to a rate limit: 429 rate_limit_error
			// with retry-after, which the SDKs honour.
			w.Header().Set("Retry-After", strconv.FormatInt(int64((lr.RetryAfter+time.Second-1)/time.Second), 10))
			// The SDKs retry only on x-should-retry: true, and wait what
			// Retry-After says up to a minute; past that they would
			// retry early into another 429, so the client is told not to.
			w.Header().Set("X-Should-Retry", strconv.FormatBool(lr.RetryAfter <= maxClientRetryWait))
			if h.metrics != nil {
				h.metrics.limited(lr.Limit.Kind)
			}
			if h.tracer != nil {
				traceLimit(r, lr)
			}
			refuse(http.StatusTooManyRequests, "rate_limit_error", lr.Message())
			return false
		}
	}
	cands := p.Candidates
	if p.Dynamic {
		var plugRefusal *plugins.Refusal
		cands, plugRefusal, err = h.route(r, snap, p, model, stream && ep == epMessages)
		if err != nil {
			h.log.Warn("routing plugin failed; request refused", "principal_id", p.ID, "error", err)
			refuse(http.StatusServiceUnavailable, "api_error", "routing failed: "+err.Error())
			return false
		}
		if plugRefusal != nil {
			refuse(plugRefusal.Status, plugRefusal.Type, plugRefusal.Message)
			return false
		}
	}
	if len(cands) == 0 {
		refuse(http.StatusServiceUnavailable, "api_error", "no enabled upstream is available for this principal")
		return false
	}
	// The built-in router spreads by weight within each priority class; a
	// router plugin's order is kept.
	h.plan(&q.attempts, cands, !p.Dynamic, start)
	if q.attempts.n == 0 {
		// Every candidate is cooling down: the client learns when the
		// first comes back rather than a provider's 429 per request.
		wait := q.attempts.soonest.Sub(start)
		w.Header().Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
		w.Header().Set("X-Should-Retry", strconv.FormatBool(wait <= maxClientRetryWait))
		if h.metrics != nil {
			h.metrics.allCooling.Inc()
		}
		refuse(http.StatusTooManyRequests, "rate_limit_error", "every upstream of this principal is rate limited; retry after "+q.attempts.soonest.UTC().Format(time.RFC3339))
		return false
	}
	q.key, q.body, q.model, q.stream, q.standing = k, body, model, stream, standing
	return true
}

// forward dispatches an admitted request and relays the answer.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, ep endpoint, q *admitted) {
	k, start := q.key, q.start
	p := k.Principal
	ev := store.RequestEvent{At: start, PrincipalID: p.ID, KeyID: k.ID, Model: q.model, Stream: q.stream && ep == epMessages}
	headerTimeout := h.headerTimeout
	if ep == epMessages && !q.stream {
		headerTimeout = h.nonStreamHeaderTimeout
	}
	resp, up, a, err := h.dispatch(r, ep, q.attempts.ups(), q.body, headerTimeout, start)
	if err != nil {
		h.unreachable(w, r, err, up, &ev)
		return
	}
	defer a.done()
	defer h.board.Begin(up.ID).End()
	ev.UpstreamID, ev.Status = up.ID, resp.StatusCode
	var x *Exchange
	if h.obs != nil && ep == epMessages && p.KeepAliveEnabled {
		x = &Exchange{PrincipalID: p.ID, KeepAlive: p.CacheKeepalive, UpstreamID: up.ID, Request: q.body, Anchor: h.now()}
	}
	h.relayResponse(w, r, resp, a, up, &ev, start, x, q.standing)
}

// unreachable records and answers a request no candidate answered (up is
// the last one tried, if any).
func (h *Handler) unreachable(w http.ResponseWriter, r *http.Request, err error, up *snapshot.Upstream, ev *store.RequestEvent) {
	ev.Status, ev.ErrorType = http.StatusBadGateway, "api_error"
	if up != nil {
		ev.UpstreamID = up.ID
	}
	switch {
	case errors.Is(err, errHeaderTimeout):
		ev.ErrorType = "upstream_timeout"
	case errors.Is(err, errOAuthRefused):
		// The last candidate's OAuth token was refused: a refresh is
		// under way, so a retry shortly succeeds; the provider's 401
		// would tell the client its own key is wrong.
		ev.Status, ev.ErrorType = http.StatusServiceUnavailable, "upstream_unauthorized"
	case errors.Is(err, errCredentialRevoked):
		ev.Status, ev.ErrorType = http.StatusServiceUnavailable, "upstream_credential_revoked"
	}
	if shuttingDown(r) {
		h.shutdownCut(r.Context(), w, ev, ev.At)
		return
	}
	h.finish(r.Context(), *ev, ev.At)
	if r.Context().Err() != nil {
		return // the client went away; nobody to answer
	}
	h.log.Warn("upstream unreachable", "principal_id", ev.PrincipalID, "upstream_id", ev.UpstreamID, "error", err)
	switch ev.ErrorType {
	case "upstream_timeout":
		writeError(w, http.StatusBadGateway, "api_error", "upstream did not answer in time")
	case "upstream_unauthorized":
		writeError(w, http.StatusServiceUnavailable, "api_error", "the upstream refused its credential; it is being refreshed, retry shortly")
	case "upstream_credential_revoked":
		// Retrying cannot help until an operator acts: the SDKs must not.
		w.Header().Set("X-Should-Retry", "false")
		writeError(w, http.StatusServiceUnavailable, "api_error",
			"no upstream can serve this request: its provider revoked the upstream's OAuth credential (refresh grant refused); an operator must run the OAuth flow again")
	default:
		writeError(w, http.StatusBadGateway, "api_error", "upstream unreachable")
	}
}

// principalOf authenticates the request's key against the snapshot and
// answers the refusal itself; ok is false when it did.
func (h *Handler) principalOf(w http.ResponseWriter, r *http.Request) (*snapshot.Key, bool) {
	return h.principalIn(h.src.Current(), w, r)
}

func (h *Handler) principalIn(snap *snapshot.Snapshot, w http.ResponseWriter, r *http.Request) (*snapshot.Key, bool) {
	key := clientKey(r)
	if key == "" {
		h.fail(w, http.StatusUnauthorized, "authentication_error", "missing API key: send x-api-key or Authorization: Bearer")
		return nil, false
	}
	k := snap.KeyByHash(sha256.Sum256([]byte(key)))
	if k == nil {
		h.fail(w, http.StatusUnauthorized, "authentication_error", "invalid API key")
		return nil, false
	}
	if !k.Principal.Enabled {
		h.fail(w, http.StatusForbidden, "permission_error", "principal is disabled")
		return nil, false
	}
	return k, true
}

// models serves GET /v1/models[/{id}] from the principal's first upstream,
// keeping only the models the principal may use, so clients that list
// models before choosing one see exactly what they can call.
func (h *Handler) models(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method "+r.Method+" is not allowed; use GET")
		return
	}
	k, ok := h.principalOf(w, r)
	if !ok {
		return
	}
	p := k.Principal
	if id, one := strings.CutPrefix(r.URL.Path, "/v1/models/"); one && !p.AllowsModel(id) {
		h.fail(w, http.StatusNotFound, "not_found_error", "model "+strconv.Quote(id)+" not found")
		return
	}
	var up *snapshot.Upstream
	for _, c := range p.Candidates {
		if c.Routable() {
			up = c
			break
		}
	}
	if up == nil {
		h.fail(w, http.StatusServiceUnavailable, "api_error", "no enabled upstream is available for this principal")
		return
	}
	target := up.BaseURL + r.URL.Path
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	out, err := http.NewRequestWithContext(r.Context(), http.MethodGet, target, nil)
	if err != nil {
		h.fail(w, http.StatusBadGateway, "api_error", "upstream unreachable")
		return
	}
	copyRequestHeaders(out.Header, r.Header)
	setCredential(out.Header, up)
	resp, err := h.transport.RoundTrip(out)
	if err != nil {
		h.fail(w, http.StatusBadGateway, "api_error", "upstream unreachable")
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		h.fail(w, http.StatusBadGateway, "api_error", "upstream response truncated")
		return
	}
	if resp.StatusCode == http.StatusOK && r.URL.Path == "/v1/models" {
		body = filterModels(body, p)
	}
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	if v := resp.Header.Get("Request-Id"); v != "" {
		w.Header().Set("Request-Id", v)
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
	if h.metrics != nil {
		h.metrics.observe(resp.StatusCode, 0)
	}
}

// filterModels keeps the models of a list response the principal may use.
func filterModels(body []byte, p *snapshot.Principal) []byte {
	var list map[string]json.RawMessage
	if json.Unmarshal(body, &list) != nil {
		return body
	}
	var data []json.RawMessage
	if json.Unmarshal(list["data"], &data) != nil {
		return body
	}
	kept := make([]json.RawMessage, 0, len(data))
	for _, m := range data {
		var id struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(m, &id) == nil && p.AllowsModel(id.ID) {
			kept = append(kept, m)
		}
	}
	list["data"], _ = json.Marshal(kept)
	if len(kept) > 0 {
		var first, last struct {
			ID string `json:"id"`
		}
		// kept holds entries already decoded as objects; an entry without
		// a string id leaves the field empty.
		_ = json.Unmarshal(kept[0], &first)
		_ = json.Unmarshal(kept[len(kept)-1], &last)
		list["first_id"], _ = json.Marshal(first.ID)
		list["last_id"], _ = json.Marshal(last.ID)
	} else {
		list["first_id"], list["last_id"] = json.RawMessage("null"), json.RawMessage("null")
	}
	out, err := json.Marshal(list)
	if err != nil {
		return body
	}
	return out
}

// dispatch sends the request to the first candidate that answers. It falls
// over to the next candidate on connection failure, a rate-limit/overload
// answer, no response headers within headerTimeout, or an OAuth credential
// that is expired or refused (401) — always before anything was sent to the
// client, so the client's request does not fail while another upstream can
// serve it. An expired or refused OAuth token starts a lazy refresh. An
// upstream that is not Routable (its credential revoked) gets no request.
func (h *Handler) dispatch(r *http.Request, ep endpoint, cands []*snapshot.Upstream, body []byte, headerTimeout time.Duration, now time.Time) (*http.Response, *snapshot.Upstream, *attempt, error) {
	var lastErr error
	var lastUp *snapshot.Upstream
	for i, up := range cands {
		last := i == len(cands)-1
		if !up.Routable() {
			// Out of routing (its credential was revoked): never sent.
			// It explains the failure only when nothing else was tried.
			if lastErr == nil {
				lastErr, lastUp = errCredentialRevoked, up
			}
			if h.tracer != nil {
				traceSkip(r, up, "credential_revoked")
			}
			if !last {
				h.failover()
			}
			continue
		}
		if up.CredentialKind == credential.OAuth && expired(up, now) {
			h.refreshToken(up)
			if !last {
				if h.tracer != nil {
					traceSkip(r, up, "oauth_expired")
				}
				// The provider would refuse it: do not spend a round trip.
				h.failover()
				continue
			}
			// The last candidate is tried anyway: the provider decides.
		}
		a := h.newAttempt(r.Context(), headerTimeout)
		if h.tracer != nil {
			h.traceAttempt(a, ep, up, i+1)
		}
		out, err := outbound(a.ctx, up, ep, r.URL.RawQuery, body, a, len(r.Header))
		if err != nil {
			a.done()
			lastErr, lastUp = err, up
			continue
		}
		copyRequestHeaders(out.Header, r.Header)
		if h.tracer != nil {
			h.traceOutbound(out.Header, a)
		}
		setCredential(out.Header, up)
		resp, err := h.transport.RoundTrip(out)
		if err != nil {
			if r.Context().Err() != nil {
				a.done()
				return nil, nil, nil, err
			}
			class := ErrConnect
			if errors.Is(a.cause(), errHeaderTimeout) {
				err, class = errHeaderTimeout, ErrTimeout
				if h.metrics != nil {
					h.metrics.headerTimeouts.Inc()
				}
			}
			h.metrics.upstreamError(up, class)
			a.traceFailover(errorClassNames[class])
			a.done()
			lastErr, lastUp = err, up
			h.failover()
			continue
		}
		a.headersIn()
		a.traceStatus(resp.StatusCode)
		if resp.StatusCode == http.StatusUnauthorized && up.CredentialKind == credential.OAuth {
			// An OAuth token the provider refuses (expired early, revoked
			// or rotated elsewhere): refresh it and move on.
			h.refreshToken(up)
			h.metrics.upstreamError(up, ErrAuth)
			// Drained only so the connection can be reused; the answer is
			// discarded either way.
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			a.traceFailover("oauth_refused")
			a.done()
			lastErr, lastUp = errOAuthRefused, up
			if !last {
				h.failover()
			}
			continue
		}
		if until, ok := routing.CooldownUntil(resp.StatusCode, resp.Header, h.now()); ok && h.board.CoolDown(up.ID, until) {
			if h.metrics != nil {
				h.metrics.cooldowns.Inc()
			}
			a.traceCooldown(until)
		}
		if !last && retryableStatus(resp.StatusCode) {
			class, _ := statusErrorClass(resp.StatusCode)
			h.metrics.upstreamError(up, class)
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // drained for reuse, as above
			resp.Body.Close()
			a.traceFailover(failoverReason(resp.StatusCode))
			a.done()
			h.failover()
			continue
		}
		return resp, up, a, nil
	}
	return nil, lastUp, nil, lastErr
}

var (
	errOAuthRefused = errors.New("upstream refused its OAuth token")
	// errCredentialRevoked: the candidate's provider refused its OAuth
	// refresh grant, so the credential is revoked until an operator runs
	// the OAuth flow again.
	errCredentialRevoked = errors.New("upstream credential revoked by its provider")
)

// outbound is the request to up carrying body, read through a.body, on
// the target parsed once per snapshot (an Upstream not built by the
// snapshot is parsed here) and copied into a.url; headers is how many the
// client sent, to size the request's header map once.
func outbound(ctx context.Context, up *snapshot.Upstream, ep endpoint, rawQuery string, body []byte, a *attempt, headers int) (*http.Request, error) {
	target, s := up.MessagesTarget, up.MessagesURL
	if ep == epCountTokens {
		target, s = up.CountTokensTarget, up.CountTokensURL
	}
	if target == nil {
		var err error
		if target, err = url.Parse(s); err != nil {
			return nil, err
		}
	}
	a.url = *target
	a.url.RawQuery = rawQuery
	a.body.Reset(body)
	// Built as NewRequestWithContext builds it, without parsing a URL
	// again: WithContext's copy is the request's one allocation.
	out := (&http.Request{
		Method: http.MethodPost, URL: &a.url, Host: target.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header, headers+2), // plus the credential's one or two
		Body:   &a.body, ContentLength: int64(len(body)),
		// GetBody lets the transport resend the body on a fresh
		// connection when a reused one turned out closed before anything
		// was sent.
		GetBody: func() (io.ReadCloser, error) { return &bodyReader{Reader: *bytes.NewReader(body)}, nil },
	}).WithContext(ctx)
	return out, nil
}

// bodyReader is a request body in memory.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

func (h *Handler) failover() {
	if h.metrics != nil {
		h.metrics.failovers.Inc()
	}
}

// refreshToken starts a lazy refresh of up's OAuth token (deduplicated).
func (h *Handler) refreshToken(up *snapshot.Upstream) {
	if h.refresh.trigger(up.ID) && h.metrics != nil {
		h.metrics.lazyRefreshes.Inc()
	}
}

// retryableStatus: answers another upstream may not give, sent before
// anything reached the client (a rate limit, an overload, a server error
// or a gateway's) fail over.
func retryableStatus(code int) bool {
	switch code {
	case http.StatusTooManyRequests, 529, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// bufferLimit bounds how much of a non-streaming response is read before
// anything is sent to the client, so a response the upstream cuts short can
// still be answered with a 502 instead of a truncated body. Messages
// answers are far smaller; a larger response is streamed past this point.
const bufferLimit = 8 << 20

// relayResponse sends the upstream response to the client. An event stream
// is relayed chunk by chunk, each flushed at once, so server-sent events
// reach the client one by one; when the upstream cuts it or goes silent past
// the idle deadline, the client gets Anthropic's mid-stream error event and
// the connection is closed, so SDKs raise instead of taking a cut answer for
// a finished one. Other responses are read whole first (up to bufferLimit).
func (h *Handler) relayResponse(w http.ResponseWriter, r *http.Request, resp *http.Response, a *attempt, up *snapshot.Upstream, ev *store.RequestEvent, start time.Time, x *Exchange, standing *limits.Status) {
	defer resp.Body.Close()
	if class, ok := statusErrorClass(resp.StatusCode); ok {
		h.metrics.upstreamError(up, class)
	}
	isSSE := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	var buf []byte
	var sb streamBuf
	if isSSE {
		buf = sb.first()
		defer sb.release()
	} else {
		bp := bufPool.Get().(*[]byte)
		buf = *bp
		defer bufPool.Put(bp)
	}

	var capture []byte
	var rerr error
	if !isSSE {
		capture, rerr = readUpTo(resp.Body, buf, a, bufferLimit)
		if rerr != nil && !errors.Is(rerr, io.EOF) && shuttingDown(r) {
			h.shutdownCut(r.Context(), w, ev, start)
			return
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			h.interrupted(ev, a, up)
			ev.Status, ev.ErrorType = http.StatusBadGateway, "response_truncated"
			h.finish(r.Context(), *ev, start)
			if r.Context().Err() == nil {
				writeError(w, http.StatusBadGateway, "api_error", "the upstream response was cut short")
			}
			return
		}
	}
	copyResponseHeaders(w.Header(), resp.Header, up.CredentialKind == credential.OAuth || standing != nil)
	if standing != nil {
		setLimitHeaders(w.Header(), standing)
	}
	if isSSE {
		w.Header().Del("Content-Length")
	}
	// A complete body matches the upstream's Content-Length, copied above
	// (the transport reports a short body as an error, not io.EOF).
	// A stream's headers are not flushed on their own: they go out with
	// the first event, in one write, as a stock reverse proxy sends them
	// (the provider sends message_start with its headers; a separate write
	// cost the client a second wake-up before its first event, issue 24).
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)

	var tap sseTap
	clientGone := false
	if !isSSE {
		h.firstByte(ev, start)
		if _, werr := w.Write(capture); werr != nil {
			clientGone = true
		}
	}
	for rerr == nil && !clientGone {
		var n int
		n, rerr = resp.Body.Read(buf)
		if n > 0 {
			a.progress()
			chunk := buf[:n]
			if isSSE {
				started := tap.started
				tap.feed(chunk)
				if x != nil && !started && tap.started {
					x.Anchor = h.now()
				}
				if ev.FirstByteMillis == 0 {
					h.firstByte(ev, start)
				}
			}
			if _, werr := w.Write(chunk); werr != nil {
				clientGone = true
				break
			}
			if isSSE && flusher != nil {
				flusher.Flush()
			}
		}
		if isSSE {
			buf = sb.next(n, len(buf))
		}
	}
	if !isSSE && !clientGone && flusher != nil {
		// The whole answer out before the bookkeeping below, which the
		// client need not wait for (net/http would send it only when the
		// handler returns).
		flusher.Flush()
	}
	abort := false
	if rerr != nil && !errors.Is(rerr, io.EOF) && !clientGone && shuttingDown(r) {
		// Cut by the proxy's own shutdown, not by the upstream: the client
		// is told as for any other cut; the event says why.
		ev.ErrorType = "proxy_shutdown"
		if isSSE {
			writeStreamError(w, "api_error", shutdownMessage)
			if flusher != nil {
				flusher.Flush()
			}
		}
		abort = true
	} else if rerr != nil && !errors.Is(rerr, io.EOF) && !clientGone {
		h.interrupted(ev, a, up)
		ev.ErrorType = "stream_interrupted"
		if r.Context().Err() == nil {
			if isSSE {
				msg := "the upstream stream was cut"
				if errors.Is(a.cause(), errUpstreamIdle) {
					msg = "the upstream stream went silent past the idle deadline"
				}
				writeStreamError(w, "api_error", msg)
				if flusher != nil {
					flusher.Flush()
				}
			}
			abort = true
		}
	}
	if tap.errData != nil {
		// The upstream ended the stream with its own error event, passed
		// on unchanged: the answer failed, whatever its 200 said.
		ev.ErrorType = errorType(tap.errData)
		h.metrics.upstreamError(up, errorEventClass(ev.ErrorType))
	}
	if resp.StatusCode >= 400 {
		ev.ErrorType = errorType(capture)
	}
	h.finishWith(r.Context(), *ev, start, capture, tap.lines)
	if x != nil {
		x.Status, x.Body, x.SSE = resp.StatusCode, capture, tap.lines
		h.obs.Observe(*x)
	}
	if abort {
		// Close the connection without the final chunk: a client that
		// ignores the error event still sees a truncated transfer.
		panic(http.ErrAbortHandler)
	}
}

// shutdownMessage tells a client its request was cut by the proxy's
// shutdown: retried, it reaches another replica.
const shutdownMessage = "the proxy is shutting down; retry the request"

// shutdownCut records and answers a request cut by the proxy's shutdown
// before any of its answer went to the client: a retryable 503.
func (h *Handler) shutdownCut(ctx context.Context, w http.ResponseWriter, ev *store.RequestEvent, start time.Time) {
	ev.Status, ev.ErrorType = http.StatusServiceUnavailable, "proxy_shutdown"
	h.finish(ctx, *ev, start)
	writeError(w, http.StatusServiceUnavailable, "api_error", shutdownMessage)
}

// readUpTo reads body until EOF, an error or limit bytes, re-arming the
// attempt's idle deadline on every read. It returns io.EOF when the body is
// complete and nil when the limit was reached first.
func readUpTo(body io.Reader, buf []byte, a *attempt, limit int) ([]byte, error) {
	var out []byte
	for len(out) < limit {
		n, err := body.Read(buf)
		if n > 0 {
			a.progress()
			out = append(out, buf[:n]...)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// since is h.now().Sub(t). On the real clock it is time.Since, which reads
// only the monotonic clock where time.Now reads the wall clock too; every
// request takes two (the first byte, the end).
func (h *Handler) since(t time.Time) time.Duration {
	if h.realClock {
		return time.Since(t)
	}
	return h.now().Sub(t)
}

// ceilMillis is d in whole milliseconds, rounded up.
func ceilMillis(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// firstByte records the time to first byte on the event and the metric,
// as the first bytes of the upstream's answer go to the client.
func (h *Handler) firstByte(ev *store.RequestEvent, start time.Time) {
	d := h.since(start)
	ev.FirstByteMillis = max(1, ceilMillis(d)) // 0 means none
	h.metrics.firstByte(d)
}

// interrupted logs and counts a response the upstream cut or let go idle.
func (h *Handler) interrupted(ev *store.RequestEvent, a *attempt, up *snapshot.Upstream) {
	idle := errors.Is(a.cause(), errUpstreamIdle)
	a.traceCut(idle)
	if h.metrics != nil {
		if idle {
			h.metrics.idleTimeouts.Inc()
			h.metrics.upstreamError(up, ErrTimeout)
		} else {
			h.metrics.upstreamError(up, ErrProtocol)
		}
		h.metrics.interrupted.Inc()
	}
	h.log.Warn("upstream response interrupted", "principal_id", ev.PrincipalID, "upstream_id", up.ID, "idle_deadline", idle)
}

// writeStreamError writes Anthropic's mid-stream error event.
func writeStreamError(w io.Writer, typ, msg string) {
	t, _ := json.Marshal(typ)
	m, _ := json.Marshal(msg)
	b := make([]byte, 0, 96+len(msg))
	b = append(b, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":"...)
	b = append(b, t...)
	b = append(b, `,"message":`...)
	b = append(b, m...)
	b = append(b, "}}\n\n"...)
	_, _ = w.Write(b) // a client that is gone cannot be told
}

// finish hands the event to the recorder and updates metrics, off the
// client's critical path: the response bytes are already written.
func (h *Handler) finish(ctx context.Context, ev store.RequestEvent, start time.Time) {
	h.finishWith(ctx, ev, start, nil, nil)
}

// finishWith is finish with the captured response: the body of a
// non-streaming answer, the usage lines of a stream.
func (h *Handler) finishWith(ctx context.Context, ev store.RequestEvent, start time.Time, body []byte, sse [][]byte) {
	took := h.since(start)
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

// fail answers a request refused before dispatch.
func (h *Handler) fail(w http.ResponseWriter, status int, typ, msg string) {
	dontWaitForBody(w)
	if h.metrics != nil {
		h.metrics.observe(status, 0)
	}
	writeError(w, status, typ, msg)
}

var (
	errTooLarge   = errors.New("request body too large")
	errOverloaded = errors.New("request body memory cap reached")
)

// readBody reads the request body within the body read deadline, reserving
// the bytes it holds against the global cap before it allocates them (known
// Content-Length: all at once, before reading anything). held is what it
// reserved: the caller gives it back when the request is done.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) (b []byte, held int64, err error) {
	if r.ContentLength > MaxBodyBytes {
		return nil, 0, errTooLarge
	}
	size := int64(4096)
	if r.ContentLength > 0 {
		size = r.ContentLength + 1
	}
	if !h.held.take(size) {
		return nil, 0, errOverloaded
	}
	held = size
	if d, ok := w.(readDeadliner); ok {
		// The server bounds only header reads; a client that trickles or
		// stalls its body is cut off here. Cleared at once after, so the
		// deadline never reaches the response.
		// Both always succeed on net/http's HTTP/1 and HTTP/2 writers,
		// the only ones that implement the interface.
		_ = d.SetReadDeadline(h.now().Add(h.bodyReadTimeout))
		defer func() { _ = d.SetReadDeadline(time.Time{}) }()
	}
	b = make([]byte, 0, size)
	lr := io.LimitReader(r.Body, MaxBodyBytes+1)
	for {
		if len(b) == cap(b) {
			old := cap(b)
			b = append(b, 0)[:len(b)]
			if !h.held.take(int64(cap(b) - old)) {
				h.held.give(held)
				return nil, 0, errOverloaded
			}
			held += int64(cap(b) - old)
		}
		n, rerr := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			h.held.give(held)
			return nil, 0, rerr
		}
	}
	if len(b) > MaxBodyBytes {
		h.held.give(held)
		return nil, 0, errTooLarge
	}
	return b, held, nil
}

// clientKey reads the principal key the way Anthropic clients send one:
// x-api-key, or Authorization: Bearer.
func clientKey(r *http.Request) string {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	a := r.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

// copyRequestHeaders forwards the client's headers (anthropic-version,
// anthropic-beta, content-type, user-agent …) minus its credentials,
// hop-by-hop headers and those its Connection header names (RFC 9110
// 7.6.1), the client-address headers (the provider gets no view of the
// proxy's clients or network; the proxy adds none of its own) and
// Accept-Encoding: the upstream answers uncompressed so usage can be read
// from the response.
func copyRequestHeaders(dst, src http.Header) {
	conn := src["Connection"]
	for k, vs := range src {
		switch k {
		case "X-Api-Key", "Authorization", "Host", "Content-Length", "Accept-Encoding", "Cookie",
			"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded", "X-Real-Ip", "Via":
			continue
		}
		if hopHeader(k) || connectionNames(conn, k) {
			continue
		}
		dst[k] = vs
	}
}

// copyResponseHeaders passes the upstream's response headers on, minus the
// hop-by-hop ones and those its Connection header names, and minus the
// anthropic-ratelimit-* ones when dropRateLimits: an OAuth upstream's
// describe the subscription account the proxy shares among its principals,
// and a principal with default_limits gets its own instead (mixing the two
// would tell an SDK about limits that are not the client's). Otherwise an
// API-key upstream's are passed on (the operator's organisation limits,
// which the SDKs use for backoff).
func copyResponseHeaders(dst, src http.Header, dropRateLimits bool) {
	conn := src["Connection"]
	for k, vs := range src {
		if hopHeader(k) || connectionNames(conn, k) {
			continue
		}
		if dropRateLimits && len(k) > len(rateLimitPrefix) && strings.EqualFold(k[:len(rateLimitPrefix)], rateLimitPrefix) {
			continue
		}
		dst[k] = vs
	}
}

const rateLimitPrefix = "Anthropic-Ratelimit-"

// connectionNames reports whether the Connection header values name the
// header k (comma-separated, case-insensitive), without allocating.
func connectionNames(conn []string, k string) bool {
	for _, v := range conn {
		for v != "" {
			tok, rest, _ := strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(tok), k) {
				return true
			}
			v = rest
		}
	}
	return false
}

// setCredential puts the upstream's credential on an outbound request (the
// header by credential kind is the credential package's).
func setCredential(h http.Header, up *snapshot.Upstream) {
	credential.Set(h, up.CredentialKind, up.Credential)
}

func hopHeader(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// errorType reads the Anthropic error type out of an error body, if any.
func errorType(body []byte) string {
	i := bytes.Index(body, []byte(`"error":{"type":"`))
	if i < 0 {
		i = bytes.Index(body, []byte(`"error": {"type": "`))
		if i < 0 {
			return "upstream_error"
		}
		i += len(`"error": {"type": "`)
	} else {
		i += len(`"error":{"type":"`)
	}
	j := bytes.IndexByte(body[i:], '"')
	if j < 0 || j > 64 {
		return "upstream_error"
	}
	// The type is stored with the request event: only a word of the
	// shape Anthropic's types have, never bytes an upstream chose freely.
	for _, c := range body[i : i+j] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return "upstream_error"
		}
	}
	return string(body[i : i+j])
}

// maxClientRetryWait is the longest Retry-After the official SDKs wait
// out before retrying (longer ones they replace with their own backoff).
const maxClientRetryWait = 60 * time.Second

// writeError writes Anthropic's error shape.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	b := make([]byte, 0, 96+len(msg))
	t, _ := json.Marshal(typ)
	m, _ := json.Marshal(msg)
	b = append(b, `{"type":"error","error":{"type":`...)
	b = append(b, t...)
	b = append(b, `,"message":`...)
	b = append(b, m...)
	b = append(b, "}}"...)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	if h.Get("X-Should-Retry") == "" { // a caller that knows better set it
		h.Set("X-Should-Retry", strconv.FormatBool(status == 529 || status == http.StatusServiceUnavailable))
	}
	w.WriteHeader(status)
	w.Write(b)
}

var _ http.Handler = (*Handler)(nil)
