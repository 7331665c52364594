package admin

// identityRoutes are the routes of who may use the API and what they did:
// kept apart from routes() so the role model reads in one place.
func (a *api) identityRoutes() []route {
	return []route{
		{"GET", "/admin/v1/me", a.me},
		{"GET", "/admin/v1/audit", a.audit},
		{"POST", "/admin/v1/admin-tokens", a.createAdminToken},
		{"GET", "/admin/v1/admin-tokens", a.listAdminTokens},
		{"DELETE", "/admin/v1/admin-tokens/{id}", a.revokeAdminToken},
	}
}
