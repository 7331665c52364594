package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// P-UP-1, P-UP-4, P-UP-5: create, the response fields and the defaults.
func TestUpstreamCreate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "main", "kind": "vendor_api_key", "base_url": "https://api.example", "api_key_value": "sk-ant-literal-secret"})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	u := r.json(t)
	id := u["id"].(string)
	if !strings.HasPrefix(id, "up_") || r.header.Get("Location") != "/admin/v1/upstreams/"+id || r.header.Get("ETag") != `"1"` {
		t.Fatalf("id %q, Location %q, ETag %q", id, r.header.Get("Location"), r.header.Get("ETag"))
	}
	// P-UP-4: every field of UpstreamResponse.
	want := map[string]any{"name": "main", "kind": "vendor_api_key", "base_url": "https://api.example", "enabled": true,
		"warmup_enabled": false, "warmup_dialect_plugin": nil, "spec_revision": 1.0, "credential_mode": "api_key", "has_credential": true,
		"created_at_unix_secs": float64(now.Unix()), "updated_at_unix_secs": float64(now.Unix()),
		"status": map[string]any{"last_apply_error": nil, "last_apply_at_unix_secs": nil, "last_warmup_at_unix_secs": nil,
			"routable": true, "unroutable_reason": nil}}
	for k, v := range want {
		if fmt.Sprint(u[k]) != fmt.Sprint(v) {
			t.Errorf("%s = %v, want %v", k, u[k], v)
		}
	}
	if bytes.Contains(r.body, []byte("sk-ant-literal-secret")) {
		t.Fatal("the credential was returned")
	}
	// The snapshot serves the new upstream before the response is sent.
	if su := e.rt.Current().Upstream(id); su == nil || su.Credential != "sk-ant-literal-secret" {
		t.Fatalf("snapshot upstream %+v", su)
	}
	// GET answers the same resource; only the apply status, written by the
	// snapshot rebuild, has moved on.
	g := e.do("GET", "/admin/v1/upstreams/"+id, nil).json(t)
	if g["status"].(map[string]any)["last_apply_at_unix_secs"] != float64(now.Unix()) {
		t.Fatalf("apply status after create: %v", g["status"])
	}
	delete(g, "status")
	delete(u, "status")
	if fmt.Sprint(g) != fmt.Sprint(u) {
		t.Fatalf("GET after create:\n%v\n%v", g, u)
	}

	// P-UP-5: vendor_oauth defaults warm-up on (it has no effect until
	// OAuth completes), and holds no credential yet.
	o := e.oauthUpstream("sub")
	if o["warmup_enabled"] != true || o["credential_mode"] != nil || o["has_credential"] != false {
		t.Fatalf("oauth upstream %v", o)
	}
	// An explicit false, and enabled=false, are kept.
	r = e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "sub2", "kind": "vendor_oauth", "base_url": "http://127.0.0.1:9/x", "warmup_enabled": false, "enabled": false})
	if r.status != 201 || r.json(t)["warmup_enabled"] != false || r.json(t)["enabled"] != false || r.json(t)["base_url"] != "http://127.0.0.1:9/x" {
		t.Fatalf("explicit flags: %d %s", r.status, r.body)
	}
	// The vendor_oauth default may be asked for explicitly too.
	if r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "sub3", "kind": "vendor_oauth", "base_url": "https://api.example", "warmup_enabled": true}); r.status != 201 {
		t.Fatalf("oauth warmup true: %d %s", r.status, r.body)
	}
	if l := e.do("GET", "/admin/v1/upstreams", nil).list(t); len(l) != 4 || l[0].(map[string]any)["id"] != id {
		t.Fatalf("list %v", l)
	}
}

