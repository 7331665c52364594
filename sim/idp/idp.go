// Package idp is a simulated OpenID Connect issuer: discovery, a JWKS
// whose signing key can be rotated, an authorization endpoint that signs
// in a chosen user at once (no login page), and a token endpoint with
// PKCE (S256). It speaks only the wire formats, so the gateway's sign-in is
// tested against it as against Keycloak or Dex.
package idp

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// User is someone the issuer can sign in.
type User struct {
	Subject string
	Email   string
	Groups  []string
}

// Client is a registered relying party.
type Client struct {
	ID, Secret   string
	RedirectURIs []string
}

// Issuer is the simulated issuer; serve it with net/http and call
// SetIssuer with the URL it is reachable at.
type Issuer struct {
	mu       sync.Mutex
	issuer   string
	now      func() time.Time
	keys     []*signingKey // keys[0] signs; all are published
	users    map[string]User
	clients  map[string]Client
	signedIn string // the subject the authorization endpoint signs in
	codes    map[string]grant
	// Audience is the aud of issued access tokens (default: the client id).
	audience string
	mux      *http.ServeMux
}

type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

type grant struct {
	client, redirect, subject, nonce, challenge string
	expires                                     time.Time
}

// New returns an issuer with one signing key, on the system clock.
func New() *Issuer {
	i := &Issuer{now: time.Now, users: map[string]User{}, clients: map[string]Client{}, codes: map[string]grant{}}
	i.Rotate(true)
	i.mux = http.NewServeMux()
	i.mux.HandleFunc("GET /.well-known/openid-configuration", i.discovery)
	i.mux.HandleFunc("GET /keys", i.jwks)
	i.mux.HandleFunc("GET /authorize", i.authorize)
	i.mux.HandleFunc("POST /token", i.token)
	return i
}

func (i *Issuer) ServeHTTP(w http.ResponseWriter, r *http.Request) { i.mux.ServeHTTP(w, r) }

// SetIssuer sets the issuer identifier (the URL the handler is served at).
func (i *Issuer) SetIssuer(u string) {
	i.mu.Lock()
	i.issuer = strings.TrimSuffix(u, "/")
	i.mu.Unlock()
}

// SetClock replaces the clock tokens are stamped with.
func (i *Issuer) SetClock(now func() time.Time) { i.mu.Lock(); i.now = now; i.mu.Unlock() }

// SetAudience sets the aud of access tokens.
func (i *Issuer) SetAudience(aud string) { i.mu.Lock(); i.audience = aud; i.mu.Unlock() }

// AddUser registers or replaces a user.
func (i *Issuer) AddUser(u User) { i.mu.Lock(); i.users[u.Subject] = u; i.mu.Unlock() }

// AddClient registers a relying party.
func (i *Issuer) AddClient(c Client) { i.mu.Lock(); i.clients[c.ID] = c; i.mu.Unlock() }

// SignInAs makes the authorization endpoint sign in this user.
func (i *Issuer) SignInAs(subject string) { i.mu.Lock(); i.signedIn = subject; i.mu.Unlock() }

// Rotate makes a new signing key current. With keepOld the previous keys
// stay published (a rotation in progress); without, only the new one is.
func (i *Issuer) Rotate(keepOld bool) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	sk := &signingKey{id: randomString(8), key: k}
	i.mu.Lock()
	defer i.mu.Unlock()
	if keepOld {
		i.keys = append([]*signingKey{sk}, i.keys...)
	} else {
		i.keys = []*signingKey{sk}
	}
}

// Issuer returns the issuer identifier.
func (i *Issuer) Issuer() string { i.mu.Lock(); defer i.mu.Unlock(); return i.issuer }

func (i *Issuer) discovery(w http.ResponseWriter, _ *http.Request) {
	iss := i.Issuer()
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer": iss, "authorization_endpoint": iss + "/authorize", "token_endpoint": iss + "/token", "jwks_uri": iss + "/keys",
		"response_types_supported": []string{"code"}, "subject_types_supported": []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"}, "code_challenge_methods_supported": []string{"S256"},
		"scopes_supported": []string{"openid", "email", "profile", "groups"},
	})
}

