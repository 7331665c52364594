package admin_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// fakeCompiler accepts "\x00asm <slot> <slot>…" modules: the admin API's
// handling of uploads is tested here; real modules run in package plugins
// and through the real binary in conformance/plugins.
type fakeCompiler struct{}

func (fakeCompiler) Compile(_ context.Context, wasm []byte) (string, []string, error) {
	s, ok := strings.CutPrefix(string(wasm), "\x00asm")
	if !ok || strings.TrimSpace(s) == "" {
		return "", nil, errors.New("not a WASM plugin module")
	}
	h := sha256.Sum256(wasm)
	return hex.EncodeToString(h[:]), strings.Fields(s), nil
}

var nameSeq atomic.Int64

// RandomName is a name no other test uses.
func RandomName() string { return fmt.Sprintf("n%d", nameSeq.Add(1)) }

func (e *env) plugin(name string, slots ...string) map[string]any {
	e.t.Helper()
	r := e.do("POST", "/admin/v1/plugins/wasm?name="+name+"&version=1.0", "\x00asm "+strings.Join(slots, " "), "Content-Type", "application/wasm")
	if r.status != 201 {
		e.t.Fatalf("upload: %d %s", r.status, r.body)
	}
	return r.json(e.t)
}

// JSON201 posts and expects 201.
func (e *env) JSON201(method, path string, body any, hdr ...string) map[string]any {
	e.t.Helper()
	r := e.do(method, path, body, hdr...)
	if r.status != 201 {
		e.t.Fatalf("%s %s: %d %s", method, path, r.status, r.body)
	}
	return r.json(e.t)
}

