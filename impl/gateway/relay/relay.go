// Package relay is the proxy path: it authenticates a principal's key against
// the current snapshot, checks the model, picks an upstream, swaps in the
// upstream's credential and streams the provider's answer back unbuffered.
package relay

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/plugins"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/usage"
)

// MaxBodyBytes bounds a request body; Anthropic's own limit is 32 MB.
const MaxBodyBytes = 32 << 20

// captureLimit bounds how much of a non-streaming response is kept for usage
// extraction; usage sits near the end of small bodies and larger ones are
// rare enough that missing their usage beats buffering them.
const captureLimit = 256 << 10

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

// Limiter enforces principals' default_limits (limits.Limiter).
type Limiter interface {
	Admit(principal string, ls []limits.Limit) *limits.Refusal
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
}

// Handler serves /v1/messages and /v1/messages/count_tokens.
type Handler struct {
	src     Source
	rec     Recorder
	obs     Observer
	plugins PluginRouter
	limiter Limiter
	client  *http.Client
	metrics *Metrics
	log     *slog.Logger
	now     func() time.Time
}

// NewTransport returns the outbound transport: many idle connections per
// upstream (clients stream concurrently), no transparent decompression (the
// relay passes bytes through), HTTP/2 when the upstream offers it.
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
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
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
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Handler{
		src: o.Source, rec: o.Recorder, obs: o.Observer, plugins: o.Plugins, limiter: o.Limiter, metrics: o.Metrics, log: o.Logger, now: o.Now,
		client: &http.Client{
			Transport: o.Transport,
			// Redirects from a provider are not followed: the credential
			// must never be replayed to another location.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

type endpoint int

const (
	epMessages endpoint = iota
	epCountTokens
)

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ep endpoint
	switch r.URL.Path {
	case "/v1/messages":
		ep = epMessages
	case "/v1/messages/count_tokens":
		ep = epCountTokens
	case "/healthz":
		// Liveness for load balancers and probes; reveals nothing.
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok\n")
		return
	default:
		if r.URL.Path == "/v1/models" || strings.HasPrefix(r.URL.Path, "/v1/models/") {
			h.models(w, r)
			return
		}
		writeError(w, http.StatusNotFound, "not_found_error", "no such endpoint: "+r.URL.Path)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method "+r.Method+" is not allowed; use POST")
		return
	}
	start := h.now()
	snap := h.src.Current()
	k, ok := h.principalIn(snap, w, r)
	if !ok {
		return
	}
	p := k.Principal
	// Refusals after authentication are recorded as request events, so the
	// principal's traffic shows them (a 401 has no principal to record).
	refused := store.RequestEvent{At: start, PrincipalID: p.ID, KeyID: k.ID}
	refuse := func(status int, typ, msg string) {
		writeError(w, status, typ, msg) // finish counts it in the metrics
		ev := refused
		ev.Status, ev.ErrorType = status, typ
		h.finish(ev, start, nil)
	}

	body, err := readBody(r)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			refuse(http.StatusRequestEntityTooLarge, "request_too_large", "request body exceeds 32 MB")
			return
		}
		refuse(http.StatusBadRequest, "invalid_request_error", "cannot read request body")
		return
	}
	model, stream, err := scanRequest(body)
	if err != nil {
		refuse(http.StatusBadRequest, "invalid_request_error", "request body must be a JSON object: "+err.Error())
		return
	}
	if model == "" {
		refuse(http.StatusBadRequest, "invalid_request_error", "model: field required")
		return
	}
	// Security (issue 19.4): a model id is short text, and it is stored
	// with every request event.
	if !validModelID(model) {
		refuse(http.StatusBadRequest, "invalid_request_error", "model: at most 256 bytes of valid UTF-8")
		return
	}
	refused.Model, refused.Stream = model, stream && ep == epMessages
	if !p.AllowsModel(model) {
		refuse(http.StatusForbidden, "permission_error", "model "+strconv.Quote(model)+" is not allowed for this principal")
		return
	}
	if ep == epMessages && len(p.Limits) > 0 && h.limiter != nil {
		if lr := h.limiter.Admit(p.ID, p.Limits); lr != nil {
			// Anthropic's answer to a rate limit: 429 rate_limit_error
			// with retry-after, which the SDKs honour.
			w.Header().Set("Retry-After", strconv.FormatInt(int64((lr.RetryAfter+time.Second-1)/time.Second), 10))
			if h.metrics != nil {
				h.metrics.limited(lr.Limit.Kind)
			}
			refuse(http.StatusTooManyRequests, "rate_limit_error", "principal limit reached: "+lr.Limit.String()+"; retry after the Retry-After seconds")
			return
		}
	}
	cands := p.Candidates
	if p.Dynamic {
		var plugRefusal *plugins.Refusal
		cands, plugRefusal, err = h.route(r, snap, p, model, stream && ep == epMessages)
		if err != nil {
			h.log.Warn("routing plugin failed; request refused", "principal_id", p.ID, "error", err)
			refuse(http.StatusServiceUnavailable, "api_error", "routing failed: "+err.Error())
			return
		}
		if plugRefusal != nil {
			refuse(plugRefusal.Status, plugRefusal.Type, plugRefusal.Message)
			return
		}
	}
	if len(cands) == 0 {
		refuse(http.StatusServiceUnavailable, "api_error", "no enabled upstream is available for this principal")
		return
	}

	ev := store.RequestEvent{At: start, PrincipalID: p.ID, KeyID: k.ID, Model: model, Stream: stream && ep == epMessages}
	resp, up, err := h.dispatch(r, ep, cands, body)
	if err != nil {
		ev.Status, ev.ErrorType = http.StatusBadGateway, "api_error"
		h.finish(ev, start, nil)
		if r.Context().Err() != nil {
			return // the client went away; nobody to answer
		}
		h.log.Warn("upstream unreachable", "principal_id", p.ID, "error", err)
		writeError(w, http.StatusBadGateway, "api_error", "upstream unreachable")
		return
	}
	ev.UpstreamID, ev.Status = up.ID, resp.StatusCode
	var x *Exchange
	if h.obs != nil && ep == epMessages && p.KeepAliveEnabled {
		x = &Exchange{PrincipalID: p.ID, KeepAlive: p.CacheKeepalive, UpstreamID: up.ID, Request: body, Anchor: h.now()}
	}
	h.relayResponse(w, resp, &ev, start, x)
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
	if len(p.Candidates) == 0 {
		h.fail(w, http.StatusServiceUnavailable, "api_error", "no enabled upstream is available for this principal")
		return
	}
	up := p.Candidates[0]
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
	resp, err := h.client.Do(out)
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
		json.Unmarshal(kept[0], &first)
		json.Unmarshal(kept[len(kept)-1], &last)
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
// over to the next candidate on connection failure or a rate-limit/overload
// answer, before anything was sent to the client, so the client's request
// does not fail while another upstream can serve it.
func (h *Handler) dispatch(r *http.Request, ep endpoint, cands []*snapshot.Upstream, body []byte) (*http.Response, *snapshot.Upstream, error) {
	var lastErr error
	for i, up := range cands {
		target := up.MessagesURL
		if ep == epCountTokens {
			target = up.CountTokensURL
		}
		if r.URL.RawQuery != "" {
			target += "?" + r.URL.RawQuery
		}
		out, err := http.NewRequestWithContext(r.Context(), http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			lastErr = err
			continue
		}
		copyRequestHeaders(out.Header, r.Header)
		setCredential(out.Header, up)
		out.ContentLength = int64(len(body))
		resp, err := h.client.Do(out)
		last := i == len(cands)-1
		if err != nil {
			lastErr = err
			if r.Context().Err() != nil {
				return nil, nil, err
			}
			if h.metrics != nil {
				h.metrics.failovers.Inc()
			}
			continue
		}
		if !last && retryableStatus(resp.StatusCode) {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if h.metrics != nil {
				h.metrics.failovers.Inc()
			}
			continue
		}
		return resp, up, nil
	}
	return nil, nil, lastErr
}

