package cloud

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/proxyerr"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// VertexVersion is the anthropic_version Vertex AI requires in the body.
const VertexVersion = "vertex-2023-10-16"

// VertexScope is the OAuth2 scope Vertex AI's tokens need.
const VertexScope = "https://www.googleapis.com/auth/cloud-platform"

// tokenEarly is how long before its expiry a Vertex token is replaced, so
// a request never leaves with one that expires on the way.
const tokenEarly = 5 * time.Minute

// tokenTimeout bounds one token fetch: it is not tied to the request
// waiting for it, and a silent token endpoint must not hold that request
// past its own deadlines.
const tokenTimeout = 30 * time.Second

// VertexEndpoint is Vertex AI's endpoint for region ("global" has no
// region prefix).
func VertexEndpoint(region string) string {
	if region == "global" {
		return "https://aiplatform.googleapis.com"
	}
	return "https://" + region + "-aiplatform.googleapis.com"
}

// Vertex sends Anthropic Messages requests to Vertex AI's rawPredict and
// streamRawPredict of Anthropic's publisher models.
type Vertex struct {
	Endpoint string
	Project  string
	Region   string
	// Tokens gives the bearer token of every request (VertexTokens).
	Tokens oauth2.TokenSource
	// Models maps a client's model to this upstream's model id
	// (claude-...@date).
	Models map[string]string
	Next   http.RoundTripper
	// Metrics counts the outcomes (nil: not counted).
	Metrics *Metrics
}

var _ http.RoundTripper = (*Vertex)(nil)

// VertexTokens is the token source of a service account key (JSON), or
// with a nil key of the host's application default credentials. Tokens
// are fetched through next, the relay's transport, and replaced
// tokenEarly before they expire by clk (nil: the real clock); m counts
// the fetches (nil: not counted).
func VertexTokens(ctx context.Context, key []byte, next http.RoundTripper, clk clock.Clock, m *Metrics) (oauth2.TokenSource, error) {
	ctx = context.WithValue(ctx, oauth2.HTTPClient, &http.Client{Transport: next, Timeout: tokenTimeout})
	if key == nil {
		creds, err := google.FindDefaultCredentials(ctx, VertexScope)
		if err != nil {
			return nil, err
		}
		key = creds.JSON
		if !isServiceAccount(key) {
			// The metadata server, a user's or an external account: the
			// library's source, behind its own wall-clock cache.
			return ahead(creds.TokenSource, clk, m), nil
		}
	}
	// A service account's key (sealed, or the file the host's
	// GOOGLE_APPLICATION_CREDENTIALS names) gives a source whose cache
	// fetch can pass, so every refresh is decided by now.
	cfg, err := google.JWTConfigFromJSON(key, VertexScope)
	if err != nil {
		return nil, err
	}
	return ahead(cfg.TokenSource(ctx), clk, m), nil
}

func ahead(src oauth2.TokenSource, clk clock.Clock, m *Metrics) *aheadTokens {
	return &aheadTokens{src: src, clock: clock.Or(clk), wall: time.Now, refreshed: m.tokenFetched}
}

func isServiceAccount(key []byte) bool {
	var k struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(key, &k) == nil && k.Type == "service_account"
}

// ServiceAccountTokenURI is the token endpoint a service account key names
// (where its signed assertions are sent), "" when it names none.
func ServiceAccountTokenURI(key []byte) (string, error) {
	var k struct {
		Type       string `json:"type"`
		TokenURI   string `json:"token_uri"`
		PrivateKey string `json:"private_key"`
		Email      string `json:"client_email"`
	}
	if err := json.Unmarshal(key, &k); err != nil {
		return "", errors.New("not a JSON service account key")
	}
	if k.Type != "service_account" || k.PrivateKey == "" || k.Email == "" {
		return "", errors.New(`a service account key needs "type": "service_account", private_key and client_email`)
	}
	return k.TokenURI, nil
}

