package admin_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/egress"
)

// exportOf is the whole stored configuration, to prove a refusal changed
// nothing.
func (e *env) exportOf() string {
	e.t.Helper()
	r := e.do("GET", "/admin/v1/export", nil)
	if r.status != 200 {
		e.t.Fatalf("export: %d %s", r.status, r.body)
	}
	return string(r.body)
}

func (e *env) reads(name string) int {
	e.getenvMu.Lock()
	defer e.getenvMu.Unlock()
	return e.getenvCalls[name]
}

// 19.1: api_key_env names only variables the operator allowed; the
// proxy's own variables never, and a refused variable is never read.
func TestAPIKeyEnvPolicy(t *testing.T) {
	t.Parallel()
	e := setup(t)
	before := e.exportOf()
	up := func(env string) map[string]any {
		return map[string]any{"name": "u", "kind": "vendor_api_key", "base_url": "https://api.example", "api_key_env": env}
	}
	for _, name := range []string{"PROXY_MASTER_KEY", "PROXY_ADMIN_TOKEN", "PROXY_DATABASE_URL", "MY_ADMIN_TOKEN", "HOME", "PROXY_UPSTREAM_KEY_"} {
		r := e.do("POST", "/admin/v1/upstreams", up(name))
		wantErr(t, r, 400, "api_key_env_not_allowed")
		if v := serverEnv[name]; v != "" && strings.Contains(string(r.body)+e.logs.String(), v) {
			t.Fatalf("%s: the refusal or the log holds the variable's value", name)
		}
		if n := e.reads(name); n != 0 {
			t.Fatalf("%s: a refused variable was read %d times", name, n)
		}
	}
	if after := e.exportOf(); after != before {
		t.Fatalf("a refusal changed the configuration:\n%s\n%s", before, after)
	}
	// The documented prefix is always allowed.
	r := e.do("POST", "/admin/v1/upstreams", up("PROXY_UPSTREAM_KEY_SIM"))
	if r.status != 201 {
		t.Fatalf("prefixed variable: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	// PUT is policed like POST.
	r = e.do("PUT", "/admin/v1/upstreams/"+id, map[string]any{"name": "u", "base_url": "https://api.example", "api_key_env": "PROXY_MASTER_KEY"})
	wantErr(t, r, 400, "api_key_env_not_allowed")
}

// 19.5: a secret pasted into api_key_env is neither echoed nor logged.
func TestAPIKeyEnvDoesNotEchoSecrets(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const pasted = "sk-ant-api03-PASTED-by-mistake-0123456789"
	for _, v := range []string{pasted, "pasted secret with spaces 0123456789", strings.Repeat("A", 200)} {
		r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "u", "kind": "vendor_api_key", "base_url": "https://api.example", "api_key_env": v})
		wantErr(t, r, 400, "invalid_request")
		if !strings.Contains(string(r.body), "not a valid variable name") {
			t.Fatalf("the refusal does not say why: %s", r.body)
		}
		if strings.Contains(string(r.body), v) || strings.Contains(e.logs.String(), v) {
			t.Fatalf("the value was echoed:\nbody %s\nlog %s", r.body, e.logs.String())
		}
		if e.reads(v) != 0 {
			t.Fatal("a value that is not a variable name was looked up")
		}
	}
	if !strings.Contains(e.logs.String(), "admin request refused") {
		t.Fatal("the refusals were not logged at all (the test would prove nothing)")
	}
}

