package admin

import "testing"

// Every route has a line in the authorization table, and the table names
// no route that does not exist: a new route cannot be left to the
// admins-only fallback by accident, nor a stale line linger.
func TestRoutePermsCoverEveryRoute(t *testing.T) {
	t.Parallel()
	a := New(Deps{}).(*api)
	seen := map[string]bool{}
	for _, r := range append(a.routes(), a.identityRoutes()...) {
		key := r.method + " " + r.pattern
		seen[key] = true
		if _, ok := routePerms[key]; !ok {
			t.Errorf("%s has no line in routePerms", key)
		}
	}
	for key := range routePerms {
		if !seen[key] {
			t.Errorf("routePerms names %s, which is no route", key)
		}
	}
	if permOf("GET /admin/v1/not-in-the-table") != permIdentity || RoleOperator.may(permIdentity) {
		t.Fatal("a route missing from the table must be for admins only")
	}
}