// P-UP-2: api_key_env is read once from the server environment, the value
// is stored sealed to the upstream's id, and neither the value nor the
// variable name is kept in the database.
func TestUpstreamCredentialFromEnv(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "env", "kind": "vendor_api_key", "base_url": "https://api.example", "api_key_env": "ANTHROPIC_KEY"})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	if e.getenvCalls["ANTHROPIC_KEY"] != 1 {
		t.Fatalf("the variable was read %d times", e.getenvCalls["ANTHROPIC_KEY"])
	}
	stored, err := e.st.GetUpstream(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := e.box.Open(stored.Credential, credential.UpstreamAD(stored))
	if err != nil || string(pt) != serverEnv["ANTHROPIC_KEY"] {
		t.Fatalf("stored credential opens to %q, %v", pt, err)
	}
	// Sealed to this upstream and its origin: the ciphertext opens for
	// neither another id nor another origin.
	if _, err := e.box.Open(stored.Credential, credential.AD("up_other", stored.Kind, stored.BaseURL, "")); err == nil {
		t.Fatal("credential not bound to the upstream id")
	}
	if _, err := e.box.Open(stored.Credential, credential.AD(id, stored.Kind, "https://elsewhere.example", "")); err == nil {
		t.Fatal("credential not bound to the upstream's origin")
	}
	// Changing the variable later changes nothing: the value was copied.
	db := e.dbBytes()
	for _, s := range []string{"ANTHROPIC_KEY", serverEnv["ANTHROPIC_KEY"]} {
		if bytes.Contains(db, []byte(s)) || bytes.Contains(r.body, []byte(s)) {
			t.Fatalf("%q is stored or returned", s)
		}
	}

	// PUT with another variable replaces the credential, again read once.
	p := e.do("PUT", "/admin/v1/upstreams/"+id, map[string]any{"name": "env", "base_url": "https://api.example", "api_key_env": "OTHER_KEY"})
	if p.status != 200 || p.json(t)["spec_revision"] != 2.0 || e.getenvCalls["OTHER_KEY"] != 1 {
		t.Fatalf("put: %d %s (reads %v)", p.status, p.body, e.getenvCalls)
	}
	if su := e.rt.Current().Upstream(id); su == nil || su.Credential != serverEnv["OTHER_KEY"] {
		t.Fatalf("snapshot credential after PUT: %+v", su)
	}
	// PUT without api_key_* keeps the credential.
	p = e.do("PUT", "/admin/v1/upstreams/"+id, map[string]any{"name": "env2", "base_url": "https://api.example"})
	if p.status != 200 || p.json(t)["has_credential"] != true || e.rt.Current().Upstream(id).Credential != serverEnv["OTHER_KEY"] {
		t.Fatalf("put keeping the credential: %d %s", p.status, p.body)
	}
	// And api_key_value replaces it.
	p = e.do("PUT", "/admin/v1/upstreams/"+id, map[string]any{"name": "env2", "base_url": "https://api.example", "api_key_value": "sk-ant-third"})
	if p.status != 200 || e.rt.Current().Upstream(id).Credential != "sk-ant-third" {
		t.Fatalf("put with a value: %d %s", p.status, p.body)
	}
}