// P-REG-1, P-REG-2, P-REG-3, P-REG-4, P-REG-5, P-REG-6: upload, read,
// references with fingerprint, refusals, cascade delete.
func TestPluginRegistry(t *testing.T) {
	t.Parallel()
	e := setup(t)
	up := e.plugin("router", "router", "warmup_dialect")
	id := up["id"].(string)
	if up["version"] != "1.0" || !strings.HasPrefix(up["digest"].(string), "sha256:") || up["refcount"] != 0.0 || up["revision"] != 1.0 ||
		fmt.Sprint(up["slots"]) != "[router warmup_dialect]" {
		t.Fatalf("entry %v", up)
	}
	wantErr(t, e.do("POST", "/admin/v1/plugins/wasm?name=router&version=1.0", "\x00asm router", "Content-Type", "application/wasm"), 409, "conflict")
	wantErr(t, e.do("POST", "/admin/v1/plugins/wasm?name=x", "\x00asm router"), 415, "unsupported_media_type")
	wantErr(t, e.do("POST", "/admin/v1/plugins/wasm", "\x00asm router", "Content-Type", "application/wasm"), 400, "invalid_request")

	// Bindings: a chain entry and an upstream's warm-up dialect.
	pid := e.principal("p")["id"].(string)
	entry := e.JSON201("POST", "/admin/v1/principals/"+pid+"/plugin-chain", map[string]any{"slot": "router", "wasm_registry_id": id, "config": map[string]any{"k": 1}})
	uid := e.oauthUpstream("o")["id"].(string)
	r := e.do("PATCH", "/admin/v1/upstreams/"+uid, map[string]any{"warmup_dialect_plugin": id}, "If-Match", `"1"`)
	if r.status != 200 || r.json(t)["warmup_dialect_plugin"] != id {
		t.Fatalf("bind dialect: %d %s", r.status, r.body)
	}
	wantErr(t, e.do("PATCH", "/admin/v1/upstreams/"+uid, map[string]any{"warmup_dialect_plugin": "wasm_nope"}, "If-Match", `"2"`), 404, "unknown_registry_entry")
	got := e.do("GET", "/admin/v1/plugins/registry/"+id, nil)
	if got.json(t)["refcount"] != 2.0 || got.header.Get("ETag") != `"1"` {
		t.Fatalf("refcount: %s", got.body)
	}
	refs := e.do("GET", "/admin/v1/plugins/registry/"+id+"/references", nil).json(t)
	if len(refs["references"].([]any)) != 2 || refs["reference_fingerprint"] == "" {
		t.Fatalf("references %v", refs)
	}
	wantErr(t, e.do("GET", "/admin/v1/plugins/registry/wasm_nope/references", nil), 404, "unknown_registry_entry")
	wantErr(t, e.do("PATCH", "/admin/v1/plugins/registry/"+id, map[string]any{"version": "2.0"}, "If-Match", `"7"`), 409, "stale_revision")
	p := e.do("PATCH", "/admin/v1/plugins/registry/"+id, map[string]any{"version": "2.0"}, "If-Match", `"1"`)
	if p.status != 200 || p.json(t)["version"] != "2.0" || p.json(t)["revision"] != 2.0 {
		t.Fatalf("patch %d %s", p.status, p.body)
	}

	// Deletes: If-Match required, referenced_by, stale, fingerprint rules.
	wantErr(t, e.do("DELETE", "/admin/v1/plugins/registry/"+id, nil), 428, "precondition_required")
	wantErr(t, e.do("DELETE", "/admin/v1/plugins/registry/"+id, nil, "If-Match", `"2"`), 409, "referenced_by")
	wantErr(t, e.do("DELETE", "/admin/v1/plugins/registry/"+id, nil, "If-Match", `"1"`), 409, "stale_revision")
	wantErr(t, e.do("DELETE", "/admin/v1/plugins/registry/"+id+"?cascade=references", nil, "If-Match", `"2"`), 400, "reference_fingerprint_required")
	// The impact list changes after it was read: the old fingerprint is stale.
	pid2 := e.principal("p2")["id"].(string)
	e.JSON201("POST", "/admin/v1/principals/"+pid2+"/plugin-chain", map[string]any{"slot": "router", "wasm_registry_id": id, "position": 0})
	wantErr(t, e.do("DELETE", "/admin/v1/plugins/registry/"+id+"?cascade=references", nil, "If-Match", `"2"`,
		"X-Reference-Fingerprint", refs["reference_fingerprint"].(string)), 409, "references_changed")
	refs = e.do("GET", "/admin/v1/plugins/registry/"+id+"/references", nil).json(t)
	d := e.do("DELETE", "/admin/v1/plugins/registry/"+id+"?cascade=references", nil, "If-Match", `"2"`, "X-Reference-Fingerprint", refs["reference_fingerprint"].(string))
	if d.status != 200 || len(d.json(t)["removed_references"].([]any)) != 3 {
		t.Fatalf("cascade: %d %s", d.status, d.body)
	}
	wantErr(t, e.do("GET", "/admin/v1/plugins/registry/"+id, nil), 404, "unknown_registry_entry")
	if u := e.do("GET", "/admin/v1/upstreams/"+uid, nil).json(t); u["warmup_dialect_plugin"] != nil {
		t.Fatal("the dialect binding survived the cascade")
	}
	chain := e.do("GET", "/admin/v1/principals/"+pid+"/plugin-chain", nil).json(t)["entries"].([]any)
	for _, c := range chain {
		if c.(map[string]any)["id"] == entry["id"] {
			t.Fatal("the chain binding survived the cascade")
		}
	}
}

