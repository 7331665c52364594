package admin

import (
	"net/http"
	"slices"
)

// perm is what a route needs; roleGrants says which roles hold it.
type perm string

const (
	// permAny: every authenticated caller (the API description, who am I).
	permAny perm = "any"
	// permRead: configuration and live state, which never carry secrets.
	permRead perm = "read"
	// permUsage: usage, spend and the request log's metadata.
	permUsage perm = "usage"
	// permAudit: the audit trail.
	permAudit perm = "audit"
	// permWrite: changes to upstreams, principals, keys and plugins.
	permWrite perm = "write"
	// permIdentity: scoped tokens and the other identity settings.
	permIdentity perm = "identity"
	// permCapture: the bodies of captured exchanges, prompts included:
	// never a viewer's.
	permCapture perm = "capture"
)

// roleGrants is the whole role model. A viewer never reaches a secret
// because no read route returns one (credentials are write-only and an
// issued key is shown only in the answer to the write that issued it).
var roleGrants = map[Role][]perm{
	RoleAdmin:    {permAny, permRead, permUsage, permAudit, permWrite, permIdentity, permCapture},
	RoleOperator: {permAny, permRead, permUsage, permWrite, permCapture},
	RoleViewer:   {permAny, permRead, permUsage},
	RoleAuditor:  {permAny, permUsage, permAudit, permCapture},
}

func (r Role) may(p perm) bool { return slices.Contains(roleGrants[r], p) }

// Perms lists what the role may do, for the dashboard.
func (r Role) Perms() []string {
	out := []string{}
	for _, p := range roleGrants[r] {
		out = append(out, string(p))
	}
	return out
}