// P-UP-3, P-UP-12: create refusals, each with its code; none changes anything.
func TestUpstreamCreateRefusals(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.upstream("main")
	base := func(kv ...any) map[string]any {
		b := map[string]any{"name": "new", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_value": "k"}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(b, kv[i].(string))
			} else {
				b[kv[i].(string)] = kv[i+1]
			}
		}
		return b
	}
	cases := []struct {
		name   string
		body   any
		status int
		code   string
		says   string
	}{
		{"name taken", base("name", "main"), 409, "conflict", ""},
		{"both api keys", base("api_key_env", "ANTHROPIC_KEY"), 400, "conflicting_api_key", ""},
		{"both api keys, env unset", base("api_key_env", "UNSET"), 400, "conflicting_api_key", ""},
		{"ftp url", base("base_url", "ftp://a.example"), 400, "invalid_location", "base_url"},
		{"user info", base("base_url", "https://user:hunter2@a.example"), 400, "invalid_location", ""},
		{"relative url", base("base_url", "/v1"), 400, "invalid_location", ""},
		{"no host", base("base_url", "https://"), 400, "invalid_location", ""},
		{"query", base("base_url", "https://a.example/?x=1"), 400, "invalid_location", ""},
		{"empty query", base("base_url", "https://a.example?"), 400, "invalid_location", ""},
		{"fragment", base("base_url", "https://a.example/#f"), 400, "invalid_location", ""},
		{"not a url", base("base_url", "api.example"), 400, "invalid_location", ""},
		{"missing base_url", base("base_url", nil), 400, "invalid_location", ""},
		{"unknown kind", base("kind", "vendor_magic"), 400, "invalid_request", "kind"},
		{"missing kind", base("kind", nil), 400, "invalid_request", "kind"},
		{"empty name", base("name", ""), 400, "invalid_request", "name"},
		{"name too long", base("name", strings.Repeat("n", 129)), 400, "invalid_request", "name"},
		{"name with spaces around", base("name", " x "), 400, "invalid_request", "name"},
		{"name with a control character", base("name", "a\nb"), 400, "invalid_request", "name"},
		{"no credential", base("api_key_value", nil), 400, "invalid_request", "api_key"},
		{"empty value", base("api_key_value", ""), 400, "invalid_request", "api_key_value"},
		{"unset variable", base("api_key_value", nil, "api_key_env", "UNSET"), 400, "invalid_request", "UNSET"},
		{"empty variable name", base("api_key_value", nil, "api_key_env", ""), 400, "invalid_request", "api_key_env"},
		{"oauth with a key", base("kind", "vendor_oauth"), 400, "invalid_request", "vendor_oauth"},
		{"oauth with an env key", base("kind", "vendor_oauth", "api_key_value", nil, "api_key_env", "ANTHROPIC_KEY"), 400, "invalid_request", "vendor_oauth"},
		{"warm-up on an api-key upstream", base("warmup_enabled", true), 400, "warmup_requires_oauth_credentials", ""},
		{"unknown field", base("colour", "red"), 400, "invalid_request", "colour"},
		{"wrong type", base("enabled", "yes"), 400, "invalid_request", "enabled"},
		{"wrong type of name", base("name", 7), 400, "invalid_request", "name"},
		{"array body", "[]", 400, "invalid_request", ""},
		{"malformed JSON", `{"name":`, 400, "invalid_request", "malformed"},
		{"two values", `{"name":"a","kind":"vendor_api_key","base_url":"https://a.example","api_key_value":"k"} {}`, 400, "invalid_request", "more than one"},
		{"empty body", "", 400, "invalid_request", "body"},
	}
	for _, c := range cases {
		e.unchanged(c.name, func() {
			r := e.do("POST", "/admin/v1/upstreams", c.body)
			wantErr(t, r, c.status, c.code)
			if c.says != "" {
				wantMessage(t, r, c.says)
			}
			if bytes.Contains(r.body, []byte("hunter2")) {
				t.Fatalf("%s: the message repeats a password", c.name)
			}
		})
	}
	if e.getenvCalls["UNSET"] != 1 {
		t.Fatalf("UNSET read %d times; a conflicting request must not read the environment", e.getenvCalls["UNSET"])
	}
}

// P-UP-9, P-UP-6: GET and HEAD carry the ETag; HEAD has no body.
func TestUpstreamGetAndHead(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.upstream("u")["id"].(string)
	p := "/admin/v1/upstreams/" + id
	g := e.do("GET", p, nil)
	if g.status != 200 || g.header.Get("ETag") != `"1"` || g.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("GET: %d ETag %q", g.status, g.header.Get("ETag"))
	}
	h := e.do("HEAD", p, nil)
	if h.status != 200 || h.header.Get("ETag") != `"1"` || len(h.body) != 0 {
		t.Fatalf("HEAD: %d ETag %q body %q", h.status, h.header.Get("ETag"), h.body)
	}
	// The HEAD ETag is the If-Match of the next PATCH.
	if r := e.do("PATCH", p, map[string]any{"enabled": false}, "If-Match", h.header.Get("ETag")); r.status != 200 || r.header.Get("ETag") != `"2"` {
		t.Fatalf("PATCH with the HEAD ETag: %d %s", r.status, r.body)
	}
	if r := e.do("HEAD", "/admin/v1/upstreams/up_nope", nil); r.status != 404 || len(r.body) != 0 {
		t.Fatalf("HEAD unknown: %d %q", r.status, r.body)
	}
	wantErr(t, e.do("GET", "/admin/v1/upstreams/up_nope", nil), 404, "upstream_not_found")

	// P-UP-6, P-UP-7: background writes (status, credential) never bump spec_revision.
	ctx := context.Background()
	msg := "apply failed"
	if err := e.st.SetUpstreamStatus(ctx, id, store.UpstreamStatus{LastApplyError: &msg}); err != nil {
		t.Fatal(err)
	}
	// The warm-up stamp has its own writer (scheduler area: one writer per status column).
	if _, err := e.st.WriteCycleKey(ctx, id, "5h:1", now); err != nil {
		t.Fatal(err)
	}
	ct, _ := e.box.Seal([]byte("sk-ant-rotated"), credential.AD(id, store.KindVendorAPIKey, "https://api.example", ""))
	if _, err := e.st.SetUpstreamCredential(ctx, id, "api_key", ct); err != nil {
		t.Fatal(err)
	}
	g = e.do("GET", p, nil)
	st := g.json(t)["status"].(map[string]any)
	if g.header.Get("ETag") != `"2"` || g.json(t)["spec_revision"] != 2.0 || st["last_apply_error"] != msg || st["last_warmup_at_unix_secs"] != float64(now.Unix()) {
		t.Fatalf("after background writes: ETag %s %s", g.header.Get("ETag"), g.body)
	}
}