// 19.4: stored free text is bounded, valid Unicode, and not blank; a
// refusal changes nothing.
func TestInputBounds(t *testing.T) {
	t.Parallel()
	e := setup(t)
	pid := e.principal("p")["id"].(string)
	before := e.exportOf()
	long := strings.Repeat("m", 257)
	cases := []struct {
		name, method, path string
		body               any
	}{
		{"long model id", "POST", "/admin/v1/principals", map[string]any{"name": "q", "kind": "machine", "allowed_models": []string{long}}},
		{"long model id (PUT list)", "PUT", "/admin/v1/principals/" + pid + "/allowed_models", map[string]any{"allowed_models": []string{"ok", long}}},
		{"blank model id", "PATCH", "/admin/v1/principals/" + pid, map[string]any{"allowed_models": []string{"   "}}},
		{"control character in model id", "PATCH", "/admin/v1/principals/" + pid, map[string]any{"allowed_models": []string{"claude\n"}}},
		{"invalid UTF-8 in a name", "POST", "/admin/v1/principals", "{\"name\":\"a\xffb\",\"kind\":\"machine\"}"},
		{"invalid UTF-8 in a model id", "PATCH", "/admin/v1/principals/" + pid, "{\"allowed_models\":[\"claude-\xc3\"]}"},
		{"lone high surrogate", "POST", "/admin/v1/principals", `{"name":"a\ud800b","kind":"machine"}`},
		{"lone low surrogate", "POST", "/admin/v1/principals", `{"name":"a\udc00","kind":"machine"}`},
		{"high surrogate then a non-surrogate", "POST", "/admin/v1/principals", `{"name":"\ud800\u0041","kind":"machine"}`},
		{"lone surrogate in a plugin config", "POST", "/admin/v1/principals/" + pid + "/plugin-chain", `{"slot":"router","wasm_registry_id":"x","config":{"k":"\uDBFF"}}`},
		{"empty key name", "POST", "/admin/v1/principals/" + pid + "/keys", map[string]any{"name": ""}},
		{"blank key name", "POST", "/admin/v1/principals/" + pid + "/keys", map[string]any{"name": "   "}},
		{"long key name", "POST", "/admin/v1/principals/" + pid + "/keys", map[string]any{"name": strings.Repeat("k", 129)}},
		{"plugin config too large", "POST", "/admin/v1/principals/" + pid + "/plugin-chain", fmt.Sprintf(`{"slot":"router","wasm_registry_id":"x","config":{"k":"%s"}}`, strings.Repeat("c", 70<<10))},
		{"long base_url", "POST", "/admin/v1/upstreams", map[string]any{"name": "u", "kind": "vendor_api_key", "base_url": "https://a.example/" + strings.Repeat("p", 2100), "api_key_value": "k"}},
		{"long api_key_value", "POST", "/admin/v1/upstreams", map[string]any{"name": "u", "kind": "vendor_api_key", "base_url": "https://a.example", "api_key_value": strings.Repeat("k", 9000)}},
	}
	for _, c := range cases {
		r := e.do(c.method, c.path, c.body)
		if r.status != 400 {
			t.Errorf("%s: want 400, got %d %s", c.name, r.status, r.body)
			continue
		}
		code := r.json(t)["error"].(map[string]any)["code"]
		if code != "invalid_request" && code != "invalid_location" {
			t.Errorf("%s: code %v", c.name, code)
		}
	}
	if after := e.exportOf(); after != before {
		t.Fatalf("a refusal changed the configuration:\n%s\n%s", before, after)
	}
	// Valid text outside the BMP (a surrogate pair) and a key without a
	// name are still accepted.
	if r := e.do("POST", "/admin/v1/principals", `{"name":"smile \ud83d\ude00","kind":"machine"}`); r.status != 201 {
		t.Fatalf("surrogate pair: %d %s", r.status, r.body)
	} else if got := r.json(t)["name"]; got != "smile \U0001F600" {
		t.Fatalf("stored %q", got)
	}
	if r := e.do("POST", "/admin/v1/principals/"+pid+"/keys", nil); r.status != 201 {
		t.Fatalf("unnamed key: %d %s", r.status, r.body)
	}
}

// 19.2 at the admin edge: the destination policy answers invalid_location
// on create, replace, patch and the OAuth token endpoint.
func TestDestinationPolicy(t *testing.T) {
	t.Parallel()
	e := setup(t, func(o *options) { o.destinations = &egress.Policy{Resolver: noDNS{}} })
	before := e.exportOf()
	for _, u := range []string{"http://169.254.169.254/latest/meta-data", "http://2852039166/", "http://[::ffff:169.254.169.254]/",
		"http://metadata.google.internal/", "http://127.0.0.1:8089", "http://10.0.0.7/", "http://0.0.0.0/"} {
		r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "u", "kind": "vendor_api_key", "base_url": u, "api_key_value": "k"})
		wantErr(t, r, 400, "invalid_location")
		if strings.Contains(string(r.body), strings.TrimPrefix(u, "http://")) {
			t.Fatalf("the refusal repeats the location: %s", r.body)
		}
	}
	r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "u", "kind": "vendor_oauth", "base_url": "https://api.example",
		"oauth_token_url": "http://metadata/token"})
	wantErr(t, r, 400, "invalid_location")
	if after := e.exportOf(); after != before {
		t.Fatalf("a refusal changed the configuration")
	}
	r = e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "u", "kind": "vendor_api_key", "base_url": "https://93.184.215.14", "api_key_value": "k"})
	if r.status != 201 {
		t.Fatalf("public address: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	wantErr(t, e.do("PUT", "/admin/v1/upstreams/"+id, map[string]any{"name": "u", "base_url": "http://169.254.169.254"}), 400, "invalid_location")
	wantErr(t, e.do("PATCH", "/admin/v1/upstreams/"+id, map[string]any{"base_url": "http://[fe80::1]/"}, "If-Match", `"1"`), 400, "invalid_location")
}

// noDNS answers no name: the tests above use only addresses and the names
// the policy refuses before any lookup.
type noDNS struct{}

func (noDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return nil, fmt.Errorf("no DNS in this test (%s)", host)
}
