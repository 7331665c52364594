package provider

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// The Vertex endpoint answers Vertex AI's rawPredict and streamRawPredict
// for Anthropic's publisher models, with bearer tokens the sim's own token
// endpoint issued for its service account: a client holding the service
// account key (ServiceAccountJSON) gets tokens the way Google's libraries
// get them, by a signed JWT assertion, and nothing else is accepted.

const (
	// VertexAnthropicVersion is the body field Vertex requires.
	VertexAnthropicVersion = "vertex-2023-10-16"
	// VertexTokenPath is the sim's OAuth2 token endpoint.
	VertexTokenPath = "/vertex/token"
	// VertexServiceAccountEmail is the client_email of the sim's account.
	VertexServiceAccountEmail = "pillar-sim@sim-project.iam.gserviceaccount.com"
	vertexKeyID               = "sim-key-1"
	defaultVertexTokenTTL     = time.Hour
	vertexPrefix              = "/v1/projects/"
)

// vertexKey is the service account's key pair, made on first use (RSA
// generation is too slow to pay in every New).
func (p *Provider) vertexKey() *rsa.PrivateKey {
	p.saOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err) // crypto/rand does not fail
		}
		p.saKey = k
	})
	return p.saKey
}

// ServiceAccountJSON is a Google service account key file for the sim's
// account whose token_uri is baseURL's token endpoint: what an operator
// would download from the cloud console, pointed at the sim.
func (p *Provider) ServiceAccountJSON(baseURL string) []byte {
	der, _ := x509.MarshalPKCS8PrivateKey(p.vertexKey())
	b, _ := json.MarshalIndent(map[string]string{
		"type": "service_account", "project_id": "sim-project", "private_key_id": vertexKeyID,
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": VertexServiceAccountEmail, "client_id": "100000000000000000001",
		"token_uri": strings.TrimRight(baseURL, "/") + VertexTokenPath,
	}, "", "  ")
	return b
}

// VertexTokenRequests is how many requests the token endpoint received,
// granted or not.
func (p *Provider) VertexTokenRequests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.vertexTokenRequests
}

// vertexToken serves the JWT-bearer grant (RFC 7523) of Google's token
// endpoint: the assertion must be signed by the account's key, addressed to
// this endpoint and unexpired.
func (p *Provider) vertexToken(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.vertexTokenRequests++
	p.mu.Unlock()
	fail := func(msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		b, _ := json.Marshal(map[string]string{"error": "invalid_grant", "error_description": msg})
		w.Write(b)
	}
	if r.Method != http.MethodPost {
		fail("use POST")
		return
	}
	if err := r.ParseForm(); err != nil {
		fail(err.Error())
		return
	}
	if r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		fail("unsupported grant_type")
		return
	}
	tok, err := jwt.ParseSigned(r.PostForm.Get("assertion"), []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		fail("malformed assertion: " + err.Error())
		return
	}
	var c struct {
		jwt.Claims
		Scope string `json:"scope"`
	}
	if err := tok.Claims(&p.vertexKey().PublicKey, &c); err != nil {
		fail("Invalid JWT Signature.")
		return
	}
	now := p.Now()
	aud := "http://" + r.Host + VertexTokenPath
	if err := c.Claims.ValidateWithLeeway(jwt.Expected{Issuer: VertexServiceAccountEmail, AnyAudience: jwt.Audience{aud, "https://" + r.Host + VertexTokenPath}, Time: now}, time.Minute); err != nil {
		fail("Invalid JWT: " + err.Error())
		return
	}
	if !strings.Contains(c.Scope, "https://www.googleapis.com/auth/cloud-platform") {
		fail("the assertion does not ask for the cloud-platform scope")
		return
	}
	ttl := p.opts.VertexTokenTTL
	if ttl <= 0 {
		ttl = defaultVertexTokenTTL
	}
	access := randomToken("ya29.sim-")
	p.mu.Lock()
	p.vertexTokens[access] = now.Add(ttl)
	p.mu.Unlock()
	writeJSON(w, map[string]any{"access_token": access, "token_type": "Bearer", "expires_in": int(ttl / time.Second)})
}

