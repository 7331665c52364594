// Package provider is a deterministic stand-in for Anthropic's Messages API,
// usable in-process (a Provider is an http.Handler) and as the bin/sim binary.
// It speaks only the provider's wire format and knows nothing of the proxy.
//
// Replies are derived from the request: the text echoes the last user
// message, tokens are whitespace-separated words, and max_tokens truncates
// the reply. A control API under /_sim/ records requests, moves the clock and
// injects faults. docs/sim.md describes the behaviour and the fault grammar.
package provider

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultAPIKey is accepted when no keys are configured.
const DefaultAPIKey = "sk-sim-key"

const (
	// maxBodyBytes is the real API's request size limit; larger bodies get 413.
	maxBodyBytes = 32 << 20
	// defaultMaxRecorded bounds the request log when Options leave it zero.
	defaultMaxRecorded = 10000
	// maxRecordedBytes bounds the bodies held by the request log, so large
	// prompts in a benchmark cannot grow the sim without limit.
	maxRecordedBytes = 64 << 20
)

// Options configures a Provider. The zero value is usable.
type Options struct {
	// APIKeys are accepted in x-api-key; each is its own account. Empty
	// means DefaultAPIKey.
	APIKeys []string
	// Clock is the time source the sim's clock starts from; nil means
	// time.Now. Moves made through SetNow, Advance or /_sim/clock apply on top.
	Clock func() time.Time
	// Now, when set, stands the clock still at this instant until moved.
	Now time.Time
	// MaxRecorded bounds the request log: 0 means 10 000, negative turns
	// recording off (for benchmarks).
	MaxRecorded int
	// Delay waits for injected latency, returning early with an error when
	// ctx ends. nil means a real timer; tests inject it to observe delays
	// without waiting for them.
	Delay func(ctx context.Context, d time.Duration) error
	// RequestsPerMinute and TokensPerMinute are the limits the rate-limit
	// headers advertise per account (0: 1000 and 1 000 000). They are not
	// enforced unless EnforceRequestsPerMinute is set; inject a 429 fault
	// to simulate limiting otherwise.
	RequestsPerMinute, TokensPerMinute int
	// EnforceRequestsPerMinute answers an account's requests past
	// RequestsPerMinute in its window 429 rate_limit_error, with
	// retry-after and the requests headers at 0 (accounts of different
	// limits are sims of different options).
	EnforceRequestsPerMinute bool
	// OAuthTokenTTL is the lifetime of issued OAuth access tokens (0: 8h).
	OAuthTokenTTL time.Duration
	// FiveHourTokenLimit and SevenDayTokenLimit are the tokens that fill an
	// OAuth account's windows (0: 100 000 and 1 000 000).
	FiveHourTokenLimit, SevenDayTokenLimit int
	// AWSKeys are the Bedrock endpoint's access key ids and their secret
	// keys; empty means DefaultAWSAccessKeyID with DefaultAWSSecretAccessKey.
	AWSKeys map[string]string
	// VertexTokenTTL is the lifetime of the Vertex token endpoint's access
	// tokens (0: 1h).
	VertexTokenTTL time.Duration
}

// Provider is the simulated provider. It is safe for concurrent use.
type Provider struct {
	opts  Options
	delay func(context.Context, time.Duration) error
	// accountOf maps a credential to its account id; fixed after New.
	accountOf map[string]string
	seq       atomic.Int64
	// queued mirrors len(faults) so requests skip the lock when none are queued.
	queued atomic.Int32

	mu       sync.Mutex
	clock    clockState
	log      requestLog
	faults   []*Fault
	accounts map[string]*account
	// OAuth: pending codes, live tokens and subscription accounts.
	codes     map[string]*authCode
	tokens    map[string]*accessToken
	refreshes map[string]*refreshToken
	subs      map[string]*subscription
	// caches are the prompt caches per account.
	caches map[string]map[[32]byte]cacheEntry
	// catalogVersion is the served price catalog's version (0 means 1).
	catalogVersion int
	// vertexTokens are the Vertex access tokens issued, with their expiry.
	vertexTokens map[string]time.Time
	// vertexTokenRequests counts the requests to the token endpoint.
	vertexTokenRequests int
	// saKey is the Vertex service account's key, made once by vertexKey.
	saOnce sync.Once
	saKey  *rsa.PrivateKey
}