func (i *Issuer) jwks(w http.ResponseWriter, _ *http.Request) {
	i.mu.Lock()
	set := jose.JSONWebKeySet{}
	for _, k := range i.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.key.PublicKey, KeyID: k.id, Algorithm: "RS256", Use: "sig"})
	}
	i.mu.Unlock()
	writeJSON(w, http.StatusOK, set)
}

func (i *Issuer) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	i.mu.Lock()
	c, ok := i.clients[q.Get("client_id")]
	user, known := i.users[i.signedIn]
	i.mu.Unlock()
	redirect := q.Get("redirect_uri")
	if !ok || !contains(c.RedirectURIs, redirect) {
		http.Error(w, "unknown client or redirect_uri", http.StatusBadRequest)
		return
	}
	to, _ := url.Parse(redirect)
	back := to.Query()
	back.Set("state", q.Get("state"))
	switch {
	case q.Get("response_type") != "code":
		back.Set("error", "unsupported_response_type")
	case q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "":
		back.Set("error", "invalid_request")
	case !known:
		back.Set("error", "access_denied")
	default:
		code := randomString(24)
		i.mu.Lock()
		i.codes[code] = grant{client: c.ID, redirect: redirect, subject: user.Subject, nonce: q.Get("nonce"),
			challenge: q.Get("code_challenge"), expires: i.now().Add(time.Minute)}
		i.mu.Unlock()
		back.Set("code", code)
	}
	to.RawQuery = back.Encode()
	http.Redirect(w, r, to.String(), http.StatusFound)
}

func (i *Issuer) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, "invalid_request")
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	code := r.PostForm.Get("code")
	i.mu.Lock()
	c, known := i.clients[id]
	g, found := i.codes[code]
	delete(i.codes, code) // a code is used once, whatever happens
	user := i.users[g.subject]
	now := i.now()
	i.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	switch {
	case !known || c.Secret != secret:
		oauthError(w, "invalid_client")
	case r.PostForm.Get("grant_type") != "authorization_code" || !found || g.client != id ||
		g.redirect != r.PostForm.Get("redirect_uri") || !now.Before(g.expires):
		oauthError(w, "invalid_grant")
	case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		oauthError(w, "invalid_grant")
	default:
		idToken := i.Sign(i.claims(user, id, time.Hour, map[string]any{"nonce": g.nonce}))
		access := i.AccessToken(user.Subject, time.Hour)
		writeJSON(w, http.StatusOK, map[string]any{"access_token": access, "id_token": idToken, "token_type": "Bearer", "expires_in": 3600})
	}
}

// AccessToken issues a JWT access token for a user, valid for ttl from now.
func (i *Issuer) AccessToken(subject string, ttl time.Duration) string {
	i.mu.Lock()
	user, aud := i.users[subject], i.audience
	if aud == "" {
		for id := range i.clients {
			aud = id
		}
	}
	i.mu.Unlock()
	return i.Sign(i.claims(user, aud, ttl, nil))
}

func (i *Issuer) claims(u User, aud string, ttl time.Duration, extra map[string]any) map[string]any {
	i.mu.Lock()
	now, iss := i.now(), i.issuer
	i.mu.Unlock()
	c := map[string]any{"iss": iss, "sub": u.Subject, "aud": aud, "iat": now.Unix(), "exp": now.Add(ttl).Unix(),
		"email": u.Email, "groups": u.Groups}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

// Claims returns the claims the issuer would put in an access token, to
// alter before Sign (a wrong audience, an expired token).
func (i *Issuer) Claims(subject, aud string, ttl time.Duration) map[string]any {
	i.mu.Lock()
	u := i.users[subject]
	i.mu.Unlock()
	return i.claims(u, aud, ttl, nil)
}

// Sign signs claims with the current key.
func (i *Issuer) Sign(claims map[string]any) string {
	i.mu.Lock()
	k := i.keys[0]
	i.mu.Unlock()
	return SignWith(k.key, k.id, claims)
}

// SignWith signs claims with any RSA key (a forger's, in tests).
func SignWith(key *rsa.PrivateKey, kid string, claims map[string]any) string {
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		panic(err)
	}
	out, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		panic(err)
	}
	return out
}

func oauthError(w http.ResponseWriter, code string) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
