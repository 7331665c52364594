package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/admin"
	"github.com/pillarhq/pillar/impl/gateway/apikey"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
)

const token = "test-admin-token"

type env struct {
	t     *testing.T
	srv   *httptest.Server
	st    store.Store
	rt    *snapshot.Runtime
	box   *secret.Box
	calls int
}

type runtimeAdapter struct{ rt *snapshot.Runtime }

func (r runtimeAdapter) Refresh(ctx context.Context) error { return r.rt.Refresh(ctx) }
func (r runtimeAdapter) Info() admin.SnapshotInfo {
	s := r.rt.Current()
	u, p, k := s.Counts()
	return admin.SnapshotInfo{Generation: s.Generation, BuiltAt: s.BuiltAt, Upstreams: u, Principals: p, Keys: k}
}

// failingStore makes every call fail as if the database were gone.
type failingStore struct{ store.Store }

func (failingStore) Ping(context.Context) error { return store.ErrUnavailable }
func (failingStore) LoadConfig(context.Context) (*store.Config, error) {
	return nil, fmt.Errorf("dial: %w", store.ErrUnavailable)
}
func (failingStore) ListUpstreams(context.Context) ([]store.Upstream, error) {
	return nil, store.ErrUnavailable
}

func setup(t *testing.T) *env {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "proxy.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	box, _ := secret.New(bytes.Repeat([]byte{3}, 32))
	rt := snapshot.NewRuntime(st, box, nil, nil)
	e := &env{t: t, st: st, rt: rt, box: box}
	h := admin.New(admin.Deps{
		Store: st, Sealer: box, Runtime: runtimeAdapter{rt}, Auth: []admin.Authenticator{admin.StaticToken{Token: token}},
		Getenv:  func(k string) string { return map[string]string{"ANTHROPIC_KEY": "sk-ant-from-env"}[k] },
		Version: "test", ReplicaID: "r1", StartedAt: time.Unix(100, 0),
		Extra: map[string]http.Handler{"/metrics": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "m 1\n") })},
	})
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return m
}

func (e *env) do(method, path string, body any, hdr ...string) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, b}
}

// wantErr checks the admin error shape, status and code.
func wantErr(t *testing.T, r resp, status int, code string) {
	t.Helper()
	var b struct {
		Error struct{ Code, Message string }
	}
	if r.status != status || json.Unmarshal(r.body, &b) != nil || b.Error.Code != code || b.Error.Message == "" {
		t.Fatalf("got %d %s, want %d %s", r.status, r.body, status, code)
	}
}

func (e *env) upstream(name string) map[string]any {
	e.t.Helper()
	r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": name, "kind": "vendor_api_key", "base_url": "https://api.example", "api_key_value": "sk-ant-" + name})
	if r.status != 201 {
		e.t.Fatalf("create upstream: %d %s", r.status, r.body)
	}
	return r.json(e.t)
}

func (e *env) principal(name string) map[string]any {
	e.t.Helper()
	r := e.do("POST", "/admin/v1/principals", map[string]any{"name": name, "kind": "machine", "allowed_models": []string{"claude-*"}})
	if r.status != 201 {
		e.t.Fatalf("create principal: %d %s", r.status, r.body)
	}
	return r.json(e.t)
}

// P-API-1, P-LISTEN-2, P-VER-1: every route needs the Bearer token.
func TestAuthOnEveryRoute(t *testing.T) {
	t.Parallel()
	e := setup(t)
	paths := []string{"/admin/v1/upstreams", "/admin/v1/principals", "/admin/v1/status", "/admin/v1/export",
		"/admin/v1/openapi.json", "/metrics", "/admin/v1/nope", "/"}
	for _, p := range paths {
		for _, auth := range []string{"", "Bearer wrong", "Basic " + token, token} {
			r := e.do("GET", p, nil, "Authorization", auth)
			wantErr(t, r, 401, "unauthorized")
			if r.header.Get("WWW-Authenticate") == "" {
				t.Fatalf("%s: no WWW-Authenticate", p)
			}
		}
	}
	if r := e.do("GET", "/metrics", nil); r.status != 200 || string(r.body) != "m 1\n" {
		t.Fatalf("extra route: %d %s", r.status, r.body)
	}
	wantErr(t, e.do("GET", "/admin/v1/nope", nil), 404, "not_found")
	r := e.do("DELETE", "/admin/v1/upstreams", nil)
	wantErr(t, r, 405, "method_not_allowed")
	if !strings.Contains(r.header.Get("Allow"), "POST") {
		t.Fatalf("Allow %q", r.header.Get("Allow"))
	}
}