var _ http.Handler = (*Provider)(nil)

// New returns a Provider; it has no side effects.
func New(o Options) *Provider {
	p := &Provider{opts: o, delay: o.Delay, accountOf: map[string]string{}}
	if p.delay == nil {
		p.delay = sleep
	}
	if p.opts.RequestsPerMinute <= 0 {
		p.opts.RequestsPerMinute = 1000
	}
	if p.opts.TokensPerMinute <= 0 {
		p.opts.TokensPerMinute = 1_000_000
	}
	keys := o.APIKeys
	if len(keys) == 0 {
		keys = []string{DefaultAPIKey}
	}
	for i, k := range keys {
		if _, dup := p.accountOf[k]; !dup {
			p.accountOf[k] = "acct_key_" + strconv.Itoa(i+1)
		}
	}
	p.resetLocked()
	return p
}

// resetLocked puts every piece of mutable state back to how New left it.
func (p *Provider) resetLocked() {
	p.clock = clockState{base: p.opts.Clock}
	if p.clock.base == nil {
		p.clock.base = time.Now
	}
	if !p.opts.Now.IsZero() {
		p.clock.fixed, p.clock.at = true, p.opts.Now
	}
	maxRec := p.opts.MaxRecorded
	if maxRec == 0 {
		maxRec = defaultMaxRecorded
	}
	p.log = requestLog{max: maxRec, maxBytes: maxRecordedBytes}
	p.faults = nil
	p.queued.Store(0)
	p.accounts = map[string]*account{}
	p.codes, p.tokens, p.refreshes, p.subs = map[string]*authCode{}, map[string]*accessToken{}, map[string]*refreshToken{}, map[string]*subscription{}
	p.caches = map[string]map[[32]byte]cacheEntry{}
	p.catalogVersion = 0
	p.vertexTokens = map[string]time.Time{}
	p.vertexTokenRequests = 0
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// clockState is the sim's clock: the base source shifted by an offset, or
// standing still at a fixed instant.
type clockState struct {
	base   func() time.Time
	offset time.Duration
	fixed  bool
	at     time.Time
}

func (c *clockState) now() time.Time {
	if c.fixed {
		return c.at
	}
	return c.base().Add(c.offset)
}

// Now is the provider's clock.
func (p *Provider) Now() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.clock.now()
}

// SetNow stands the clock still at t.
func (p *Provider) SetNow(t time.Time) {
	p.mu.Lock()
	p.clock.fixed, p.clock.at = true, t
	p.mu.Unlock()
}

// Advance moves the clock by d, whether it runs or stands still.
func (p *Provider) Advance(d time.Duration) {
	p.mu.Lock()
	if p.clock.fixed {
		p.clock.at = p.clock.at.Add(d)
	} else {
		p.clock.offset += d
	}
	p.mu.Unlock()
}

// Reset clears recorded requests, faults, accounts and the catalog version,
// and returns the clock to the one given in Options.
func (p *Provider) Reset() {
	p.mu.Lock()
	p.resetLocked()
	p.mu.Unlock()
}