// P-UP-8, P-API-2: PATCH needs If-Match; every form of it is understood.
func TestUpstreamPatchIfMatch(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.upstream("u")["id"].(string)
	p := "/admin/v1/upstreams/" + id
	e.unchanged("refused PATCHes", func() {
		wantErr(t, e.do("PATCH", p, map[string]any{"enabled": false}), 428, "precondition_required")
		for _, bad := range []string{"abc", `"1`, `"x"`, "0", `"-1"`, "+1", `W/`, `"1", "2"`, "1.0"} {
			r := e.do("PATCH", p, map[string]any{"enabled": false}, "If-Match", bad)
			wantErr(t, r, 400, "invalid_request")
			wantMessage(t, r, "If-Match")
		}
		wantErr(t, e.do("PATCH", p, map[string]any{"enabled": false}, "If-Match", `"2"`), 409, "stale_revision")
		wantErr(t, e.do("PATCH", p, map[string]any{}, "If-Match", `"1"`), 400, "invalid_request")
		wantErr(t, e.do("PATCH", p, map[string]any{"kind": "vendor_oauth"}, "If-Match", `"1"`), 400, "invalid_request")
		wantErr(t, e.do("PATCH", p, map[string]any{"base_url": "nope"}, "If-Match", `"1"`), 400, "invalid_location")
		wantErr(t, e.do("PATCH", p, map[string]any{"name": ""}, "If-Match", `"1"`), 400, "invalid_request")
		wantErr(t, e.do("PATCH", "/admin/v1/upstreams/up_nope", map[string]any{"enabled": false}, "If-Match", `"1"`), 404, "upstream_not_found")
	})
	rev := 1
	for _, form := range []string{`"%d"`, `%d`, `W/"%d"`, `*`, ` "%d" `} {
		im := form
		if strings.Contains(form, "%d") {
			im = fmt.Sprintf(form, rev)
		}
		r := e.do("PATCH", p, map[string]any{"enabled": rev%2 == 0}, "If-Match", im)
		rev++
		if r.status != 200 || r.header.Get("ETag") != fmt.Sprintf(`"%d"`, rev) || r.json(t)["spec_revision"] != float64(rev) {
			t.Fatalf("If-Match %s: %d %s ETag %s", im, r.status, r.body, r.header.Get("ETag"))
		}
	}
	r := e.do("PATCH", p, map[string]any{"name": "renamed", "base_url": "https://api.example/v2"}, "If-Match", fmt.Sprint(rev))
	if r.status != 200 || r.json(t)["name"] != "renamed" || r.json(t)["base_url"] != "https://api.example/v2" {
		t.Fatalf("PATCH name/base_url: %d %s", r.status, r.body)
	}
	// A name taken by another upstream.
	e.upstream("other")
	wantErr(t, e.do("PATCH", p, map[string]any{"name": "other"}, "If-Match", "*"), 409, "conflict")
}