func (v *Vertex) RoundTrip(req *http.Request) (*http.Response, error) {
	c, answer, err := accept(req, v.Models)
	if c == nil {
		return answer, err
	}
	model, method := c.model, "rawPredict"
	var extra map[string]json.RawMessage
	switch {
	case c.count:
		// count-tokens takes the model in the body.
		m, _ := json.Marshal(c.model)
		model, extra = "count-tokens", map[string]json.RawMessage{"model": m}
	case c.stream:
		method, extra = "streamRawPredict", map[string]json.RawMessage{"stream": json.RawMessage("true")}
	}
	body := c.encode(VertexVersion, extra)
	target := strings.TrimRight(v.Endpoint, "/") + "/v1/projects/" + url.PathEscape(v.Project) + "/locations/" +
		url.PathEscape(v.Region) + "/publishers/anthropic/models/" + url.PathEscape(model) + ":" + method
	out, err := http.NewRequestWithContext(req.Context(), http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	tok, err := token(req.Context(), v.Tokens)
	if err != nil {
		v.Metrics.observe(store.KindVertex, outcomeCredential)
		return nil, fmt.Errorf("vertex: no access token: %w", err)
	}
	out.Header.Set("Content-Type", "application/json")
	tok.SetAuthHeader(out)
	resp, err := v.Next.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	resp.Request = req
	if resp.StatusCode >= 400 {
		r, outcome := vertexError(req, resp)
		v.Metrics.observe(store.KindVertex, outcome)
		return r, nil
	}
	v.Metrics.observe(store.KindVertex, outcomeOK)
	// Vertex passes Anthropic's answer and its events through unchanged
	// but for the model's name.
	resp.Header = keepHeaders(resp.Header, "Request-Id", "X-Request-Id")
	switch {
	case c.count:
		return resp, nil
	case c.stream:
		resp.Body = &startModel{src: resp.Body, model: c.asked}
		return resp, nil
	}
	return renameAnswer(resp, c.asked)
}

// token is ts's token, or ctx's error once ctx ends first: a fetch in
// flight is left to finish for the requests after this one (the source
// keeps what it gets).
func token(ctx context.Context, ts oauth2.TokenSource) (*oauth2.Token, error) {
	type result struct {
		t   *oauth2.Token
		err error
	}
	ch := make(chan result, 1)
	go func() {
		t, err := ts.Token()
		ch <- result{t, err}
	}()
	select {
	case r := <-ch:
		return r.t, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// googleStatus is the Anthropic status and type of a Google API error
// status, for what Vertex refuses before a model sees the request.
var googleStatus = errorMap{
	"RESOURCE_EXHAUSTED":  {429, "rate_limit_error"},
	"UNAVAILABLE":         {529, "overloaded_error"},
	"UNAUTHENTICATED":     {401, "authentication_error"},
	"PERMISSION_DENIED":   {403, "permission_error"},
	"NOT_FOUND":           {404, "not_found_error"},
	"INVALID_ARGUMENT":    {400, "invalid_request_error"},
	"FAILED_PRECONDITION": {400, "invalid_request_error"},
	"DEADLINE_EXCEEDED":   {504, "api_error"},
	"INTERNAL":            {500, "api_error"},
}

// vertexError passes an Anthropic error through and answers Google's
// error shape in Anthropic's; outcome names it for the metrics (the
// Anthropic error type of a passed-through one).
func vertexError(req *http.Request, resp *http.Response) (r *http.Response, outcome string) {
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Type  string `json:"type"`
		Error json.RawMessage
	}
	h := keepHeaders(resp.Header, "Request-Id", "X-Request-Id")
	if json.Unmarshal(raw, &e) == nil && e.Type == "error" {
		return jsonResponse(req, resp.StatusCode, raw, h), errorTypeOf(resp.StatusCode)
	}
	var g struct {
		Error struct {
			Message string `json:"message"`
			Status  string `json:"status"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &g)
	m := googleStatus.of(g.Error.Status, resp.StatusCode)
	msg := "Vertex AI " + g.Error.Status + ": " + g.Error.Message
	return anthropicError(req, proxyerr.New(m.status, m.typ, msg), h), googleStatus.outcome(g.Error.Status)
}