// vertex serves POST /v1/projects/{p}/locations/{l}/publishers/anthropic/
// models/{model}:rawPredict and :streamRawPredict; the model
// count-tokens:rawPredict counts tokens.
func (p *Provider) vertex(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, vertexPrefix), "/")
	if len(parts) != 7 || parts[1] != "locations" || parts[3] != "publishers" || parts[4] != "anthropic" || parts[5] != "models" {
		googleError(w, http.StatusNotFound, "NOT_FOUND", "unknown resource "+r.URL.Path)
		return
	}
	model, method, _ := strings.Cut(parts[6], ":")
	if method != "rawPredict" && method != "streamRawPredict" {
		googleError(w, http.StatusNotFound, "NOT_FOUND", "unknown method "+method)
		return
	}
	if r.Method != http.MethodPost {
		googleError(w, http.StatusMethodNotAllowed, "INVALID_ARGUMENT", "use POST")
		return
	}
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	p.mu.Lock()
	exp, ok := p.vertexTokens[tok]
	live := ok && p.clock.now().Before(exp)
	p.mu.Unlock()
	if !live {
		googleError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
		return
	}
	body, tooLarge, err := readBody(r)
	if err != nil {
		return
	}
	if tooLarge {
		googleError(w, http.StatusRequestEntityTooLarge, "INVALID_ARGUMENT", "request too large")
		return
	}
	path, inner, msg := "/v1/messages", []byte(nil), ""
	if model == "count-tokens" {
		path = "/v1/messages/count_tokens"
		inner, msg = vertexCountBody(body)
	} else {
		inner, msg = cloudBody(body, model, method == "streamRawPredict", true, VertexAnthropicVersion)
	}
	if msg != "" {
		apiError(w, http.StatusBadRequest, "invalid_request_error", msg)
		return
	}
	vw := &vertexWriter{ResponseWriter: w}
	p.ServeHTTP(vw, p.innerRequest(r, path, inner))
	vw.finish()
}

// vertexCountBody is count-tokens' body: the Messages body with its model,
// and the version field as for rawPredict.
func vertexCountBody(body []byte) ([]byte, string) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, "request body is not valid JSON: " + err.Error()
	}
	var v string
	if json.Unmarshal(m["anthropic_version"], &v) != nil || v != VertexAnthropicVersion {
		return nil, "anthropic_version must be " + strconv.Quote(VertexAnthropicVersion)
	}
	delete(m, "anthropic_version")
	b, _ := json.Marshal(m)
	return b, ""
}

// googleError writes Google's API error shape, which Vertex uses for what
// it refuses itself (authentication, quota) before a model sees the request.
func googleError(w http.ResponseWriter, code int, status, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "message": msg, "status": status}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	w.Write(b)
}

// vertexWriter passes the Messages handler's answer through, as Vertex
// does for Anthropic models, except a rate limit: Vertex's own quota
// refusal, in Google's shape.
type vertexWriter struct {
	http.ResponseWriter
	throttled bool
}

func (v *vertexWriter) Unwrap() http.ResponseWriter { return v.ResponseWriter }

func (v *vertexWriter) WriteHeader(status int) {
	if status == http.StatusTooManyRequests {
		v.throttled = true
		return
	}
	v.ResponseWriter.WriteHeader(status)
}

func (v *vertexWriter) Write(b []byte) (int, error) {
	if v.throttled {
		return len(b), nil
	}
	return v.ResponseWriter.Write(b)
}

func (v *vertexWriter) finish() {
	if v.throttled {
		v.Header().Del("Content-Length")
		googleError(v.ResponseWriter, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", "Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: anthropic-claude. Please submit a quota increase request.")
	}
}

// vertexBase is the base URL a request reached the sim at.
func vertexBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return (&url.URL{Scheme: scheme, Host: r.Host}).String()
}