// P-CHAIN-1, P-CHAIN-2: insert, conflict, reorder with revisions,
// rebalance, update and delete with revisions; the built-in entry moves
// and goes like any other.
func TestPluginChainEndpoints(t *testing.T) {
	t.Parallel()
	e := setup(t)
	pid := e.principal("p")["id"].(string)
	a := e.plugin("a", "router")["id"].(string)
	dialect := e.plugin("d", "warmup_dialect")["id"].(string)
	ea := e.JSON201("POST", "/admin/v1/principals/"+pid+"/plugin-chain", map[string]any{"slot": "router", "wasm_registry_id": a, "position": nil})
	wantErr(t, e.do("POST", "/admin/v1/principals/"+pid+"/plugin-chain", map[string]any{"slot": "router", "wasm_registry_id": a}), 409, "conflict")
	wantErr(t, e.do("POST", "/admin/v1/principals/"+pid+"/plugin-chain", map[string]any{"slot": "router", "wasm_registry_id": dialect}), 400, "invalid_request")
	wantErr(t, e.do("POST", "/admin/v1/principals/"+pid+"/plugin-chain", map[string]any{"slot": "router", "wasm_registry_id": "wasm_nope"}), 404, "unknown_registry_entry")
	wantErr(t, e.do("POST", "/admin/v1/principals/pr_nope/plugin-chain", map[string]any{"slot": "router", "wasm_registry_id": a}), 404, "unknown_principal")
	wantErr(t, e.do("POST", "/admin/v1/principals/"+pid+"/plugin-chain", map[string]any{"slot": "other", "wasm_registry_id": a}), 400, "invalid_request")

	list := func() []map[string]any {
		var out []map[string]any
		for _, x := range e.do("GET", "/admin/v1/principals/"+pid+"/plugin-chain", nil).json(t)["entries"].([]any) {
			out = append(out, x.(map[string]any))
		}
		return out
	}
	chain := list()
	if len(chain) != 2 || chain[0]["builtin"] != "subscription_preference" || chain[1]["id"] != ea["id"] {
		t.Fatalf("chain %v", chain)
	}
	order := []map[string]any{{"id": chain[1]["id"], "revision": chain[1]["revision"]}, {"id": chain[0]["id"], "revision": 99}}
	wantErr(t, e.do("POST", "/admin/v1/principals/"+pid+"/plugin-chain/reorder", map[string]any{"order": order}), 409, "stale_revision")
	wantErr(t, e.do("POST", "/admin/v1/principals/"+pid+"/plugin-chain/reorder", map[string]any{"order": order[:1]}), 400, "invalid_request")
	order[1]["revision"] = chain[0]["revision"]
	if r := e.do("POST", "/admin/v1/principals/"+pid+"/plugin-chain/reorder", map[string]any{"order": order}); r.status != 204 {
		t.Fatalf("reorder %d %s", r.status, r.body)
	}
	chain = list()
	if chain[0]["id"] != ea["id"] || chain[1]["builtin"] != "subscription_preference" {
		t.Fatalf("after reorder %v", chain)
	}
	if r := e.do("POST", "/admin/v1/principals/"+pid+"/plugin-chain/rebalance", nil); r.status != 204 {
		t.Fatalf("rebalance %d", r.status)
	}
	chain = list()
	if chain[1]["position"] != 10.0 {
		t.Fatalf("rebalanced %v", chain)
	}
	id := chain[0]["id"].(string)
	wantErr(t, e.do("PUT", "/admin/v1/plugin-chain-entries/"+id, map[string]any{"enabled": false}, "If-Match", `"99"`), 409, "stale_revision")
	u := e.do("PUT", "/admin/v1/plugin-chain-entries/"+id, map[string]any{"config": map[string]any{"x": 2}}, "If-Match", fmt.Sprintf(`"%v"`, chain[0]["revision"]))
	if u.status != 200 || u.json(t)["config"].(map[string]any)["x"] != 2.0 {
		t.Fatalf("update %d %s", u.status, u.body)
	}
	builtin := chain[1]
	wantErr(t, e.do("DELETE", "/admin/v1/plugin-chain-entries/"+builtin["id"].(string), nil, "If-Match", `"99"`), 409, "stale_revision")
	if r := e.do("DELETE", "/admin/v1/plugin-chain-entries/"+builtin["id"].(string), nil, "If-Match", fmt.Sprintf(`"%v"`, builtin["revision"])); r.status != 204 {
		t.Fatalf("delete builtin %d %s", r.status, r.body)
	}
	wantErr(t, e.do("DELETE", "/admin/v1/plugin-chain-entries/"+builtin["id"].(string), nil), 404, "not_found")
	if len(list()) != 1 {
		t.Fatal("the built-in entry was not removed")
	}
}

// The dashboard's static shell is served without a token; nothing else is.
func TestDashboardBypassesOnlyTheShell(t *testing.T) {
	t.Parallel()
	e := setup(t, func(o *options) {
		o.dashboard = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "shell") })
	})
	for _, p := range []string{"/dashboard", "/dashboard/", "/dashboard/app.js"} {
		r := send(t, e.srv.URL, "GET", p, nil, "Authorization", "")
		if r.status != 200 || string(r.body) != "shell" {
			t.Fatalf("GET %s without a token: %d %s", p, r.status, r.body)
		}
	}
	for _, p := range []string{"/dashboardx", "/admin/v1/upstreams"} {
		if r := send(t, e.srv.URL, "GET", p, nil, "Authorization", ""); r.status != 401 {
			t.Fatalf("GET %s without a token: %d", p, r.status)
		}
	}
	if r := send(t, e.srv.URL, "POST", "/dashboard/", "{}", "Authorization", ""); r.status != 401 {
		t.Fatalf("POST to the shell without a token: %d", r.status)
	}
}