func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/_sim/") {
		p.control(w, r)
		return
	}
	// The cloud endpoints check their own credentials, then come back here
	// with the Anthropic request they stand for.
	switch {
	case strings.HasPrefix(r.URL.Path, "/model/"):
		p.bedrock(w, r)
		return
	case strings.HasPrefix(r.URL.Path, vertexPrefix):
		p.vertex(w, r)
		return
	case r.URL.Path == VertexTokenPath:
		p.vertexToken(w, r)
		return
	}
	seq := p.seq.Add(1)
	body, tooLarge, err := readBody(r)
	if err != nil {
		return // the client went away mid-body; nobody is left to answer
	}
	p.record(seq, r, body)
	w.Header().Set("request-id", "req_sim_"+pad(seq))
	f, err := p.takeFault(r)
	if err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	if f != nil && f.beforeResponse(w, r, p.delay) {
		return
	}
	if f != nil && f.LostResponse {
		// The request is served in full, then the answer is lost.
		defer dropConnection(w)
		w = &lostWriter{header: http.Header{}}
	}
	if tooLarge {
		apiError(w, http.StatusRequestEntityTooLarge, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
		return
	}
	switch r.URL.Path {
	case "/v1/messages":
		if allow(w, r, http.MethodPost) {
			p.messages(w, r, seq, body, f)
		}
	case "/v1/messages/count_tokens":
		if allow(w, r, http.MethodPost) {
			p.countTokens(w, r, body)
		}
	case "/v1/models":
		if allow(w, r, http.MethodGet) {
			p.models(w, r)
		}
	case CatalogPath:
		p.catalog(w, r)
	case "/oauth/authorize":
		if allow(w, r, http.MethodGet) {
			p.authorize(w, r)
		}
	case "/v1/oauth/token":
		if allow(w, r, http.MethodPost) {
			p.token(w, r, body)
		}
	case "/api/oauth/profile":
		if allow(w, r, http.MethodGet) {
			p.profile(w, r)
		}
	case "/api/oauth/usage":
		if allow(w, r, http.MethodGet) {
			p.usageEndpoint(w, r)
		}
	case "/api/oauth/usage/limit_reset":
		if allow(w, r, http.MethodPost) {
			p.claim(w, r, body)
		}
	default:
		apiError(w, http.StatusNotFound, "not_found_error", "Not found: "+r.URL.Path)
	}
}

// readBody reads at most one byte past the size limit, so an oversized body
// is detected without holding all of it.
func readBody(r *http.Request) (body []byte, tooLarge bool, err error) {
	size := int64(512)
	if r.ContentLength > 0 {
		size = min(r.ContentLength, maxBodyBytes) + 1
	}
	buf := make([]byte, 0, size)
	for {
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		if len(buf) > maxBodyBytes {
			return buf[:maxBodyBytes], true, nil
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
	}
}

// pad formats a sequence number with at least six digits.
func pad(n int64) string {
	s := strconv.FormatInt(n, 10)
	if len(s) < 6 {
		s = "000000"[len(s):] + s
	}
	return s
}

func allow(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method {
		return true
	}
	w.Header().Set("Allow", method)
	apiError(w, http.StatusMethodNotAllowed, "invalid_request_error", "Method "+r.Method+" not allowed; use "+method)
	return false
}

// errorBody is Anthropic's error shape.
type errorBody struct {
	Type  string      `json:"type"`
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// apiError writes Anthropic's error shape; every API error goes through it.
func apiError(w http.ResponseWriter, status int, typ, msg string) {
	b, _ := json.Marshal(errorBody{Type: "error", Error: errorDetail{Type: typ, Message: msg}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// oauthPrefix marks the account id of an OAuth caller.
const oauthPrefix = "oauth:"

// authenticate checks the credential and the version header like the API
// does, and returns the caller's account: an API key's, or for an OAuth
// bearer token (which needs the OAuth beta) "oauth:<account>".
func (p *Provider) authenticate(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, ok := p.accountOf[r.Header.Get("X-Api-Key")]
	if !ok && r.Header.Get("X-Api-Key") == "" && r.Header.Get("Authorization") != "" {
		p.mu.Lock()
		name := p.bearerAccountLocked(r)
		p.mu.Unlock()
		if name == "" {
			apiError(w, http.StatusUnauthorized, "authentication_error", "invalid or expired OAuth token")
			return "", false
		}
		if !hasOAuthBeta(r) {
			apiError(w, http.StatusUnauthorized, "authentication_error", "OAuth authentication is currently not supported.")
			return "", false
		}
		id, ok = oauthPrefix+name, true
	}
	if !ok {
		apiError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return "", false
	}
	if r.Header.Get("Anthropic-Version") == "" {
		apiError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return "", false
	}
	return id, true
}

// lostWriter swallows a response that is to be lost.
type lostWriter struct{ header http.Header }

func (l *lostWriter) Header() http.Header         { return l.header }
func (l *lostWriter) Write(b []byte) (int, error) { return len(b), nil }
func (l *lostWriter) WriteHeader(int)             {}
