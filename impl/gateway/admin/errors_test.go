package admin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/admin"
	"github.com/pillarhq/pillar/impl/gateway/quota"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// requests builds one request for every documented operation, addressing
// live resources with plausible bodies, so that a handler that ran would
// change something.
func (e *env) requests() []struct {
	method, path string
	body         any
} {
	e.t.Helper()
	uid := e.upstream("auth-u")["id"].(string)
	pid := e.principal("auth-p")["id"].(string)
	kid := e.key(pid)["id"].(string)
	rid := e.plugin("auth-plugin", "router")["id"].(string)
	cid := e.do("GET", "/admin/v1/principals/"+pid+"/plugin-chain", nil).json(e.t)["entries"].([]any)[0].(map[string]any)["id"].(string)
	bodies := map[string]any{
		"POST /admin/v1/upstreams":                                      map[string]any{"name": "n", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_value": "k"},
		"PUT /admin/v1/upstreams/{id}":                                  map[string]any{"name": "n2", "base_url": "https://api.example/v2"},
		"PATCH /admin/v1/upstreams/{id}":                                map[string]any{"enabled": false},
		"POST /admin/v1/principals":                                     map[string]any{"name": "n", "kind": "machine"},
		"PUT /admin/v1/principals/{id}":                                 map[string]any{"name": "n2", "kind": "machine"},
		"PATCH /admin/v1/principals/{id}":                               map[string]any{"enabled": false},
		"PUT /admin/v1/principals/{id}/allowed_models":                  map[string]any{"allowed_models": []string{"x"}},
		"POST /admin/v1/principals/{id}/keys":                           map[string]any{"name": "k2"},
		"POST /admin/v1/upstreams/{id}/oauth/complete":                  map[string]any{"state": "s", "code": "c"},
		"POST /admin/v1/plugins/wasm":                                   "\x00asm router",
		"PATCH /admin/v1/plugins/registry/{id}":                         map[string]any{"name": "renamed"},
		"POST /admin/v1/principals/{principal_id}/plugin-chain":         map[string]any{"slot": "router", "wasm_registry_id": "wasm_x"},
		"POST /admin/v1/principals/{principal_id}/plugin-chain/reorder": map[string]any{"order": []any{}},
		"PUT /admin/v1/plugin-chain-entries/{id}":                       map[string]any{"enabled": false},
		"POST /admin/v1/admin-tokens":                                   map[string]any{"name": "t", "role": "viewer", "expires_in_secs": 600},
		"POST /admin/v1/webhooks":                                       map[string]any{"name": "w", "url": "https://hooks.example/", "secret": "0123456789abcdef"},
		"PUT /admin/v1/webhooks/{id}":                                   map[string]any{"name": "w", "url": "https://hooks.example/", "secret": "0123456789abcdef"},
	}
	var out []struct {
		method, path string
		body         any
	}
	var ops []string
	for p, ms := range openAPI(e.t)["paths"].(map[string]any) {
		for m := range ms.(map[string]any) {
			ops = append(ops, strings.ToUpper(m)+" "+p)
		}
	}
	sort.Strings(ops)
	for _, op := range ops {
		m, p, _ := strings.Cut(op, " ")
		path := p
		switch {
		case strings.HasPrefix(p, "/admin/v1/upstreams/"):
			path = strings.ReplaceAll(path, "{id}", uid)
		case strings.HasPrefix(p, "/admin/v1/plugins/registry/"):
			path = strings.ReplaceAll(path, "{id}", rid)
		case strings.HasPrefix(p, "/admin/v1/plugin-chain-entries/"):
			path = strings.ReplaceAll(path, "{id}", cid)
		}
		if p == "/admin/v1/plugins/wasm" {
			path += "?name=upload-" + RandomName()
		}
		path = strings.NewReplacer("{id}", pid, "{principal_id}", pid, "{key_id}", kid).Replace(path)
		out = append(out, struct {
			method, path string
			body         any
		}{m, path, bodies[op]})
	}
	return out
}

// P-API-1, P-VER-1: every route, documented or mounted beside
// the API, and unknown paths too, needs the Bearer token; a refused request
// runs no handler.
func TestAuthOnEveryRoute(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reqs := e.requests()
	if len(reqs) < 30 {
		t.Fatalf("only %d documented operations", len(reqs))
	}
	for _, extra := range []string{"/metrics", "/admin/scheduler/status", "/admin/scheduler/failures", "/admin/v1/nope", "/", "/admin/v2/upstreams"} {
		reqs = append(reqs, struct {
			method, path string
			body         any
		}{"GET", extra, nil})
	}
	e.unchanged("unauthenticated requests", func() {
		for _, rq := range reqs {
			for _, auth := range []string{"", "Bearer wrong", "Bearer " + token + "x", "Basic " + token, token, "Bearer", "Bearer "} {
				r := send(t, e.srv.URL, rq.method, rq.path, rq.body, "Authorization", auth, "If-Match", "*")
				if r.status != 401 || r.header.Get("WWW-Authenticate") == "" || r.header.Get("Cache-Control") != "no-store" {
					t.Fatalf("%s %s with %q: %d %s", rq.method, rq.path, auth, r.status, r.body)
				}
				if rq.method != "HEAD" {
					wantErr(t, r, 401, "unauthorized")
				}
			}
		}
	})
	// The token opens the routes mounted beside the API too; the scheme
	// name is case-insensitive.
	if r := e.do("GET", "/metrics", nil, "Authorization", "bearer "+token); r.status != 200 || string(r.body) != "m 1\n" {
		t.Fatalf("/metrics: %d %s", r.status, r.body)
	}
	// P-VER-1: the scheduler endpoints live beside /admin/v1, unversioned.
	if r := e.do("GET", "/admin/scheduler/status", nil); r.status != 200 || !strings.Contains(string(r.body), "recurring_jobs") {
		t.Fatalf("/admin/scheduler/status: %d %s", r.status, r.body)
	}
}

type denyAll struct{}

func (denyAll) Authenticate(*http.Request) (admin.Identity, bool) { return admin.Identity{}, false }

// P-API-1: a request passes when any provider accepts it; an empty static
// token accepts nothing.
func TestAuthProviders(t *testing.T) {
	t.Parallel()
	e := setup(t, func(o *options) {
		o.auth = []admin.Authenticator{admin.StaticToken{}, denyAll{}, admin.StaticToken{Token: token}}
	})
	if r := e.do("GET", "/admin/v1/status", nil); r.status != 200 {
		t.Fatalf("second provider: %d %s", r.status, r.body)
	}
	empty := setup(t, func(o *options) { o.auth = []admin.Authenticator{admin.StaticToken{}} })
	for _, auth := range []string{"Bearer ", "Bearer", ""} {
		wantErr(t, send(t, empty.srv.URL, "GET", "/admin/v1/status", nil, "Authorization", auth), 401, "unauthorized")
	}
	none := setup(t, func(o *options) { o.auth = []admin.Authenticator{} })
	wantErr(t, send(t, none.srv.URL, "GET", "/admin/v1/status", nil), 401, "unauthorized")
	req, _ := http.NewRequest("GET", "/", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if _, ok := (admin.StaticToken{}).Authenticate(req); ok {
		t.Fatal("an empty token matched")
	}
}

// P-VER-1: unknown paths answer not_found and known paths with another
// method method_not_allowed, both in the API's error shape.
func TestNotFoundAndMethodNotAllowed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.upstream("u")["id"].(string)
	for _, p := range []string{"/admin/v1/nope", "/admin/v2/upstreams", "/admin/v1/upstreams/" + id + "/nope", "/admin/v1"} {
		wantErr(t, e.do("GET", p, nil), 404, "not_found")
	}
	for _, c := range []struct{ method, path, allow string }{
		{"DELETE", "/admin/v1/upstreams", "GET, HEAD, POST"},
		{"POST", "/admin/v1/upstreams/" + id, "GET, HEAD, PUT, PATCH, DELETE"},
		{"GET", "/admin/v1/upstreams/" + id + "/enable", "POST"},
		{"PUT", "/admin/v1/status", "GET, HEAD"},
		{"OPTIONS", "/admin/v1/principals", "GET, HEAD, POST"},
	} {
		r := e.do(c.method, c.path, nil)
		wantErr(t, r, 405, "method_not_allowed")
		if r.header.Get("Allow") != c.allow {
			t.Fatalf("%s %s: Allow %q, want %q", c.method, c.path, r.header.Get("Allow"), c.allow)
		}
	}
}

// Bodies: JSON only, at most 1 MiB, decoded strictly.
func TestBodyRules(t *testing.T) {
	t.Parallel()
	e := setup(t)
	valid := `{"name":"p","kind":"machine"}`
	e.unchanged("refused bodies", func() {
		wantErr(t, e.do("POST", "/admin/v1/principals", valid, "Content-Type", "text/plain"), 415, "unsupported_media_type")
		wantErr(t, e.do("POST", "/admin/v1/principals", valid, "Content-Type", ""), 415, "unsupported_media_type")
		wantErr(t, e.do("POST", "/admin/v1/principals", valid, "Content-Type", "application/x-www-form-urlencoded"), 415, "unsupported_media_type")
		wantErr(t, e.do("POST", "/admin/v1/principals", valid, "Content-Type", "application/"), 415, "unsupported_media_type")
		huge := `{"name":"` + strings.Repeat("x", 1<<20) + `","kind":"machine"}`
		wantErr(t, e.do("POST", "/admin/v1/principals", huge), 413, "request_too_large")
		// Without a Content-Length the limit holds while reading.
		r := e.doChunked("POST", "/admin/v1/principals", huge)
		wantErr(t, r, 413, "request_too_large")
		// One byte over the limit, padded with whitespace.
		wantErr(t, e.do("POST", "/admin/v1/principals", valid+strings.Repeat(" ", 1<<20-len(valid)+1)), 413, "request_too_large")
	})
	// Exactly at the limit is accepted; so are JSON media types with parameters or suffixes.
	if r := e.do("POST", "/admin/v1/principals", valid+strings.Repeat(" ", 1<<20-len(valid))); r.status != 201 {
		t.Fatalf("1 MiB body: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/admin/v1/principals", `{"name":"q","kind":"machine"}`, "Content-Type", "application/json; charset=utf-8"); r.status != 201 {
		t.Fatalf("charset: %d %s", r.status, r.body)
	}
	if r := e.doChunked("POST", "/admin/v1/principals", `{"name":"r","kind":"machine"}`); r.status != 201 {
		t.Fatalf("chunked: %d %s", r.status, r.body)
	}
	id := e.principal("s")["id"].(string)
	if r := e.do("PATCH", "/admin/v1/principals/"+id, `{"enabled":false}`, "Content-Type", "application/merge-patch+json"); r.status != 200 {
		t.Fatalf("merge-patch: %d %s", r.status, r.body)
	}
}

// doChunked sends body without a Content-Length.
func (e *env) doChunked(method, path, body string) resp {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, io.MultiReader(strings.NewReader(body)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	r := resp{res.StatusCode, res.Header, b}
	checkAgainstOpenAPI(e.t, method, path, r)
	return r
}

// Every error code of the API, with its trigger and HTTP status; a refused
// request changes nothing. The list must cover every code openapi.json
// declares, except those of the plugin registry endpoints, which are not
// served yet.
func TestEveryErrorCode(t *testing.T) {
	t.Parallel()
	e := setup(t)
	uid := e.upstream("u")["id"].(string)
	oauth := e.oauthUpstream("o")["id"].(string)
	pid := e.principal("p")["id"].(string)
	entry := e.do("GET", "/admin/v1/principals/"+pid+"/plugin-chain", nil).json(t)["entries"].([]any)[0].(map[string]any)["id"].(string)
	pinned := e.upstream("pinned")["id"].(string)
	if _, err := e.st.UpdateChainEntry(context.Background(), entry, store.AnyRevision, []byte(`{"upstream_id":"`+pinned+`"}`), true); err != nil {
		t.Fatal(err)
	}
	internal := setup(t, func(o *options) { o.wrap = func(s store.Store) store.Store { return brokenStore{s} } })
	noOAuth := setup(t, func(o *options) { o.noOAuth = true })
	reg := e.plugin("referenced", "router")["id"].(string)
	e.JSON201("POST", "/admin/v1/principals/"+pid+"/plugin-chain", map[string]any{"slot": "router", "wasm_registry_id": reg})
	claims := map[string]string{}
	for code, err := range map[string]error{"account_mismatch": quota.ErrAccountMismatch, "claim_in_progress": quota.ErrClaimInProgress,
		"claim_rejected": quota.ErrClaimRejected, "claim_outcome_unknown": quota.ErrOutcomeUnknown, "provider_unavailable": quota.ErrProviderUnusable} {
		claims[code] = e.oauthUpstream("claim-" + code)["id"].(string)
		e.oauth.failClaim(claims[code], err)
	}
	down := setup(t)
	down.st.Close()
	viewer := e.roleToken("viewer")
	hook := map[string]any{"name": "wh", "url": "https://hooks.example/a", "secret": "0123456789abcdef", "enabled": false}
	wid := e.JSON201("POST", "/admin/v1/webhooks", hook)["id"].(string)
	noAlerts := setup(t)
	hook["enabled"] = true
	live := noAlerts.JSON201("POST", "/admin/v1/webhooks", hook)["id"].(string)

	type trigger struct {
		code   string
		status int
		on     *env
		method string
		path   string
		body   any
		hdr    []string
	}
	triggers := []trigger{
		{"invalid_request", 400, e, "POST", "/admin/v1/upstreams", `{"name":`, nil},
		{"invalid_budget", 400, e, "POST", "/admin/v1/principals", `{"name":"b","kind":"user","default_limits":[{"kind":"usd","window_secs":60,"limit":"1.5.0"}]}`, nil},
		{"invalid_time_range", 400, e, "GET", "/admin/v1/usage?from=10&to=5", nil, nil},
		{"invalid_group_by", 400, e, "GET", "/admin/v1/usage?group_by=team", nil, nil},
		{"invalid_location", 400, e, "POST", "/admin/v1/upstreams", map[string]any{"name": "x", "kind": "vendor_api_key", "base_url": "ftp://x", "api_key_value": "k"}, nil},
		{"conflicting_api_key", 400, e, "POST", "/admin/v1/upstreams", map[string]any{"name": "x", "kind": "vendor_api_key", "base_url": "https://x", "api_key_value": "k", "api_key_env": "ANTHROPIC_KEY"}, nil},
		{"api_key_env_not_allowed", 400, e, "POST", "/admin/v1/upstreams", map[string]any{"name": "x", "kind": "vendor_api_key", "base_url": "https://x", "api_key_env": "PROXY_MASTER_KEY"}, nil},
		{"conflicting_credential", 400, e, "POST", "/admin/v1/upstreams", map[string]any{"name": "x", "kind": "bedrock", "region": "us-east-1", "aws_access_key_id": "AKIAX", "aws_secret_access_key": "s", "host_credentials": true}, nil},
		{"host_credentials_not_allowed", 400, e, "POST", "/admin/v1/upstreams", map[string]any{"name": "x", "kind": "bedrock", "region": "us-east-1", "host_credentials": true}, nil},
		{"invalid_service_account", 400, e, "POST", "/admin/v1/upstreams", map[string]any{"name": "x", "kind": "vertex", "region": "us-east5", "project": "acme-prod", "service_account_json": `{"type":"authorized_user"}`}, nil},
		{"credential_required", 400, e, "PATCH", "/admin/v1/upstreams/" + uid, map[string]any{"base_url": "https://elsewhere.example"}, []string{"If-Match", "*"}},
		{"warmup_requires_oauth_credentials", 400, e, "PATCH", "/admin/v1/upstreams/" + oauth, map[string]any{"warmup_enabled": true}, []string{"If-Match", `"1"`}},
		{"unsupported_cache_keepalive_llm_judge", 400, e, "POST", "/admin/v1/principals", map[string]any{"name": "x", "kind": "machine", "cache_keepalive": map[string]any{"enabled": true, "classifier": map[string]any{"llm_judge": "on"}}}, nil},
		{"unauthorized", 401, e, "GET", "/admin/v1/upstreams", nil, []string{"Authorization", ""}},
		{"not_found", 404, e, "GET", "/admin/v1/nothing", nil, nil},
		{"upstream_not_found", 404, e, "GET", "/admin/v1/upstreams/up_nope", nil, nil},
		{"unknown_principal", 404, e, "GET", "/admin/v1/principals/pr_nope", nil, nil},
		{"key_not_found", 404, e, "DELETE", "/admin/v1/principals/" + pid + "/keys/key_nope", nil, nil},
		{"method_not_allowed", 405, e, "DELETE", "/admin/v1/principals", nil, nil},
		{"conflict", 409, e, "POST", "/admin/v1/principals", map[string]any{"name": "p", "kind": "machine"}, nil},
		{"stale_revision", 409, e, "POST", "/admin/v1/upstreams/" + uid + "/disable", nil, []string{"If-Match", `"9"`}},
		{"referenced_by", 409, e, "DELETE", "/admin/v1/upstreams/" + pinned, nil, nil},
		{"request_too_large", 413, e, "PUT", "/admin/v1/principals/" + pid + "/allowed_models", `{"allowed_models":["` + strings.Repeat("m", 1<<20) + `"]}`, nil},
		{"unsupported_media_type", 415, e, "PUT", "/admin/v1/principals/" + pid, `{"name":"p","kind":"machine"}`, []string{"Content-Type", "text/yaml"}},
		{"precondition_required", 428, e, "PATCH", "/admin/v1/upstreams/" + uid, map[string]any{"enabled": false}, nil},
		{"internal", 500, internal, "GET", "/admin/v1/upstreams/up_any", nil, nil},
		{"storage_unavailable", 503, down, "GET", "/admin/v1/status", nil, nil},
		{"not_oauth_upstream", 400, e, "POST", "/admin/v1/upstreams/" + uid + "/oauth/start", nil, nil},
		{"invalid_oauth_state", 400, e, "POST", "/admin/v1/upstreams/" + oauth + "/oauth/complete", map[string]any{"state": "forged", "code": "c"}, nil},
		{"oauth_scope_insufficient", 400, e, "POST", "/admin/v1/upstreams/" + oauth + "/oauth/complete", map[string]any{"state": "st-" + oauth, "code": "no-inference"}, nil},
		{"oauth_exchange_failed", 502, e, "POST", "/admin/v1/upstreams/" + oauth + "/oauth/complete", map[string]any{"state": "st-" + oauth, "code": "refused"}, nil},
		{"oauth_not_configured", 503, noOAuth, "POST", "/admin/v1/upstreams/" + uid + "/oauth/start", nil, nil},
		{"coupon_unavailable", 409, e, "POST", "/admin/v1/upstreams/" + oauth + "/limit-resets/claim", nil, nil},
		{"account_mismatch", 409, e, "POST", "/admin/v1/upstreams/" + claims["account_mismatch"] + "/limit-resets/claim", nil, nil},
		{"claim_in_progress", 409, e, "POST", "/admin/v1/upstreams/" + claims["claim_in_progress"] + "/limit-resets/claim", nil, nil},
		{"claim_rejected", 409, e, "POST", "/admin/v1/upstreams/" + claims["claim_rejected"] + "/limit-resets/claim", nil, nil},
		{"claim_outcome_unknown", 502, e, "POST", "/admin/v1/upstreams/" + claims["claim_outcome_unknown"] + "/limit-resets/claim", nil, nil},
		{"provider_unavailable", 502, e, "POST", "/admin/v1/upstreams/" + claims["provider_unavailable"] + "/limit-resets/claim", nil, nil},
		{"invalid_plugin", 400, e, "POST", "/admin/v1/plugins/wasm?name=bad", "not wasm", []string{"Content-Type", "application/wasm"}},
		{"plugins_not_configured", 503, noOAuth, "POST", "/admin/v1/plugins/wasm?name=x", "\x00asm router", []string{"Content-Type", "application/wasm"}},
		{"unknown_registry_entry", 404, e, "GET", "/admin/v1/plugins/registry/wasm_nope", nil, nil},
		{"reference_fingerprint_required", 400, e, "DELETE", "/admin/v1/plugins/registry/" + reg + "?cascade=references", nil, []string{"If-Match", `"1"`}},
		{"forbidden", 403, e, "DELETE", "/admin/v1/upstreams/" + uid, nil, []string{"Authorization", "Bearer " + viewer}},
		{"invalid_role", 400, e, "POST", "/admin/v1/admin-tokens", map[string]any{"name": "t", "role": "root", "expires_in_secs": 600}, nil},
		{"admin_token_not_found", 404, e, "DELETE", "/admin/v1/admin-tokens/tok_nope", nil, nil},
		{"webhook_not_found", 404, e, "GET", "/admin/v1/webhooks/wh_nope", nil, nil},
		{"exchange_not_captured", 404, e, "GET", "/admin/v1/request-events/ev_nope/exchange", nil, nil},
		{"unknown_condition", 400, e, "POST", "/admin/v1/webhooks", map[string]any{"name": "w2", "url": "https://hooks.example/", "secret": "0123456789abcdef", "conditions": []string{"disk_full"}}, nil},
		{"secret_required", 400, e, "PUT", "/admin/v1/webhooks/" + wid, map[string]any{"name": "wh", "url": "https://elsewhere.example/a"}, nil},
		{"webhook_disabled", 409, e, "POST", "/admin/v1/webhooks/" + wid + "/test", nil, nil},
		{"alerts_not_configured", 503, noAlerts, "POST", "/admin/v1/webhooks/" + live + "/test", nil, nil},
		{"references_changed", 409, e, "DELETE", "/admin/v1/plugins/registry/" + reg + "?cascade=references", nil, []string{"If-Match", `"1"`, "X-Reference-Fingerprint", "rf_stale"}},
	}
	covered := map[string]bool{}
	for _, tr := range triggers {
		run := func() {
			r := tr.on.do(tr.method, tr.path, tr.body, tr.hdr...)
			wantErr(t, r, tr.status, tr.code)
		}
		if tr.on == e {
			e.unchanged(tr.code, run)
		} else {
			run()
		}
		covered[tr.code] = true
	}
	reserved := []string{}
	for _, c := range openAPI(t)["components"].(map[string]any)["schemas"].(map[string]any)["ErrorCode"].(map[string]any)["enum"].([]any) {
		if !covered[c.(string)] && !slices.Contains(reserved, c.(string)) {
			t.Errorf("no trigger for error code %s", c)
		}
	}
}

// brokenStore fails like a bug, not like an outage.
type brokenStore struct{ store.Store }

var errBroken = errors.New("column credential_kind does not exist (internal detail)")

func (brokenStore) GetUpstream(context.Context, string) (*store.Upstream, error) {
	return nil, errBroken
}

// An unexpected failure is 500 internal: logged with its cause, sent
// without it.
func TestInternalError(t *testing.T) {
	t.Parallel()
	e := setup(t, func(o *options) { o.wrap = func(s store.Store) store.Store { return brokenStore{s} } })
	r := e.do("GET", "/admin/v1/upstreams/up_x", nil)
	wantErr(t, r, 500, "internal")
	if strings.Contains(string(r.body), "credential_kind") {
		t.Fatalf("the cause leaked into the response: %s", r.body)
	}
	if logs := e.logs.String(); !strings.Contains(logs, `"level":"ERROR"`) || !strings.Contains(logs, "credential_kind does not exist") {
		t.Fatalf("the cause was not logged: %s", logs)
	}
}

// P-API-3: with the database gone, every route that needs it answers 503
// storage_unavailable; the document still answers.
func TestStorageUnavailable(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reqs := e.requests()
	e.st.Close()
	for _, rq := range reqs {
		hdr := []string{"If-Match", "*"}
		if strings.HasPrefix(rq.path, "/admin/v1/plugins/wasm") {
			hdr = append(hdr, "Content-Type", "application/wasm")
		}
		r := e.do(rq.method, rq.path, rq.body, hdr...)
		switch {
		case strings.HasSuffix(rq.path, "/openapi.json") || strings.HasSuffix(rq.path, "/price-catalog") || strings.HasSuffix(rq.path, "/me"):
			if r.status != 200 {
				t.Fatalf("%s %s without storage: %d %s", rq.method, rq.path, r.status, r.body)
			}
		case rq.method == "HEAD":
			if r.status != 503 || len(r.body) != 0 {
				t.Fatalf("HEAD %s: %d", rq.path, r.status)
			}
		default:
			wantErr(t, r, 503, "storage_unavailable")
		}
	}
	if logs := e.logs.String(); !strings.Contains(logs, `"code":"storage_unavailable"`) || !strings.Contains(logs, `"level":"WARN"`) {
		t.Fatalf("outage not logged: %s", logs)
	}
}

// countingRuntime counts snapshot refreshes and can fail them.
type countingRuntime struct {
	admin.Runtime
	mu   sync.Mutex
	n    int
	fail bool
}

func (c *countingRuntime) Refresh(ctx context.Context) error {
	c.mu.Lock()
	c.n++
	fail := c.fail
	c.mu.Unlock()
	if fail {
		return errors.New("rebuild failed")
	}
	return c.Runtime.Refresh(ctx)
}

func (c *countingRuntime) count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

// P-RUNTIME-1: every committed change refreshes the snapshot once, before
// the response; a refused request does not; a failed refresh still answers
// success, since the change is committed and the reconciler applies it.
func TestRefreshAfterEveryChange(t *testing.T) {
	t.Parallel()
	cr := &countingRuntime{}
	e := setup(t, func(o *options) { o.runtime = cr })
	cr.Runtime = runtimeAdapter{e.rt}
	step := func(want int, method, path string, body any, hdr ...string) map[string]any {
		t.Helper()
		before := cr.count()
		r := e.do(method, path, body, hdr...)
		if got := cr.count() - before; got != want {
			t.Fatalf("%s %s (%d): %d refreshes, want %d", method, path, r.status, got, want)
		}
		if len(r.body) == 0 || r.status >= 400 {
			return nil
		}
		return r.json(t)
	}
	u := step(1, "POST", "/admin/v1/upstreams", map[string]any{"name": "u", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_value": "k"})
	up := "/admin/v1/upstreams/" + u["id"].(string)
	step(1, "PUT", up, map[string]any{"name": "u", "base_url": "https://a.example/v2"})
	step(1, "PATCH", up, map[string]any{"name": "u2"}, "If-Match", "*")
	step(1, "POST", up+"/disable", nil)
	step(1, "POST", up+"/enable", nil)
	step(0, "GET", up, nil)
	step(0, "PATCH", up, map[string]any{"name": "u3"})
	p := step(1, "POST", "/admin/v1/principals", map[string]any{"name": "p", "kind": "machine"})
	pp := "/admin/v1/principals/" + p["id"].(string)
	step(1, "PUT", pp, map[string]any{"name": "p", "kind": "user"})
	step(1, "PATCH", pp, map[string]any{"enabled": false})
	step(1, "POST", pp+"/enable", nil)
	step(1, "POST", pp+"/disable", nil)
	step(1, "PUT", pp+"/allowed_models", map[string]any{"allowed_models": []string{"a"}})
	k := step(1, "POST", pp+"/keys", nil)
	step(1, "DELETE", pp+"/keys/"+k["id"].(string), nil)
	step(0, "POST", pp+"/keys", map[string]any{"bogus": 1})
	step(1, "DELETE", up, nil)
	cr.mu.Lock()
	cr.fail = true
	cr.mu.Unlock()
	step(1, "DELETE", pp, nil)
	r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "v", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_value": "k"})
	if r.status != 201 {
		t.Fatalf("create with a failing refresh: %d %s", r.status, r.body)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "rebuild failed") || !strings.Contains(logs, "reconciler") {
		t.Fatalf("failed refresh not logged: %s", logs)
	}
	if _, err := e.st.GetUpstream(context.Background(), r.json(t)["id"].(string)); err != nil {
		t.Fatalf("the change was not committed: %v", err)
	}
}

// No secret ever reaches the log, at any level, whatever the outcome.
func TestLogsHoldNoSecrets(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "a", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_value": "sk-ant-literal-0001"})
	e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "b", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_env": "ANTHROPIC_KEY"})
	e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "c", "kind": "vendor_api_key", "base_url": "https://user:pw-0002@a.example", "api_key_value": "sk-ant-literal-0003"})
	e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "a", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_value": "sk-ant-literal-0004"})
	e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "d", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_value": "sk-ant-literal-0005", "api_key_env": "X"})
	e.do("POST", "/admin/v1/upstreams", `{"name":"e","api_key_value":"sk-ant-literal-0006",`)
	pid := e.principal("p")["id"].(string)
	k := e.key(pid)["key"].(string)
	send(t, e.srv.URL, "GET", "/admin/v1/status", nil, "Authorization", "Bearer sk-wrong-admin-0007")
	e.st.Close()
	e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "f", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_value": "sk-ant-literal-0008"})
	logs := e.logs.String()
	if !strings.Contains(logs, "admin request refused") {
		t.Fatalf("refusals are not logged at debug: %s", logs)
	}
	for _, s := range []string{"literal-000", "pw-0002", serverEnv["ANTHROPIC_KEY"], k, k[12:], token, "wrong-admin-0007"} {
		if strings.Contains(logs, s) {
			t.Fatalf("the log holds a secret %q:\n%s", s, logs)
		}
	}
}

var _ = fmt.Sprint
