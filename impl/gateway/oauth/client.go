// Package oauth connects vendor_oauth upstreams to a subscription provider:
// the authorization-code flow with PKCE, token exchange and rotation, the
// token refresh job, and a small client for the provider's account
// endpoints (profile, usage, limit-reset coupon claims). Tokens are sealed
// at rest and never logged; errors carry the provider's error code only.
package oauth

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/credential"
)

// The real provider's endpoints and the public client of its CLI, used
// when an upstream does not name its own.
const (
	DefaultAuthorizeURL = "https://claude.ai/oauth/authorize"
	DefaultTokenURL     = "https://console.anthropic.com/v1/oauth/token"
	DefaultClientID     = "9d1c250a-e61b-44d9-88ed-5944d1962f5e"
	DefaultRedirectURI  = "https://console.anthropic.com/oauth/code/callback"
	DefaultScopes       = "org:create_api_key user:profile user:inference"
	// InferenceScope lets a token call the Messages API directly.
	InferenceScope = "user:inference"
)

// Token is the sealed credential of an OAuth upstream.
type Token struct {
	AccessToken      string `json:"access_token"`
	RefreshToken     string `json:"refresh_token"`
	ExpiresAt        int64  `json:"expires_at"` // unix seconds
	Scope            string `json:"scope"`
	AccountUUID      string `json:"account_uuid,omitempty"`
	OrganizationUUID string `json:"organization_uuid,omitempty"`
}

// HasScope reports whether the token was granted scope.
func (t *Token) HasScope(scope string) bool {
	for _, s := range strings.Fields(t.Scope) {
		if s == scope {
			return true
		}
	}
	return false
}

// ProviderError is a refusal by the provider: its HTTP status and error
// code, never the request's secrets.
type ProviderError struct {
	Op      string
	Status  int
	Code    string
	Message string
}

func (e *ProviderError) Error() string {
	msg := fmt.Sprintf("%s: provider answered %d", e.Op, e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Permanent reports whether repeating the request cannot help (a refused
// grant or credential, a malformed request); 408, 429 and 5xx are transient.
func (e *ProviderError) Permanent() bool {
	return e.Status >= 400 && e.Status < 500 && e.Status != http.StatusRequestTimeout && e.Status != http.StatusTooManyRequests
}

// IsPermanent reports whether err is a permanent provider refusal.
func IsPermanent(err error) bool {
	var pe *ProviderError
	return errors.As(err, &pe) && pe.Permanent()
}

// Client talks to the provider.
type Client struct {
	HTTP     *http.Client
	ClientID string
	// Clock dates a token's expiry; nil is the real clock, so the zero
	// Client works like a zero http.Client.
	Clock clock.Clock
}

// httpClient is c.HTTP under the credential redirect policy: token
// requests carry a code or refresh token in their body, usage and coupon
// calls a bearer token, and none may follow a redirect to another origin.
func (c *Client) httpClient() *http.Client {
	return credential.Client(c.HTTP, 30*time.Second)
}

func (c *Client) clientID() string {
	if c.ClientID != "" {
		return c.ClientID
	}
	return DefaultClientID
}

// maxResponse bounds what is read of a provider response.
const maxResponse = 1 << 20

// do sends a request and decodes a 2xx JSON body into out.
func (c *Client) do(req *http.Request, op string, out any) error {
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", op, scrubURL(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return fmt.Errorf("%s: reading the response: %w", op, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return providerError(op, resp.StatusCode, body)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s: the provider's response is not the expected JSON: %w", op, err)
	}
	return nil
}

// scrubURL drops the query of a *url.Error's URL (it may carry a code).
func scrubURL(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, "?"); i >= 0 {
		if j := strings.Index(msg[i:], "\""); j >= 0 {
			msg = msg[:i] + msg[i+j:]
		}
	}
	return errors.New(msg)
}

// providerError reads the error code of either error shape the provider
// uses: OAuth's {"error":"invalid_grant","error_description":…} and the
// API's {"type":"error","error":{"type":…,"message":…}}.
func providerError(op string, status int, body []byte) error {
	pe := &ProviderError{Op: op, Status: status}
	var oauthShape struct {
		Error       json.RawMessage `json:"error"`
		Description string          `json:"error_description"`
	}
	if json.Unmarshal(body, &oauthShape) == nil && len(oauthShape.Error) > 0 {
		var code string
		var apiShape struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}
		if json.Unmarshal(oauthShape.Error, &code) == nil {
			pe.Code, pe.Message = code, oauthShape.Description
		} else if json.Unmarshal(oauthShape.Error, &apiShape) == nil {
			pe.Code, pe.Message = apiShape.Type, apiShape.Message
		}
	}
	if len(pe.Message) > 200 {
		pe.Message = pe.Message[:200]
	}
	return pe
}

type tokenResponse struct {
	TokenType    string `json:"token_type"`
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	ExpiresIn    int64  `json:"expires_in"`
	Scope        string `json:"scope"`
	Account      struct {
		UUID string `json:"uuid"`
	} `json:"account"`
	Organization struct {
		UUID string `json:"uuid"`
	} `json:"organization"`
}