func retryableStatus(code int) bool {
	return code == http.StatusTooManyRequests || code == 529 || code == http.StatusServiceUnavailable
}

// relayResponse streams the upstream response to the client. Each chunk read
// from the upstream is written and, for event streams, flushed at once, so
// server-sent events reach the client one by one.
func (h *Handler) relayResponse(w http.ResponseWriter, resp *http.Response, ev *store.RequestEvent, start time.Time, x *Exchange) {
	defer resp.Body.Close()
	hdr := w.Header()
	for k, vs := range resp.Header {
		if hopHeader(k) {
			continue
		}
		hdr[k] = vs
	}
	isSSE := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if isSSE {
		hdr.Del("Content-Length")
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	if isSSE && flusher != nil {
		flusher.Flush() // headers out now: the client sees the stream open
	}

	bp := bufPool.Get().(*[]byte)
	buf := *bp
	var tap sseTap
	var capture []byte
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if isSSE {
				started := tap.started
				tap.feed(chunk)
				if x != nil && !started && tap.started {
					x.Anchor = h.now()
				}
			} else if len(capture)+n <= captureLimit {
				capture = append(capture, chunk...)
			}
			if _, werr := w.Write(chunk); werr != nil {
				break // client gone
			}
			if isSSE && flusher != nil {
				flusher.Flush()
			}
		}
		if rerr != nil {
			if rerr != io.EOF {
				ev.ErrorType = "stream_interrupted"
			}
			break
		}
	}
	bufPool.Put(bp)
	if resp.StatusCode >= 400 {
		ev.ErrorType = errorType(capture)
	}
	h.finish(*ev, start, func(p *usage.Pending) {
		p.Body = capture
		p.SSE = tap.lines
	})
	if x != nil {
		x.Status, x.Body, x.SSE = resp.StatusCode, capture, tap.lines
		h.obs.Observe(*x)
	}
}