// P-UP-1, P-UP-2, P-UP-3, P-UP-4, P-UP-5, P-UP-12: create validation, response fields and defaults.
func TestUpstreamCreate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	u := e.upstream("main")
	for _, k := range []string{"id", "name", "kind", "enabled", "warmup_enabled", "warmup_dialect_plugin", "spec_revision", "status"} {
		if _, ok := u[k]; !ok {
			t.Fatalf("UpstreamResponse lacks %s: %v", k, u)
		}
	}
	st := u["status"].(map[string]any)
	for _, k := range []string{"last_apply_error", "last_apply_at_unix_secs", "last_warmup_at_unix_secs"} {
		if _, ok := st[k]; !ok {
			t.Fatalf("status lacks %s", k)
		}
	}
	if u["warmup_enabled"] != false || u["warmup_dialect_plugin"] != nil || u["spec_revision"] != float64(1) || u["credential_mode"] != "api_key" {
		t.Fatalf("defaults %v", u)
	}
	if strings.Contains(fmt.Sprint(u), "sk-ant-main") {
		t.Fatal("credential returned")
	}
	// P-UP-5: vendor_oauth defaults warm-up on.
	o := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "sub", "kind": "vendor_oauth", "base_url": "https://api.example"})
	if o.status != 201 || o.json(t)["warmup_enabled"] != true || o.json(t)["credential_mode"] != nil {
		t.Fatalf("oauth: %d %s", o.status, o.body)
	}
	// P-UP-2: api_key_env is read from the server environment and sealed.
	env := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "env", "kind": "vendor_api_key", "base_url": "https://api.example", "api_key_env": "ANTHROPIC_KEY"})
	if env.status != 201 {
		t.Fatalf("env: %d %s", env.status, env.body)
	}
	stored, _ := e.st.GetUpstream(context.Background(), env.json(t)["id"].(string))
	pt, err := e.box.Open(stored.Credential, snapshot.CredentialAD(stored.ID))
	if err != nil || string(pt) != "sk-ant-from-env" || bytes.Contains(stored.Credential, []byte("sk-ant-from-env")) {
		t.Fatalf("stored credential: %q %v", pt, err)
	}

	cases := []struct {
		body   map[string]any
		status int
		code   string
	}{
		{map[string]any{"name": "main", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_value": "k"}, 409, "conflict"},
		{map[string]any{"name": "b", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_env": "ANTHROPIC_KEY", "api_key_value": "k"}, 400, "conflicting_api_key"},
		{map[string]any{"name": "c", "kind": "vendor_api_key", "base_url": "ftp://a.example", "api_key_value": "k"}, 400, "invalid_location"},
		{map[string]any{"name": "c", "kind": "vendor_api_key", "base_url": "https://u:p@a.example", "api_key_value": "k"}, 400, "invalid_location"},
		{map[string]any{"name": "c", "kind": "vendor_api_key", "base_url": "/relative", "api_key_value": "k"}, 400, "invalid_location"},
		{map[string]any{"name": "c", "kind": "vendor_api_key", "base_url": "https://a.example?x=1", "api_key_value": "k"}, 400, "invalid_location"},
		{map[string]any{"name": "c", "kind": "vendor_magic", "base_url": "https://a.example"}, 400, "invalid_request"},
		{map[string]any{"name": "", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_value": "k"}, 400, "invalid_request"},
		{map[string]any{"name": "c", "kind": "vendor_api_key", "base_url": "https://a.example"}, 400, "invalid_request"},
		{map[string]any{"name": "c", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_env": "UNSET"}, 400, "invalid_request"},
		{map[string]any{"name": "c", "kind": "vendor_oauth", "base_url": "https://a.example", "api_key_value": "k"}, 400, "invalid_request"},
		{map[string]any{"name": "c", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_value": "k", "warmup_enabled": true}, 400, "warmup_requires_oauth_credentials"},
		{map[string]any{"name": "c", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_value": "k", "colour": "red"}, 400, "invalid_request"},
	}
	for _, c := range cases {
		wantErr(t, e.do("POST", "/admin/v1/upstreams", c.body), c.status, c.code)
	}
	wantErr(t, e.do("POST", "/admin/v1/upstreams", `{"name":`), 400, "invalid_request")
	wantErr(t, e.do("POST", "/admin/v1/upstreams", `{}`, "Content-Type", "text/plain"), 415, "unsupported_media_type")
	wantErr(t, e.do("POST", "/admin/v1/upstreams", `{"name":"`+strings.Repeat("x", 2<<20)+`"}`), 413, "request_too_large")
	// Nothing was created by the refused requests.
	if n := len(e.list(t, "/admin/v1/upstreams")); n != 3 {
		t.Fatalf("%d upstreams after refusals", n)
	}
}

func (e *env) list(t *testing.T, path string) []any {
	t.Helper()
	r := e.do("GET", path, nil)
	var out []any
	if r.status != 200 || json.Unmarshal(r.body, &out) != nil {
		t.Fatalf("list %s: %d %s", path, r.status, r.body)
	}
	return out
}

// P-UP-6, P-UP-8, P-UP-9, P-API-2, P-WARM-R2, P-UP-11: ETag/If-Match flows.
func TestUpstreamConcurrencyControl(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.upstream("u")["id"].(string)
	p := "/admin/v1/upstreams/" + id
	g := e.do("GET", p, nil)
	if g.status != 200 || g.header.Get("ETag") != `"1"` {
		t.Fatalf("GET etag %q", g.header.Get("ETag"))
	}
	h := e.do("HEAD", p, nil)
	if h.status != 200 || h.header.Get("ETag") != `"1"` || len(h.body) != 0 {
		t.Fatalf("HEAD %d %q", h.status, h.header.Get("ETag"))
	}
	wantErr(t, e.do("GET", "/admin/v1/upstreams/up_nope", nil), 404, "upstream_not_found")
	wantErr(t, e.do("PATCH", p, map[string]any{"enabled": false}), 428, "precondition_required")
	wantErr(t, e.do("PATCH", p, map[string]any{"enabled": false}, "If-Match", "abc"), 400, "invalid_request")
	// P-WARM-R2: warm-up on an upstream without OAuth credentials.
	wantErr(t, e.do("PATCH", p, map[string]any{"warmup_enabled": true}, "If-Match", `"1"`), 400, "warmup_requires_oauth_credentials")
	r := e.do("PATCH", p, map[string]any{"enabled": false}, "If-Match", `"1"`)
	if r.status != 200 || r.header.Get("ETag") != `"2"` || r.json(t)["enabled"] != false {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	wantErr(t, e.do("PATCH", p, map[string]any{"enabled": true}, "If-Match", `"1"`), 409, "stale_revision")
	wantErr(t, e.do("POST", p+"/enable", nil, "If-Match", `"1"`), 409, "stale_revision")
	if r := e.do("POST", p+"/enable", nil, "If-Match", `W/"2"`); r.status != 200 || r.json(t)["enabled"] != true || r.json(t)["spec_revision"] != float64(3) {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	if r := e.do("POST", p+"/disable", nil); r.status != 200 || r.json(t)["enabled"] != false {
		t.Fatalf("disable: %s", r.body)
	}
	wantErr(t, e.do("POST", "/admin/v1/upstreams/up_nope/disable", nil), 404, "upstream_not_found")
	put := map[string]any{"name": "renamed", "base_url": "https://b.example"}
	wantErr(t, e.do("PUT", p, put, "If-Match", `"2"`), 409, "stale_revision")
	wantErr(t, e.do("PUT", "/admin/v1/upstreams/up_nope", put), 404, "upstream_not_found")
	wantErr(t, e.do("PUT", p, map[string]any{"name": "renamed", "base_url": "https://b.example", "kind": "vendor_oauth"}), 400, "invalid_request")
	if r := e.do("PUT", p, put, "If-Match", "4"); r.status != 200 || r.json(t)["name"] != "renamed" || r.json(t)["credential_mode"] != "api_key" {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	// A refused request changed nothing.
	before := e.do("GET", p, nil).body
	wantErr(t, e.do("PUT", p, map[string]any{"name": "x", "base_url": "nope"}), 400, "invalid_location")
	if after := e.do("GET", p, nil).body; !bytes.Equal(before, after) {
		t.Fatalf("refused PUT changed the upstream:\n%s\n%s", before, after)
	}
	// Concurrent PATCHes with one If-Match: exactly one wins.
	rev := e.do("GET", p, nil).header.Get("ETag")
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := e.do("PATCH", p, map[string]any{"name": fmt.Sprintf("n%d", i)}, "If-Match", rev)
			mu.Lock()
			codes[r.status]++
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	if codes[200] != 1 || codes[409] != 7 {
		t.Fatalf("concurrent PATCH outcomes %v", codes)
	}
	wantErr(t, e.do("DELETE", p, nil, "If-Match", `"1"`), 409, "stale_revision")
	if r := e.do("DELETE", p, nil); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	wantErr(t, e.do("DELETE", p, nil), 404, "upstream_not_found")
	if r := e.do("GET", "/admin/v1/upstreams/"+e.upstream("x")["id"].(string)+"/limit-resets", nil); r.status != 200 || r.json(t)["observation"] != nil {
		t.Fatalf("limit-resets: %d %s", r.status, r.body)
	}
	wantErr(t, e.do("GET", "/admin/v1/upstreams/up_nope/limit-resets", nil), 404, "upstream_not_found")
}

// P-UP-11: an upstream named by a chain entry cannot be deleted.
func TestUpstreamReferencedBy(t *testing.T) {
	t.Parallel()
	e := setup(t)
	uid := e.upstream("pinned")["id"].(string)
	pid := e.principal("p")["id"].(string)
	chain := e.do("GET", "/admin/v1/principals/"+pid+"/plugin-chain", nil).json(t)
	entry := chain["entries"].([]any)[0].(map[string]any)
	if _, err := e.st.UpdateChainEntry(context.Background(), entry["id"].(string), store.AnyRevision, json.RawMessage(`{"upstream_id":"`+uid+`"}`), true); err != nil {
		t.Fatal(err)
	}
	r := e.do("DELETE", "/admin/v1/upstreams/"+uid, nil)
	wantErr(t, r, 409, "referenced_by")
	if !strings.Contains(string(r.body), entry["id"].(string)) {
		t.Fatalf("references not listed: %s", r.body)
	}
}

// P-PR-1, P-PR-2, P-PR-3, P-PR-4, P-PR-5, P-PR-6, P-PR-7: principals, their fields and keep-alive normalisation.
func TestPrincipals(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("POST", "/admin/v1/principals", map[string]any{"name": "app", "kind": "machine", "allowed_models": []string{"claude-*"},
		"default_limits":  []any{map[string]any{"kind": "requests", "window_secs": 60, "max": 10}},
		"cache_keepalive": map[string]any{"enabled": true, "max_refreshes_per_session": 3, "classifier": map[string]any{"treat_end_turn_as_ambiguous": true}}})
	if r.status != 201 || r.header.Get("ETag") != `"1"` {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	p := r.json(t)
	for _, k := range []string{"id", "name", "kind", "enabled", "revision", "allowed_models", "default_limits", "cache_keepalive"} {
		if _, ok := p[k]; !ok {
			t.Fatalf("PrincipalResponse lacks %s", k)
		}
	}
	ka := p["cache_keepalive"].(map[string]any)
	if ka["max_refreshes_per_session"] != float64(3) || ka["refresh_lead_time_5m_secs"] != float64(30) || ka["classifier"].(map[string]any)["treat_end_turn_as_ambiguous"] != true {
		t.Fatalf("keep-alive not normalised: %v", ka)
	}
	id := p["id"].(string)
	path := "/admin/v1/principals/" + id
	// P-PR-5: the built-in router entry at order 0.
	chainResp := e.do("GET", path+"/plugin-chain", nil)
	chain := chainResp.json(t)
	entries, _ := chain["entries"].([]any)
	if len(entries) == 0 {
		t.Fatalf("chain: %d %s", chainResp.status, chainResp.body)
	}
	first := entries[0].(map[string]any)
	if len(entries) != 1 || first["slot"] != "router" || first["builtin"] != "subscription_preference" || first["position"] != float64(0) || first["wasm_registry_id"] != nil {
		t.Fatalf("chain %v", chain)
	}
	wantErr(t, e.do("GET", "/admin/v1/principals/pr_nope/plugin-chain", nil), 404, "unknown_principal")

	for _, c := range []struct {
		body   map[string]any
		status int
		code   string
	}{
		{map[string]any{"name": "app", "kind": "machine"}, 409, "conflict"},
		{map[string]any{"name": "x", "kind": "robot"}, 400, "invalid_request"},
		{map[string]any{"name": "x", "kind": "machine", "cache_keepalive": map[string]any{"enabled": true, "classifier": map[string]any{"llm_judge": map[string]any{"model": "m"}}}}, 400, "unsupported_cache_keepalive_llm_judge"},
		{map[string]any{"name": "x", "kind": "machine", "cache_keepalive": map[string]any{"max_refreshes_per_session": 3}}, 400, "invalid_request"},
		{map[string]any{"name": "x", "kind": "machine", "cache_keepalive": map[string]any{"enabled": true, "refresh_lead_time_5m_secs": 9999}}, 400, "invalid_request"},
		{map[string]any{"name": "x", "kind": "machine", "default_limits": []any{map[string]any{"kind": "bytes", "window_secs": 1, "max": 1}}}, 400, "invalid_request"},
		{map[string]any{"name": "x", "kind": "machine", "allowed_models": []string{""}}, 400, "invalid_request"},
	} {
		wantErr(t, e.do("POST", "/admin/v1/principals", c.body), c.status, c.code)
	}
	if n := len(e.list(t, "/admin/v1/principals")); n != 1 {
		t.Fatalf("refusals created principals: %d", n)
	}
	wantErr(t, e.do("GET", "/admin/v1/principals/pr_nope", nil), 404, "unknown_principal")
	if g := e.do("GET", path, nil); g.header.Get("ETag") != `"1"` {
		t.Fatal("no ETag")
	}
	// P-PR-3 on update; P-PR-6: PATCH cache_keepalive null clears it.
	wantErr(t, e.do("PUT", path, map[string]any{"name": "app", "kind": "machine", "cache_keepalive": map[string]any{"enabled": true, "classifier": map[string]any{"llm_judge": true}}}), 400, "unsupported_cache_keepalive_llm_judge")
	wantErr(t, e.do("PATCH", path, map[string]any{"cache_keepalive": map[string]any{"enabled": true, "classifier": map[string]any{"llm_judge": "x"}}}), 400, "unsupported_cache_keepalive_llm_judge")
	if r := e.do("PATCH", path, map[string]any{"cache_keepalive": nil}, "If-Match", `"1"`); r.status != 200 || r.json(t)["cache_keepalive"] != nil || r.json(t)["revision"] != float64(2) {
		t.Fatalf("patch null: %d %s", r.status, r.body)
	}
	wantErr(t, e.do("PUT", path, map[string]any{"name": "app", "kind": "machine"}, "If-Match", `"1"`), 409, "stale_revision")
	if r := e.do("PUT", path, map[string]any{"name": "app2", "kind": "user", "allowed_models": []string{"*"}}); r.status != 200 || r.json(t)["kind"] != "user" {
		t.Fatalf("put: %s", r.body)
	}
	wantErr(t, e.do("PUT", path+"/allowed_models", map[string]any{"allowed_models": []string{"a"}}, "If-Match", `"1"`), 409, "stale_revision")
	if r := e.do("PUT", path+"/allowed_models", map[string]any{"allowed_models": []string{"a", "b*"}}); r.status != 200 || len(r.json(t)["allowed_models"].([]any)) != 2 {
		t.Fatalf("allowed_models: %s", r.body)
	}
	wantErr(t, e.do("PUT", "/admin/v1/principals/pr_nope/allowed_models", map[string]any{"allowed_models": []string{}}), 404, "unknown_principal")
	wantErr(t, e.do("POST", path+"/disable", nil, "If-Match", `"1"`), 409, "stale_revision")
	if r := e.do("POST", path+"/disable", nil); r.status != 200 || r.json(t)["enabled"] != false {
		t.Fatalf("disable: %s", r.body)
	}
	if r := e.do("POST", path+"/enable", nil); r.status != 200 || r.json(t)["enabled"] != true {
		t.Fatalf("enable: %s", r.body)
	}
	wantErr(t, e.do("DELETE", path, nil, "If-Match", `"1"`), 409, "stale_revision")
	if r := e.do("DELETE", path, nil); r.status != 204 {
		t.Fatalf("delete: %d", r.status)
	}
	wantErr(t, e.do("DELETE", path, nil), 404, "unknown_principal")
}

// P-KEY-1: the plaintext is returned once; listings and export never show it.
func TestKeysAndExport(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.upstream("u")
	pid := e.principal("p")["id"].(string)
	r := e.do("POST", "/admin/v1/principals/"+pid+"/keys", map[string]any{"name": "ci"})
	if r.status != 201 {
		t.Fatalf("issue: %d %s", r.status, r.body)
	}
	k := r.json(t)
	plain := k["key"].(string)
	if !strings.HasPrefix(plain, "sk-px-") || k["prefix"] != plain[:12] || k["revoked_at_unix_secs"] != nil {
		t.Fatalf("key %v", k)
	}
	if r := e.do("POST", "/admin/v1/principals/"+pid+"/keys", nil); r.status != 201 {
		t.Fatalf("issue without body: %d %s", r.status, r.body)
	}
	// The snapshot knows the key at once.
	if e.rt.Current().KeyByHash(sha(plain)) == nil {
		t.Fatal("snapshot not refreshed after issuing")
	}
	listing := e.do("GET", "/admin/v1/principals/"+pid+"/keys", nil)
	export := e.do("GET", "/admin/v1/export", nil)
	h := sha(plain)
	for name, body := range map[string][]byte{"list": listing.body, "export": export.body} {
		if bytes.Contains(body, []byte(plain)) || bytes.Contains(body, []byte(fmt.Sprintf("%x", h))) || bytes.Contains(body, []byte("sk-ant-u")) {
			t.Fatalf("%s leaks a secret: %s", name, body)
		}
	}
	if !bytes.Contains(export.body, []byte(k["id"].(string))) || !bytes.Contains(export.body, []byte("subscription_preference")) {
		t.Fatalf("export incomplete: %s", export.body)
	}
	wantErr(t, e.do("POST", "/admin/v1/principals/pr_nope/keys", nil), 404, "unknown_principal")
	wantErr(t, e.do("GET", "/admin/v1/principals/pr_nope/keys", nil), 404, "unknown_principal")
	wantErr(t, e.do("DELETE", "/admin/v1/principals/"+pid+"/keys/key_nope", nil), 404, "key_not_found")
	rv := e.do("DELETE", "/admin/v1/principals/"+pid+"/keys/"+k["id"].(string), nil)
	if rv.status != 200 || rv.json(t)["revoked_at_unix_secs"] == nil || rv.json(t)["key"] != nil {
		t.Fatalf("revoke: %s", rv.body)
	}
	if e.rt.Current().KeyByHash(sha(plain)) != nil {
		t.Fatal("revoked key still in the snapshot")
	}
}

func sha(s string) [32]byte {
	var out [32]byte
	copy(out[:], hashOf(s))
	return out
}

// P-API-3: status and export answer storage_unavailable when storage fails.
func TestStatusAndStorageUnavailable(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := e.do("GET", "/admin/v1/status", nil)
	if s.status != 200 || s.json(t)["driver"] != "sqlite" || s.json(t)["replica_id"] != "r1" {
		t.Fatalf("status: %s", s.body)
	}
	box, _ := secret.New(bytes.Repeat([]byte{3}, 32))
	h := admin.New(admin.Deps{Store: failingStore{e.st}, Sealer: box, Auth: []admin.Authenticator{admin.StaticToken{Token: token}}})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, p := range []string{"/admin/v1/status", "/admin/v1/export", "/admin/v1/upstreams"} {
		req, _ := http.NewRequest("GET", srv.URL+p, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		wantErr(t, resp{res.StatusCode, res.Header, b}, 503, "storage_unavailable")
	}
}

// The OpenAPI document parses and lists every route.
func TestOpenAPI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("GET", "/admin/v1/openapi.json", nil)
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if r.status != 200 || json.Unmarshal(r.body, &doc) != nil || doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi: %d", r.status)
	}
	want := map[string][]string{
		"/admin/v1/upstreams":                              {"get", "post"},
		"/admin/v1/upstreams/{id}":                         {"get", "head", "put", "patch", "delete"},
		"/admin/v1/upstreams/{id}/enable":                  {"post"},
		"/admin/v1/upstreams/{id}/disable":                 {"post"},
		"/admin/v1/upstreams/{id}/limit-resets":            {"get"},
		"/admin/v1/principals":                             {"get", "post"},
		"/admin/v1/principals/{id}":                        {"get", "head", "put", "patch", "delete"},
		"/admin/v1/principals/{id}/allowed_models":         {"put"},
		"/admin/v1/principals/{id}/keys":                   {"get", "post"},
		"/admin/v1/principals/{id}/keys/{key_id}":          {"delete"},
		"/admin/v1/principals/{principal_id}/plugin-chain": {"get"},
		"/admin/v1/status":                                 {"get"},
		"/admin/v1/export":                                 {"get"},
	}
	for p, ms := range want {
		for _, m := range ms {
			if _, ok := doc.Paths[p][m]; !ok {
				t.Errorf("openapi lacks %s %s", m, p)
			}
		}
	}
	if !strings.Contains(string(r.body), "warmup_requires_oauth_credentials") || !strings.Contains(string(r.body), `"UpstreamResponse"`) {
		t.Fatal("openapi lacks error codes or schemas")
	}
}

func hashOf(s string) []byte { h := apikey.Hash(s); return h[:] }
