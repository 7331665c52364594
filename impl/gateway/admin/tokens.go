package admin

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Scoped admin tokens: "pat-" and 32 random bytes in unpadded URL-safe
// base64; only their SHA-256 is stored, as for proxy keys.
const (
	tokenPrefix     = "pat-"
	tokenLen        = len(tokenPrefix) + 43
	tokenDisplayLen = 12
	// Tokens live from a minute to a year: automation renews them, and
	// nothing lives forever.
	minTokenLife = time.Minute
	maxTokenLife = 366 * 24 * time.Hour
)

func newAdminToken() (plain, display string, hash []byte) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	plain = tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	h := sha256.Sum256([]byte(plain))
	return plain, plain[:tokenDisplayLen], h[:]
}

// scopedTokens authenticates the scoped tokens in the store; the answer
// reflects a revocation or expiry at the next request.
type scopedTokens struct {
	st    store.IdentityStore
	clock clock.Clock
}

func (s scopedTokens) Authenticate(r *http.Request) (Identity, bool) {
	got, ok := Bearer(r)
	if !ok || len(got) != tokenLen || !strings.HasPrefix(got, tokenPrefix) {
		return Identity{}, false
	}
	h := sha256.Sum256([]byte(got))
	t, err := s.st.AdminTokenByHash(r.Context(), h[:])
	if err != nil || t.RevokedAt != nil || !s.clock.Now().Before(t.ExpiresAt) {
		return Identity{}, false
	}
	role, ok := ParseRole(t.Role)
	if !ok {
		return Identity{}, false
	}
	return Identity{Kind: KindToken, Subject: t.ID, TokenName: t.Name, Role: role}, true
}

// CreateAdminTokenBody asks for a scoped token.
type CreateAdminTokenBody struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// ExpiresInSecs is the token's life from now.
	ExpiresInSecs int64 `json:"expires_in_secs"`
}

// AdminTokenResponse describes a scoped token; Token is set only in the
// answer to its creation.
type AdminTokenResponse struct {
	ID                string `json:"id"`
	Name              string `json:"name"`
	Role              string `json:"role"`
	Prefix            string `json:"prefix"`
	Token             string `json:"token,omitempty"`
	CreatedBy         string `json:"created_by"`
	CreatedAtUnixSecs int64  `json:"created_at_unix_secs"`
	ExpiresAtUnixSecs int64  `json:"expires_at_unix_secs"`
	RevokedAtUnixSecs *int64 `json:"revoked_at_unix_secs"`
}

func adminTokenResponse(t *store.AdminToken) AdminTokenResponse {
	return AdminTokenResponse{ID: t.ID, Name: t.Name, Role: t.Role, Prefix: t.Prefix, CreatedBy: t.CreatedBy,
		CreatedAtUnixSecs: t.CreatedAt.Unix(), ExpiresAtUnixSecs: t.ExpiresAt.Unix(), RevokedAtUnixSecs: unixp(t.RevokedAt)}
}

func (a *api) createAdminToken(w http.ResponseWriter, r *http.Request) error {
	var b CreateAdminTokenBody
	if err := decode(r, &b); err != nil {
		return err
	}
	if err := validName(b.Name); err != nil {
		return err
	}
	if _, ok := ParseRole(b.Role); !ok {
		return newErr("invalid_role", "role: must be one of admin, operator, viewer, auditor")
	}
	life := time.Duration(b.ExpiresInSecs) * time.Second
	if b.ExpiresInSecs < int64(minTokenLife/time.Second) || b.ExpiresInSecs > int64(maxTokenLife/time.Second) {
		return invalid("expires_in_secs: required, %d to %d", int64(minTokenLife/time.Second), int64(maxTokenLife/time.Second))
	}
	by, _ := IdentityFrom(r.Context())
	plain, display, hash := newAdminToken()
	t, err := a.Store.CreateAdminToken(r.Context(), store.AdminToken{Name: b.Name, Role: b.Role, Prefix: display, Hash: hash,
		ExpiresAt: a.Clock.Now().Add(life), CreatedBy: actorName(by)})
	if err != nil {
		return fromStore(err, resAdminToken, "")
	}
	out := adminTokenResponse(t)
	out.Token = plain // the only time the plaintext leaves the server
	w.Header().Set("Location", "/admin/v1/admin-tokens/"+t.ID)
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (a *api) listAdminTokens(w http.ResponseWriter, r *http.Request) error {
	ts, err := a.Store.ListAdminTokens(r.Context())
	if err != nil {
		return fromStore(err, resAdminToken, "")
	}
	out := struct {
		Tokens []AdminTokenResponse `json:"tokens"`
	}{Tokens: []AdminTokenResponse{}}
	for i := range ts {
		out.Tokens = append(out.Tokens, adminTokenResponse(&ts[i]))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *api) revokeAdminToken(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	t, err := a.Store.RevokeAdminToken(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return newErr("admin_token_not_found", "no admin token with id %q", id)
	}
	if err != nil {
		return fromStore(err, resAdminToken, id)
	}
	writeJSON(w, http.StatusOK, adminTokenResponse(t))
	return nil
}

// actorName names an identity in one string (the audit trail's actor,
// a token's creator).
func actorName(id Identity) string {
	switch {
	case id.Kind == KindToken:
		return "token:" + id.TokenName
	case id.Email != "":
		return id.Email
	}
	return id.Subject
}