// routePerms is the route table of the authorization: every route of
// routes() and identityRoutes() has a line here (authz_test checks it). A
// route missing from it is open to admins only.
var routePerms = map[string]perm{
	"POST /admin/v1/upstreams":                                        permWrite,
	"GET /admin/v1/upstreams":                                         permRead,
	"GET /admin/v1/upstreams/{id}":                                    permRead,
	"HEAD /admin/v1/upstreams/{id}":                                   permRead,
	"PUT /admin/v1/upstreams/{id}":                                    permWrite,
	"PATCH /admin/v1/upstreams/{id}":                                  permWrite,
	"DELETE /admin/v1/upstreams/{id}":                                 permWrite,
	"POST /admin/v1/upstreams/{id}/enable":                            permWrite,
	"POST /admin/v1/upstreams/{id}/disable":                           permWrite,
	"GET /admin/v1/upstreams/{id}/limit-resets":                       permRead,
	"GET /admin/v1/upstreams/{id}/models":                             permRead,
	"POST /admin/v1/upstreams/{id}/oauth/start":                       permWrite,
	"POST /admin/v1/upstreams/{id}/oauth/complete":                    permWrite,
	"POST /admin/v1/upstreams/{id}/oauth/revoke":                      permWrite,
	"POST /admin/v1/upstreams/{id}/limit-resets/claim":                permWrite,
	"POST /admin/v1/principals":                                       permWrite,
	"GET /admin/v1/principals":                                        permRead,
	"GET /admin/v1/principals/{id}":                                   permRead,
	"HEAD /admin/v1/principals/{id}":                                  permRead,
	"PUT /admin/v1/principals/{id}":                                   permWrite,
	"PATCH /admin/v1/principals/{id}":                                 permWrite,
	"DELETE /admin/v1/principals/{id}":                                permWrite,
	"POST /admin/v1/principals/{id}/enable":                           permWrite,
	"POST /admin/v1/principals/{id}/disable":                          permWrite,
	"PUT /admin/v1/principals/{id}/allowed_models":                    permWrite,
	"POST /admin/v1/principals/{id}/keys":                             permWrite,
	"GET /admin/v1/principals/{id}/keys":                              permRead,
	"DELETE /admin/v1/principals/{id}/keys/{key_id}":                  permWrite,
	"GET /admin/v1/principals/{principal_id}/plugin-chain":            permRead,
	"POST /admin/v1/principals/{principal_id}/plugin-chain":           permWrite,
	"POST /admin/v1/principals/{principal_id}/plugin-chain/reorder":   permWrite,
	"POST /admin/v1/principals/{principal_id}/plugin-chain/rebalance": permWrite,
	"PUT /admin/v1/plugin-chain-entries/{id}":                         permWrite,
	"DELETE /admin/v1/plugin-chain-entries/{id}":                      permWrite,
	"POST /admin/v1/plugins/wasm":                                     permWrite,
	"GET /admin/v1/plugins/registry":                                  permRead,
	"GET /admin/v1/plugins/registry/{id}":                             permRead,
	"GET /admin/v1/plugins/registry/{id}/references":                  permRead,
	"PATCH /admin/v1/plugins/registry/{id}":                           permWrite,
	"DELETE /admin/v1/plugins/registry/{id}":                          permWrite,
	"GET /admin/v1/status":                                            permRead,
	"GET /admin/v1/export":                                            permRead,
	"GET /admin/v1/request-events":                                    permUsage,
	"GET /admin/v1/usage-rollups":                                     permUsage,
	"GET /admin/v1/request-log":                                       permUsage,
	"GET /admin/v1/traffic":                                           permRead,
	"GET /admin/v1/overview":                                          permRead,
	"GET /admin/v1/usage":                                             permUsage,
	"GET /admin/v1/price-catalog":                                     permRead,
	"GET /admin/v1/openapi.json":                                      permAny,

	"GET /admin/v1/me":                   permAny,
	"GET /admin/v1/audit":                permAudit,
	"POST /admin/v1/admin-tokens":        permIdentity,
	"GET /admin/v1/admin-tokens":         permIdentity,
	"DELETE /admin/v1/admin-tokens/{id}": permIdentity,

	// Webhooks are read as they are written: a receiver's URL often
	// carries its own token, so viewers do not see them.
	"POST /admin/v1/webhooks":                permWrite,
	"GET /admin/v1/webhooks":                 permWrite,
	"GET /admin/v1/webhooks/{id}":            permWrite,
	"PUT /admin/v1/webhooks/{id}":            permWrite,
	"DELETE /admin/v1/webhooks/{id}":         permWrite,
	"POST /admin/v1/webhooks/{id}/test":      permWrite,
	"GET /admin/v1/webhooks/{id}/deliveries": permWrite,
	"GET /admin/v1/alerts":                   permRead,

	"GET /admin/v1/request-events/{id}/exchange": permCapture,
}

// extraPerms are the handlers of Deps.Extra by pattern; others (the
// profiler) are for admins only.
var extraPerms = map[string]perm{
	"/metrics":          permRead,
	"/admin/scheduler/": permRead,
}

// permOf is what the route (a mux pattern with its method, or an Extra
// pattern) needs.
func permOf(pattern string) perm {
	if p, ok := routePerms[pattern]; ok {
		return p
	}
	if p, ok := extraPerms[pattern]; ok {
		return p
	}
	return permIdentity
}

// forbidden refuses a route the caller's role does not hold.
func forbidden(id Identity, r *http.Request) *APIError {
	e := newErr("forbidden", "the %s role may not %s %s", id.Role, r.Method, r.URL.Path)
	e.Details = map[string]any{"role": id.Role}
	return e
}

// MeResponse is who the caller is and what the role allows.
type MeResponse struct {
	Kind      string   `json:"kind"`
	Subject   string   `json:"subject"`
	Issuer    string   `json:"issuer,omitempty"`
	TokenName string   `json:"token_name,omitempty"`
	Email     string   `json:"email,omitempty"`
	Role      Role     `json:"role"`
	Perms     []string `json:"permissions"`
}

func (a *api) me(w http.ResponseWriter, r *http.Request) error {
	id, _ := IdentityFrom(r.Context())
	writeJSON(w, http.StatusOK, MeResponse{Kind: id.Kind, Subject: id.Subject, Issuer: id.Issuer, TokenName: id.TokenName,
		Email: id.Email, Role: id.Role, Perms: id.Role.Perms()})
	return nil
}