// P-WARM-R2: warmup_enabled=true needs OAuth credentials.
func TestUpstreamWarmupRequiresOAuthCredentials(t *testing.T) {
	t.Parallel()
	e := setup(t)
	api := e.upstream("key")["id"].(string)
	oauth := e.oauthUpstream("sub")["id"].(string)
	e.unchanged("refused warm-up", func() {
		// On an API-key upstream, by PATCH and by PUT.
		wantErr(t, e.do("PATCH", "/admin/v1/upstreams/"+api, map[string]any{"warmup_enabled": true}, "If-Match", `"1"`), 400, "warmup_requires_oauth_credentials")
		wantErr(t, e.do("PUT", "/admin/v1/upstreams/"+api, map[string]any{"name": "key", "base_url": "https://api.example", "warmup_enabled": true}), 400, "warmup_requires_oauth_credentials")
		// On a vendor_oauth upstream before OAuth completed.
		wantErr(t, e.do("PATCH", "/admin/v1/upstreams/"+oauth, map[string]any{"warmup_enabled": true}, "If-Match", `"1"`), 400, "warmup_requires_oauth_credentials")
	})
	// Turning it off needs nothing; turning it back on without credentials is refused.
	if r := e.do("PATCH", "/admin/v1/upstreams/"+oauth, map[string]any{"warmup_enabled": false}, "If-Match", `"1"`); r.status != 200 || r.json(t)["warmup_enabled"] != false {
		t.Fatalf("disable warm-up: %d %s", r.status, r.body)
	}
	wantErr(t, e.do("PUT", "/admin/v1/upstreams/"+oauth, map[string]any{"name": "sub", "base_url": "https://api.example", "warmup_enabled": true}), 400, "warmup_requires_oauth_credentials")
	// Once the OAuth flow stored credentials, warm-up can be turned on.
	ct, _ := e.box.Seal([]byte(`{"access_token":"at"}`), credential.AD(oauth, store.KindVendorOAuth, "https://api.example", ""))
	if _, err := e.st.SetUpstreamCredential(context.Background(), oauth, "oauth", ct); err != nil {
		t.Fatal(err)
	}
	r := e.do("PATCH", "/admin/v1/upstreams/"+oauth, map[string]any{"warmup_enabled": true}, "If-Match", `"2"`)
	if r.status != 200 || r.json(t)["warmup_enabled"] != true || r.json(t)["credential_mode"] != "oauth" {
		t.Fatalf("enable warm-up with credentials: %d %s", r.status, r.body)
	}
	// A PUT that keeps the vendor_oauth default (GET, edit, PUT) is not a
	// request to turn warm-up on.
	fresh := e.oauthUpstream("fresh")
	r = e.do("PUT", "/admin/v1/upstreams/"+fresh["id"].(string), map[string]any{"name": "fresh2", "base_url": "https://api.example", "warmup_enabled": true, "kind": "vendor_oauth"})
	if r.status != 200 || r.json(t)["warmup_enabled"] != true {
		t.Fatalf("round-trip PUT: %d %s", r.status, r.body)
	}
}