func (c *Client) token(ctx context.Context, tokenURL, op string, body map[string]string) (*Token, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tokenURL, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	var tr tokenResponse
	sent := clock.Or(c.Clock).Now()
	if err := c.do(req, op, &tr); err != nil {
		return nil, err
	}
	if tr.AccessToken == "" || tr.RefreshToken == "" {
		return nil, fmt.Errorf("%s: the provider returned no access or refresh token", op)
	}
	t := &Token{AccessToken: tr.AccessToken, RefreshToken: tr.RefreshToken, Scope: tr.Scope,
		AccountUUID: tr.Account.UUID, OrganizationUUID: tr.Organization.UUID}
	if tr.ExpiresIn > 0 {
		// Counted from when the request was sent: never later than the
		// provider's own expiry.
		t.ExpiresAt = sent.Add(time.Duration(tr.ExpiresIn) * time.Second).Unix()
	}
	return t, nil
}

// Exchange trades an authorization code for tokens.
func (c *Client) Exchange(ctx context.Context, tokenURL, code, verifier, redirectURI, state string) (*Token, error) {
	return c.token(ctx, tokenURL, "token exchange", map[string]string{
		"grant_type": "authorization_code", "code": code, "code_verifier": verifier,
		"redirect_uri": redirectURI, "client_id": c.clientID(), "state": state,
	})
}

// Refresh trades a refresh token for new tokens; the provider rotates the
// refresh token, so the old one is dead once this returns.
func (c *Client) Refresh(ctx context.Context, tokenURL, refreshToken string) (*Token, error) {
	return c.token(ctx, tokenURL, "token refresh", map[string]string{
		"grant_type": "refresh_token", "refresh_token": refreshToken, "client_id": c.clientID(),
	})
}

func (c *Client) bearer(ctx context.Context, method, url, access string, body any) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return nil, err
	}
	credential.Set(req.Header, credential.OAuth, access)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// Profile is the account a token belongs to.
type Profile struct {
	AccountUUID      string
	OrganizationUUID string
}

// Profile resolves the live account identity of access.
func (c *Client) Profile(ctx context.Context, baseURL, access string) (*Profile, error) {
	req, err := c.bearer(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/api/oauth/profile", access, nil)
	if err != nil {
		return nil, err
	}
	var p struct {
		Account struct {
			UUID string `json:"uuid"`
		} `json:"account"`
		Organization struct {
			UUID string `json:"uuid"`
		} `json:"organization"`
	}
	if err := c.do(req, "profile", &p); err != nil {
		return nil, err
	}
	if p.Account.UUID == "" {
		return nil, errors.New("profile: the provider returned no account uuid")
	}
	return &Profile{AccountUUID: p.Account.UUID, OrganizationUUID: p.Organization.UUID}, nil
}

// Window is one usage window of the usage endpoint.
type Window struct {
	Utilization float64    `json:"utilization"`
	ResetsAt    *time.Time `json:"resets_at"`
}

// Coupon is the reset-coupon status of the usage endpoint.
type Coupon struct {
	Available bool       `json:"available"`
	CouponID  *string    `json:"coupon_id"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// Usage is one response of the usage endpoint.
type Usage struct {
	FiveHour   *Window         `json:"five_hour"`
	SevenDay   *Window         `json:"seven_day"`
	ExtraUsage json.RawMessage `json:"extra_usage"`
	// Coupon is nil when the response carried no coupon data.
	Coupon *Coupon `json:"limit_reset_coupon"`
}

// UsagePath is the provider's usage endpoint. cedar_ember=1 asks for the
// reset-coupon status; skip_spend is deliberately not sent, so the
// provider keeps collecting extra usage.
const UsagePath = "/api/oauth/usage?cedar_ember=1"

// Usage fetches quota windows, extra usage and coupon status in one request.
func (c *Client) Usage(ctx context.Context, baseURL, access string) (*Usage, error) {
	req, err := c.bearer(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+UsagePath, access, nil)
	if err != nil {
		return nil, err
	}
	var u Usage
	if err := c.do(req, "usage poll", &u); err != nil {
		return nil, err
	}
	return &u, nil
}

// ClaimPath is the provider's limit-reset claim endpoint.
const ClaimPath = "/api/oauth/usage/limit_reset"

// ClaimReset sends the one claim POST for couponID.
func (c *Client) ClaimReset(ctx context.Context, baseURL, access, couponID string) error {
	req, err := c.bearer(ctx, http.MethodPost, strings.TrimRight(baseURL, "/")+ClaimPath, access, map[string]string{"coupon_id": couponID})
	if err != nil {
		return err
	}
	return c.do(req, "limit-reset claim", nil)
}

// NewVerifier returns a PKCE code verifier (43 characters of base64url).
func NewVerifier() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Challenge is the S256 challenge of a verifier.
func Challenge(verifier string) string {
	h := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(h[:])
}
