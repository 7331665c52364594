package admin_test

import (
	"crypto/sha256"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/admin"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// roleToken creates a scoped token of role through the break-glass token.
func (e *env) roleToken(role string) string {
	e.t.Helper()
	r := e.do("POST", "/admin/v1/admin-tokens", map[string]any{"name": role + "-bot", "role": role, "expires_in_secs": 3600})
	if r.status != 201 {
		e.t.Fatalf("token %s: %d %s", role, r.status, r.body)
	}
	return r.json(e.t)["token"].(string)
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// documentedOps are the OpenAPI operations, "METHOD /path", sorted.
func documentedOps(t *testing.T) []string {
	var out []string
	for path, ops := range openAPI(t)["paths"].(map[string]any) {
		for m := range ops.(map[string]any) {
			switch m {
			case "get", "head", "post", "put", "patch", "delete":
				out = append(out, strings.ToUpper(m)+" "+path)
			}
		}
	}
	sort.Strings(out)
	return out
}

// allowed is the role model as the issue states it, written out
// independently of the implementation's table: what each role may reach.
func allowed(role, op string) bool {
	method, path, _ := strings.Cut(op, " ")
	read := method == "GET" || method == "HEAD"
	identity := strings.HasPrefix(path, "/admin/v1/admin-tokens")
	audit := path == "/admin/v1/audit"
	usage := path == "/admin/v1/usage" || path == "/admin/v1/usage-rollups" || path == "/admin/v1/request-events" || path == "/admin/v1/request-log"
	anyone := path == "/admin/v1/openapi.json" || path == "/admin/v1/me"
	// A webhook's URL may carry the receiver's token: read as written.
	webhooks := strings.HasPrefix(path, "/admin/v1/webhooks")
	// Captured bodies carry prompts: never a viewer's.
	exchange := strings.HasSuffix(path, "/exchange")
	switch role {
	case "admin":
		return true
	case "operator":
		return !identity && !audit
	case "viewer":
		return read && !identity && !audit && !webhooks && !exchange
	case "auditor":
		return anyone || audit || usage || exchange
	}
	return false
}

// P-API-1 with roles: every documented route, tried by every role, is
// answered as the role model says: allowed routes are not refused for the
// role (401/403), the others are 403 forbidden and change nothing, even
// when they address real resources.
func TestRolesOnEveryRoute(t *testing.T) {
	t.Parallel()
	e := setup(t)
	up := e.upstream("u")["id"].(string)
	pr := e.principal("p")["id"].(string)
	key := e.do("POST", "/admin/v1/principals/"+pr+"/keys", map[string]any{"name": "k"}).json(t)["id"].(string)
	toks := map[string]string{}
	for _, role := range []string{"admin", "operator", "viewer", "auditor"} {
		toks[role] = e.roleToken(role)
	}
	victim := e.do("POST", "/admin/v1/admin-tokens", map[string]any{"name": "victim", "role": "viewer", "expires_in_secs": 3600}).json(t)["id"].(string)
	real := strings.NewReplacer("/upstreams/{id}", "/upstreams/"+up, "/principals/{id}", "/principals/"+pr, "{principal_id}", pr,
		"{key_id}", key, "/admin-tokens/{id}", "/admin-tokens/"+victim, "{id}", "x1")
	fake := strings.NewReplacer("{id}", "x1", "{principal_id}", "x2", "{key_id}", "x3")
	state := func() string {
		return e.exportOf() + string(e.do("GET", "/admin/v1/admin-tokens", nil).body) + string(e.do("GET", "/admin/v1/audit?limit=500", nil).body) +
			string(e.do("GET", "/admin/v1/webhooks", nil).body)
	}
	ops := documentedOps(t)
	if len(ops) < 50 {
		t.Fatalf("only %d operations documented", len(ops))
	}
	for _, role := range []string{"admin", "operator", "viewer", "auditor"} {
		before := state()
		var denied, passed int
		for _, op := range ops {
			method, path, _ := strings.Cut(op, " ")
			if allowed(role, op) {
				continue
			}
			r := e.do(method, real.Replace(path), map[string]any{}, bearer(toks[role])...)
			denied++
			if method == "HEAD" { // no body to read the code from
				if r.status != 403 {
					t.Errorf("%s %s: %d, want 403", role, op, r.status)
				}
				continue
			}
			wantErr(t, r, 403, "forbidden")
			if !strings.Contains(string(r.body), `"role":"`+role+`"`) {
				t.Errorf("%s %s: the refusal does not name the role: %s", role, op, r.body)
			}
		}
		if after := state(); after != before {
			t.Fatalf("%s: a refused request changed something", role)
		}
		for _, op := range ops {
			method, path, _ := strings.Cut(op, " ")
			if !allowed(role, op) {
				continue
			}
			r := e.do(method, fake.Replace(path), nil, bearer(toks[role])...)
			if r.status == 401 || r.status == 403 {
				t.Errorf("%s may %s but got %d %s", role, op, r.status, r.body)
			}
			passed++
		}
		t.Logf("%s: %d routes refused, %d reached", role, denied, passed)
	}
}

// Extra handlers follow the same table: metrics and the scheduler view
// for readers, nothing for an auditor.
func TestRolesOnExtraHandlers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for role, want := range map[string]int{"admin": 200, "operator": 200, "viewer": 200, "auditor": 403} {
		tok := e.roleToken(role)
		for _, path := range []string{"/metrics", "/admin/scheduler/"} {
			if r := e.do("GET", path, nil, bearer(tok)...); r.status != want {
				t.Errorf("%s %s: %d, want %d", role, path, r.status, want)
			}
			// A write to them is for admins only.
			if r := e.do("POST", path, nil, bearer(tok)...); (r.status == 403) != (role != "admin") {
				t.Errorf("%s POST %s: %d", role, path, r.status)
			}
		}
	}
}

// A viewer reads everything it may without meeting a secret: no
// credential, issued key, admin token or environment value appears in
// any answer it gets.
func TestViewerNeverSeesSecrets(t *testing.T) {
	t.Parallel()
	e := setup(t)
	up := e.upstream("u")["id"].(string)
	pr := e.principal("p")["id"].(string)
	issued := e.do("POST", "/admin/v1/principals/"+pr+"/keys", map[string]any{"name": "k"}).json(t)["key"].(string)
	viewer := e.roleToken("viewer")
	adminTok := e.roleToken("admin")
	secrets := []string{"sk-ant-value-u", issued, viewer, adminTok, token, "sk-ant-from-env"}
	sub := strings.NewReplacer("/upstreams/{id}", "/upstreams/"+up, "/principals/{id}", "/principals/"+pr, "{principal_id}", pr, "{id}", "x1", "{key_id}", "x3")
	reached := 0
	for _, op := range documentedOps(t) {
		method, path, _ := strings.Cut(op, " ")
		if !allowed("viewer", op) {
			continue
		}
		r := e.do(method, sub.Replace(path), nil, bearer(viewer)...)
		if r.status == 200 {
			reached++
		}
		for _, s := range secrets {
			if strings.Contains(string(r.body), s) {
				t.Errorf("viewer %s: the answer holds a secret", op)
			}
		}
	}
	if reached < 15 {
		t.Fatalf("the viewer read only %d routes successfully: the test proves little", reached)
	}
}

// Scoped tokens: created by an admin with a role, name and expiry; shown
// once; stored as SHA-256 only; refused once revoked or expired; only an
// admin manages them.
func TestScopedTokens(t *testing.T) {
	t.Parallel()
	clock := fakeclock.New(now)
	e := setup(t, func(o *options) { o.clock = clock })
	r := e.do("POST", "/admin/v1/admin-tokens", map[string]any{"name": "ci", "role": "operator", "expires_in_secs": 600})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	created := r.json(t)
	tok := created["token"].(string)
	if !strings.HasPrefix(tok, "pat-") || created["prefix"] != tok[:12] || created["created_by"] != "break-glass" ||
		int64(created["expires_at_unix_secs"].(float64)) != now.Unix()+600 {
		t.Fatalf("created %v", created)
	}
	list := e.do("GET", "/admin/v1/admin-tokens", nil)
	if strings.Contains(string(list.body), tok) || strings.Contains(string(list.body), `"token"`) {
		t.Fatalf("the list shows the token: %s", list.body)
	}
	h := sha256.Sum256([]byte(tok))
	st, err := e.st.AdminTokenByHash(t.Context(), h[:])
	if err != nil || st.Role != "operator" {
		t.Fatalf("stored %+v %v", st, err)
	}
	me := e.do("GET", "/admin/v1/me", nil, bearer(tok)...).json(t)
	if me["role"] != "operator" || me["kind"] != "token" || me["token_name"] != "ci" {
		t.Fatalf("me %v", me)
	}
	// An operator may not mint tokens, not even weaker ones.
	wantErr(t, e.do("POST", "/admin/v1/admin-tokens", map[string]any{"name": "x", "role": "viewer", "expires_in_secs": 600}, bearer(tok)...), 403, "forbidden")
	// Bad input: a clear code, nothing created.
	for body, code := range map[string]string{
		`{"name":"x","role":"root","expires_in_secs":600}`:                 "invalid_role",
		`{"name":"x","role":"viewer","expires_in_secs":10}`:                "invalid_request",
		`{"name":"x","role":"viewer"}`:                                     "invalid_request",
		`{"name":"","role":"viewer","expires_in_secs":600}`:                "invalid_request",
		`{"name":"x","role":"viewer","expires_in_secs":600,"scope":"all"}`: "invalid_request",
	} {
		wantErr(t, e.do("POST", "/admin/v1/admin-tokens", body), 400, code)
	}
	if n := len(e.do("GET", "/admin/v1/admin-tokens", nil).json(t)["tokens"].([]any)); n != 1 {
		t.Fatalf("%d tokens after refusals", n)
	}
	// Expiry is checked on every request.
	clock.Set(now.Add(600 * time.Second))
	wantErr(t, e.do("GET", "/admin/v1/status", nil, bearer(tok)...), 401, "unauthorized")
	clock.Set(now)
	if r := e.do("GET", "/admin/v1/status", nil, bearer(tok)...); r.status != 200 {
		t.Fatalf("before expiry: %d", r.status)
	}
	// Revocation takes effect at the next request; twice is fine.
	id := created["id"].(string)
	if r := e.do("DELETE", "/admin/v1/admin-tokens/"+id, nil); r.status != 200 || r.json(t)["revoked_at_unix_secs"] == nil {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	wantErr(t, e.do("GET", "/admin/v1/status", nil, bearer(tok)...), 401, "unauthorized")
	if r := e.do("DELETE", "/admin/v1/admin-tokens/"+id, nil); r.status != 200 {
		t.Fatalf("second revoke: %d", r.status)
	}
	wantErr(t, e.do("DELETE", "/admin/v1/admin-tokens/tok_missing", nil), 404, "admin_token_not_found")
	// A token-shaped string that was never issued is refused like any other.
	wantErr(t, e.do("GET", "/admin/v1/status", nil, bearer("pat-"+strings.Repeat("A", 43))...), 401, "unauthorized")
}

// Without the break-glass provider (the operator turned it off) the static
// token is refused while scoped tokens keep working.
func TestBreakGlassOff(t *testing.T) {
	t.Parallel()
	e := setup(t, func(o *options) { o.auth = []admin.Authenticator{} })
	const tok = "pat-0123456789012345678901234567890123456789abc"
	h := sha256.Sum256([]byte(tok))
	if _, err := e.st.CreateAdminToken(t.Context(), store.AdminToken{Name: "first-admin", Role: "admin", Prefix: tok[:12], Hash: h[:], ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, e.do("GET", "/admin/v1/status", nil), 401, "unauthorized")
	if r := e.do("GET", "/admin/v1/status", nil, bearer(tok)...); r.status != 200 {
		t.Fatalf("scoped admin token without break-glass: %d %s", r.status, r.body)
	}
}

// A key named by an environment variable is one the caller never sees,
// sent where the caller's base_url points: only an admin may name one. An
// operator gives the key itself, and a refused request changes nothing.
func TestOnlyAdminsNameAServerKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	op := e.roleToken("operator")
	before := len(e.rt.Current().Upstreams)
	r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "exfil", "kind": "vendor_api_key",
		"base_url": "https://evil.example", "api_key_env": "OTHER_KEY"}, bearer(op)...)
	wantErr(t, r, 403, "forbidden")
	if n := len(e.rt.Current().Upstreams); n != before {
		t.Fatalf("a refused create left %d upstreams, had %d", n, before)
	}
	r = e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "own", "kind": "vendor_api_key",
		"base_url": "https://api.example", "api_key_value": "sk-ant-operators-own-key"}, bearer(op)...)
	if r.status != 201 {
		t.Fatalf("operator giving its own key: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	r = e.do("PATCH", "/admin/v1/upstreams/"+id, map[string]any{"api_key_env": "OTHER_KEY"}, append(bearer(op), "If-Match", r.header.Get("ETag"))...)
	wantErr(t, r, 403, "forbidden")
	if su := e.rt.Current().Upstream(id); su == nil || su.Credential == serverEnv["OTHER_KEY"] {
		t.Fatal("the operator's upstream took the server's key")
	}
	r = e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "by-admin", "kind": "vendor_api_key",
		"base_url": "https://api.example", "api_key_env": "OTHER_KEY"})
	if r.status != 201 {
		t.Fatalf("admin naming api_key_env: %d %s", r.status, r.body)
	}
}
