package admin

import (
	"context"
	"crypto/subtle"
	"net/http"
	"strings"
)

// Role is what a caller of the admin API may do (authz.go).
type Role string

const (
	// RoleAdmin may do everything, identity settings included.
	RoleAdmin Role = "admin"
	// RoleOperator changes upstreams, principals, keys and plugins.
	RoleOperator Role = "operator"
	// RoleViewer reads configuration and live state, never a secret.
	RoleViewer Role = "viewer"
	// RoleAuditor reads the audit trail and usage only.
	RoleAuditor Role = "auditor"
)

// Roles are the roles, most powerful first.
var Roles = []Role{RoleAdmin, RoleOperator, RoleViewer, RoleAuditor}

// ParseRole accepts a role's name.
func ParseRole(s string) (Role, bool) {
	for _, r := range Roles {
		if string(r) == s {
			return r, true
		}
	}
	return "", false
}

// Kinds of credential an Identity was established by; recorded in the
// audit trail as the actor's kind.
const (
	KindBreakGlass = "break_glass" // the static admin token
	KindToken      = "token"       // a scoped admin token
	KindOIDC       = "oidc"        // an OIDC access token or sign-in session
)

// Identity is who sent a request and the role they act in.
type Identity struct {
	Kind      string
	Subject   string
	Issuer    string
	TokenName string
	// Email is shown to people (dashboard, audit); Subject is what the
	// issuer guarantees stable.
	Email string
	Role  Role
}

// Authenticator verifies a request's credentials. ok is false when the
// request carries none it recognises, or they are not valid.
type Authenticator interface {
	Authenticate(r *http.Request) (id Identity, ok bool)
}

// StaticToken accepts one Bearer token, compared in constant time: the
// break-glass credential, with the admin role. An empty token accepts
// nothing.
type StaticToken struct{ Token string }

var _ Authenticator = StaticToken{}

// Authenticate implements Authenticator.
func (s StaticToken) Authenticate(r *http.Request) (Identity, bool) {
	got, ok := Bearer(r)
	if s.Token == "" || !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.Token)) != 1 {
		return Identity{}, false
	}
	return Identity{Kind: KindBreakGlass, Subject: "break-glass", Role: RoleAdmin}, true
}

// Bearer returns the request's Bearer credential.
func Bearer(r *http.Request) (string, bool) {
	a := r.Header.Get("Authorization")
	if len(a) < 7 || !strings.EqualFold(a[:7], "bearer ") {
		return "", false
	}
	v := strings.TrimSpace(a[7:])
	return v, v != ""
}

type identityKey struct{}

// IdentityFrom returns the identity an admin request was authenticated as.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}