// finish hands the event to the recorder and updates metrics, off the
// client's critical path: the response bytes are already written.
func (h *Handler) finish(ev store.RequestEvent, start time.Time, fill func(*usage.Pending)) {
	ev.DurationMillis = h.now().Sub(start).Milliseconds()
	if h.metrics != nil {
		h.metrics.observe(ev.Status, h.now().Sub(start))
	}
	if h.rec == nil {
		return
	}
	p := usage.Pending{Event: ev}
	if fill != nil {
		fill(&p)
	}
	h.rec.Record(p)
}

// fail answers a request refused before dispatch.
func (h *Handler) fail(w http.ResponseWriter, status int, typ, msg string) {
	if h.metrics != nil {
		h.metrics.observe(status, 0)
	}
	writeError(w, status, typ, msg)
}

var errTooLarge = errors.New("request body too large")

func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > MaxBodyBytes {
		return nil, errTooLarge
	}
	var b []byte
	if r.ContentLength > 0 {
		b = make([]byte, 0, r.ContentLength+1)
	} else {
		b = make([]byte, 0, 4096)
	}
	lr := io.LimitReader(r.Body, MaxBodyBytes+1)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if len(b) > MaxBodyBytes {
		return nil, errTooLarge
	}
	return b, nil
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
// hop-by-hop headers and Accept-Encoding: the upstream answers uncompressed
// so usage can be read from the response.
func copyRequestHeaders(dst, src http.Header) {
	for k, vs := range src {
		switch k {
		case "X-Api-Key", "Authorization", "Host", "Content-Length", "Accept-Encoding", "Cookie":
			continue
		}
		if hopHeader(k) {
			continue
		}
		dst[k] = vs
	}
}

// OAuthBeta is the beta flag a provider requires with OAuth bearer tokens.
const OAuthBeta = "oauth-2025-04-20"

// SetCredential puts the upstream's credential on an outbound request:
// x-api-key, or for OAuth upstreams a bearer token with the OAuth beta.
func SetCredential(h http.Header, up *snapshot.Upstream) { setCredential(h, up) }

func setCredential(h http.Header, up *snapshot.Upstream) {
	if up.CredentialKind == "oauth" {
		h.Set("Authorization", "Bearer "+up.Credential)
		if b := h.Get("Anthropic-Beta"); !strings.Contains(b, OAuthBeta) {
			if b == "" {
				h.Set("Anthropic-Beta", OAuthBeta)
			} else {
				h.Set("Anthropic-Beta", b+","+OAuthBeta)
			}
		}
		return
	}
	h.Set("X-Api-Key", up.Credential)
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
	return string(body[i : i+j])
}

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
	h.Set("X-Should-Retry", strconv.FormatBool(status == 529 || status == http.StatusServiceUnavailable))
	w.WriteHeader(status)
	w.Write(b)
}

var _ http.Handler = (*Handler)(nil)
