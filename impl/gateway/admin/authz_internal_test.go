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

// The audit trail's documents lose every string under a secret's name,
// at any depth, and keep everything else (flags such as has_credential
// included).
func TestRedact(t *testing.T) {
	t.Parallel()
	in := `{"name":"u","has_credential":true,"api_key_value":"sk-1","oauth":{"refresh_token":"r","token_url":"https://x"},` +
		`"keys":[{"key":"sk-px-2","prefix":"sk-px-"}],"big":12345678901234567890,"code":null}`
	got := string(redact([]byte(in)))
	want := `{"api_key_value":"[redacted]","big":12345678901234567890,"code":null,"has_credential":true,"keys":[{"key":"[redacted]","prefix":"sk-px-"}],"name":"u","oauth":{"refresh_token":"[redacted]","token_url":"https://x"}}`
	if got != want {
		t.Fatalf("redact:\n got %s\nwant %s", got, want)
	}
	if redact([]byte("not json")) != nil {
		t.Fatal("a body that is not JSON was kept")
	}
}