// P-UP-6, P-API-2: PUT replaces the user-managed fields under If-Match.
func TestUpstreamPut(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.upstream("u")["id"].(string)
	e.upstream("taken")
	p := "/admin/v1/upstreams/" + id
	put := map[string]any{"name": "renamed", "base_url": "https://api.example/b"}
	e.unchanged("refused PUTs", func() {
		wantErr(t, e.do("PUT", p, put, "If-Match", `"2"`), 409, "stale_revision")
		wantErr(t, e.do("PUT", "/admin/v1/upstreams/up_nope", put), 404, "upstream_not_found")
		wantErr(t, e.do("PUT", p, map[string]any{"name": "taken", "base_url": "https://api.example/b"}), 409, "conflict")
		wantErr(t, e.do("PUT", p, map[string]any{"name": "x", "base_url": "https://api.example/b", "kind": "vendor_oauth"}), 400, "invalid_request")
		wantErr(t, e.do("PUT", p, map[string]any{"name": "x", "base_url": "https://api.example/b", "kind": "other"}), 400, "invalid_request")
		wantErr(t, e.do("PUT", p, map[string]any{"name": "x", "base_url": "nope"}), 400, "invalid_location")
		wantErr(t, e.do("PUT", p, map[string]any{"name": "x", "base_url": "https://api.example/b", "api_key_env": "ANTHROPIC_KEY", "api_key_value": "k"}), 400, "conflicting_api_key")
		wantErr(t, e.do("PUT", p, map[string]any{"base_url": "https://api.example/b"}), 400, "invalid_request")
		wantErr(t, e.do("PUT", p, map[string]any{"name": "x", "base_url": "https://api.example/b", "spec_revision": 9}), 400, "invalid_request")
	})
	r := e.do("PUT", p, put, "If-Match", `"1"`)
	if r.status != 200 || r.header.Get("ETag") != `"2"` {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	u := r.json(t)
	if u["name"] != "renamed" || u["base_url"] != "https://api.example/b" || u["kind"] != "vendor_api_key" || u["enabled"] != true || u["credential_mode"] != "api_key" {
		t.Fatalf("after PUT: %v", u)
	}
	// Omitted flags keep their values; given ones replace them.
	e.do("POST", p+"/disable", nil)
	r = e.do("PUT", p, put)
	if r.json(t)["enabled"] != false || r.json(t)["spec_revision"] != 4.0 {
		t.Fatalf("PUT without enabled: %s", r.body)
	}
	r = e.do("PUT", p, map[string]any{"name": "renamed", "base_url": "https://api.example/b", "enabled": true})
	if r.json(t)["enabled"] != true {
		t.Fatalf("PUT enabled: %s", r.body)
	}
}

// P-UP-8, P-API-2: concurrent PATCHes with one If-Match: exactly one wins,
// the others fail with stale_revision.
func TestUpstreamConcurrentPatch(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := "/admin/v1/upstreams/" + e.upstream("u")["id"].(string)
	etag := e.do("HEAD", p, nil).header.Get("ETag")
	const n = 8
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := send(t, e.srv.URL, "PATCH", p, map[string]any{"name": fmt.Sprintf("n%d", i)}, "If-Match", etag)
			var b struct{ Error struct{ Code string } }
			json.Unmarshal(r.body, &b)
			mu.Lock()
			codes[fmt.Sprint(r.status, b.Error.Code)]++
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	if codes["200"] != 1 || codes["409stale_revision"] != n-1 {
		t.Fatalf("outcomes %v", codes)
	}
	if g := e.do("GET", p, nil); g.json(t)["spec_revision"] != 2.0 {
		t.Fatalf("after the race: %s", g.body)
	}
}

// Enable and disable return the resource and take If-Match.
func TestUpstreamEnableDisable(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.upstream("u")["id"].(string)
	p := "/admin/v1/upstreams/" + id
	r := e.do("POST", p+"/disable", nil, "If-Match", `"1"`)
	if r.status != 200 || r.json(t)["enabled"] != false || r.header.Get("ETag") != `"2"` {
		t.Fatalf("disable: %d %s", r.status, r.body)
	}
	if e.rt.Current().Upstream(id).Enabled {
		t.Fatal("snapshot not refreshed after disable")
	}
	e.unchanged("stale enable", func() {
		wantErr(t, e.do("POST", p+"/enable", nil, "If-Match", `"1"`), 409, "stale_revision")
		wantErr(t, e.do("POST", p+"/enable", nil, "If-Match", `one`), 400, "invalid_request")
		wantErr(t, e.do("POST", "/admin/v1/upstreams/up_nope/enable", nil), 404, "upstream_not_found")
		wantErr(t, e.do("POST", "/admin/v1/upstreams/up_nope/disable", nil), 404, "upstream_not_found")
	})
	r = e.do("POST", p+"/enable", nil)
	if r.status != 200 || r.json(t)["enabled"] != true || r.json(t)["spec_revision"] != 3.0 {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
}

// P-UP-11: DELETE refuses while a chain entry names the upstream, honours
// If-Match, and frees the name.
func TestUpstreamDelete(t *testing.T) {
	t.Parallel()
	e := setup(t)
	uid := e.upstream("pinned")["id"].(string)
	pid := e.principal("p")["id"].(string)
	entry := e.do("GET", "/admin/v1/principals/"+pid+"/plugin-chain", nil).json(t)["entries"].([]any)[0].(map[string]any)
	ctx := context.Background()
	for _, cfg := range []string{`{"upstream_id":"` + uid + `"}`, `{"upstream_ids":["up_x","` + uid + `"]}`} {
		if _, err := e.st.UpdateChainEntry(ctx, entry["id"].(string), store.AnyRevision, json.RawMessage(cfg), true); err != nil {
			t.Fatal(err)
		}
		e.unchanged("refused delete", func() {
			r := e.do("DELETE", "/admin/v1/upstreams/"+uid, nil)
			wantErr(t, r, 409, "referenced_by")
			var b struct {
				Error struct {
					Details struct{ References []store.Reference }
				}
			}
			json.Unmarshal(r.body, &b)
			refs := b.Error.Details.References
			if len(refs) != 1 || refs[0].Kind != "plugin_chain_entry" || refs[0].ID != entry["id"] || refs[0].Owner != pid {
				t.Fatalf("references %+v in %s", refs, r.body)
			}
		})
	}
	if _, err := e.st.UpdateChainEntry(ctx, entry["id"].(string), store.AnyRevision, json.RawMessage(`{}`), true); err != nil {
		t.Fatal(err)
	}
	p := "/admin/v1/upstreams/" + uid
	e.unchanged("stale delete", func() {
		wantErr(t, e.do("DELETE", p, nil, "If-Match", `"7"`), 409, "stale_revision")
		wantErr(t, e.do("DELETE", p, nil, "If-Match", `seven`), 400, "invalid_request")
		wantErr(t, e.do("DELETE", "/admin/v1/upstreams/up_nope", nil), 404, "upstream_not_found")
	})
	r := e.do("DELETE", p, nil, "If-Match", `"1"`)
	if r.status != 204 || len(r.body) != 0 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if e.rt.Current().Upstream(uid) != nil {
		t.Fatal("deleted upstream still in the snapshot")
	}
	wantErr(t, e.do("GET", p, nil), 404, "upstream_not_found")
	wantErr(t, e.do("DELETE", p, nil), 404, "upstream_not_found")
	if l := e.do("GET", "/admin/v1/upstreams", nil).list(t); len(l) != 0 {
		t.Fatalf("list after delete: %v", l)
	}
	e.upstream("pinned") // the name is free again
}

// P-UP-10: limit-resets answers from storage only; 404 for an unknown upstream.
func TestUpstreamLimitResets(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.oauthUpstream("sub")["id"].(string)
	r := e.do("GET", "/admin/v1/upstreams/"+id+"/limit-resets", nil)
	if r.status != 200 || r.json(t)["upstream_id"] != id || r.json(t)["observation"] != nil {
		t.Fatalf("limit-resets: %d %s", r.status, r.body)
	}
	wantErr(t, e.do("GET", "/admin/v1/upstreams/up_nope/limit-resets", nil), 404, "upstream_not_found")
}

// The models the metadata job stored for an upstream.
func TestUpstreamModels(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.upstream("u")["id"].(string)
	if l := e.do("GET", "/admin/v1/upstreams/"+id+"/models", nil).list(t); len(l) != 0 {
		t.Fatalf("models before a refresh: %v", l)
	}
	if err := e.st.SetUpstreamModels(context.Background(), id, []store.UpstreamModel{{ModelID: "claude-x", DisplayName: "Claude X", RefreshedAt: now}}); err != nil {
		t.Fatal(err)
	}
	l := e.do("GET", "/admin/v1/upstreams/"+id+"/models", nil).list(t)
	if len(l) != 1 || l[0].(map[string]any)["id"] != "claude-x" || l[0].(map[string]any)["refreshed_at_unix_secs"] != float64(now.Unix()) {
		t.Fatalf("models: %v", l)
	}
	wantErr(t, e.do("GET", "/admin/v1/upstreams/up_nope/models", nil), 404, "upstream_not_found")
}
