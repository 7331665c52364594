package admin_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// P-PR-1, P-PR-4, P-PR-5: create, the response fields, and the built-in
// router entry every principal starts with.
func TestPrincipalCreate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("POST", "/admin/v1/principals", map[string]any{"name": "app", "kind": "machine", "allowed_models": []string{"claude-*", "gpt"},
		"default_limits": []any{map[string]any{"kind": "requests", "window_secs": 60, "max": 10}, map[string]any{"kind": "tokens", "window_secs": 3600, "max": 100000}}})
	if r.status != 201 || r.header.Get("ETag") != `"1"` {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	p := r.json(t)
	id := p["id"].(string)
	if r.header.Get("Location") != "/admin/v1/principals/"+id {
		t.Fatalf("Location %q", r.header.Get("Location"))
	}
	// P-PR-4: every field, as persisted.
	want := map[string]string{"name": `"app"`, "kind": `"machine"`, "enabled": "true", "revision": "1", "cache_keepalive": "null",
		"allowed_models": `["claude-*","gpt"]`, "default_limits": `[{"kind":"requests","max":10,"window_secs":60},{"kind":"tokens","max":100000,"window_secs":3600}]`,
		"created_at_unix_secs": fmt.Sprint(now.Unix()), "updated_at_unix_secs": fmt.Sprint(now.Unix())}
	for k, v := range want {
		if got := js(p[k]); got != v {
			t.Errorf("%s = %s, want %s", k, got, v)
		}
	}
	// Defaults: no models (allows none), no limits, keep-alive off.
	u := e.do("POST", "/admin/v1/principals", map[string]any{"name": "user", "kind": "user"}).json(t)
	if fmt.Sprint(u["allowed_models"], u["default_limits"], u["cache_keepalive"]) != "[] [] <nil>" || u["kind"] != "user" {
		t.Fatalf("defaults %v", u)
	}
	if sp := e.rt.Current().Principal(id); sp == nil || !sp.AllowsModel("claude-3") || sp.AllowsModel("other") {
		t.Fatalf("snapshot principal %+v", sp)
	}
	// P-PR-5: the built-in subscription-preference router at position 0.
	c := e.do("GET", "/admin/v1/principals/"+id+"/plugin-chain", nil).json(t)
	entries := c["entries"].([]any)
	if c["principal_id"] != id || len(entries) != 1 {
		t.Fatalf("chain %v", c)
	}
	first := entries[0].(map[string]any)
	if first["slot"] != "router" || first["builtin"] != "subscription_preference" || first["position"] != 0.0 ||
		first["wasm_registry_id"] != nil || first["principal_id"] != id || first["enabled"] != true {
		t.Fatalf("router entry %v", first)
	}
	wantErr(t, e.do("GET", "/admin/v1/principals/pr_nope/plugin-chain", nil), 404, "unknown_principal")
	if l := e.do("GET", "/admin/v1/principals", nil).list(t); len(l) != 2 {
		t.Fatalf("list %v", l)
	}
	g := e.do("GET", "/admin/v1/principals/"+id, nil)
	if g.status != 200 || g.header.Get("ETag") != `"1"` || g.json(t)["name"] != "app" {
		t.Fatalf("get: %d %s", g.status, g.body)
	}
	if h := e.do("HEAD", "/admin/v1/principals/"+id, nil); h.status != 200 || h.header.Get("ETag") != `"1"` || len(h.body) != 0 {
		t.Fatalf("head: %d %q", h.status, h.body)
	}
	wantErr(t, e.do("GET", "/admin/v1/principals/pr_nope", nil), 404, "unknown_principal")
}

// Principal create refusals; none changes anything.
func TestPrincipalCreateRefusals(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.principal("app")
	ka := func(kv ...any) map[string]any {
		c := map[string]any{"enabled": true}
		for i := 0; i < len(kv); i += 2 {
			c[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"name": "x", "kind": "machine", "cache_keepalive": c}
	}
	cases := []struct {
		name   string
		body   any
		status int
		code   string
		says   string
	}{
		{"name taken", map[string]any{"name": "app", "kind": "machine"}, 409, "conflict", ""},
		{"unknown kind", map[string]any{"name": "x", "kind": "robot"}, 400, "invalid_request", "kind"},
		{"missing kind", map[string]any{"name": "x"}, 400, "invalid_request", "kind"},
		{"missing name", map[string]any{"kind": "machine"}, 400, "invalid_request", "name"},
		{"empty model", map[string]any{"name": "x", "kind": "machine", "allowed_models": []string{"a", ""}}, 400, "invalid_request", "allowed_models[1]"},
		{"model not a string", map[string]any{"name": "x", "kind": "machine", "allowed_models": []any{1}}, 400, "invalid_request", "allowed_models"},
		{"limit kind", map[string]any{"name": "x", "kind": "machine", "default_limits": []any{map[string]any{"kind": "bytes", "window_secs": 1, "max": 1}}}, 400, "invalid_request", "default_limits[0].kind"},
		{"limit window", map[string]any{"name": "x", "kind": "machine", "default_limits": []any{map[string]any{"kind": "tokens", "window_secs": 0, "max": 1}}}, 400, "invalid_request", "default_limits[0].window_secs"},
		{"limit max", map[string]any{"name": "x", "kind": "machine", "default_limits": []any{map[string]any{"kind": "tokens", "window_secs": 1, "max": 0}}}, 400, "invalid_request", "default_limits[0].max"},
		{"limit field", map[string]any{"name": "x", "kind": "machine", "default_limits": []any{map[string]any{"kind": "tokens", "window_secs": 1, "max": 1, "burst": 2}}}, 400, "invalid_request", "burst"},
		{"limits not an array", map[string]any{"name": "x", "kind": "machine", "default_limits": map[string]any{}}, 400, "invalid_request", "default_limits"},
		{"unknown field", map[string]any{"name": "x", "kind": "machine", "enabled": false}, 400, "invalid_request", "enabled"},
		// P-PR-2: enabled is required when cache_keepalive is present.
		{"keep-alive without enabled", map[string]any{"name": "x", "kind": "machine", "cache_keepalive": map[string]any{"max_refreshes_per_session": 3}}, 400, "invalid_request", "cache_keepalive.enabled"},
		{"keep-alive not an object", map[string]any{"name": "x", "kind": "machine", "cache_keepalive": true}, 400, "invalid_request", "cache_keepalive"},
		{"keep-alive unknown field", ka("ttl", 5), 400, "invalid_request", "cache_keepalive.ttl"},
		{"keep-alive wrong type", ka("snapshot_max_bytes", "big"), 400, "invalid_request", "cache_keepalive.snapshot_max_bytes"},
		{"keep-alive classifier field", ka("classifier", map[string]any{"mode": "x"}), 400, "invalid_request", "cache_keepalive.classifier.mode"},
		{"too many tools", ka("classifier", map[string]any{"extra_wait_for_user_tools": make([]string, 65)}), 400, "invalid_request", "extra_wait_for_user_tools"},
		{"empty tool name", ka("classifier", map[string]any{"extra_wait_for_user_tools": []string{""}}), 400, "invalid_request", "extra_wait_for_user_tools[0]"},
		// P-PR-3
		{"llm_judge", ka("classifier", map[string]any{"llm_judge": map[string]any{"model": "m"}}), 400, "unsupported_cache_keepalive_llm_judge", ""},
		{"llm_judge false", ka("classifier", map[string]any{"llm_judge": false}), 400, "unsupported_cache_keepalive_llm_judge", ""},
		{"llm_judge without enabled", map[string]any{"name": "x", "kind": "machine", "cache_keepalive": map[string]any{"classifier": map[string]any{"llm_judge": "x"}}}, 400, "unsupported_cache_keepalive_llm_judge", ""},
	}
	// P-PR-2: every bound, just outside.
	for _, b := range []struct {
		field    string
		low, top int64
	}{
		{"refresh_lead_time_5m_secs", 5, 240}, {"refresh_lead_time_1h_secs", 5, 3540}, {"max_refreshes_per_session", 1, 1000},
		{"max_total_duration_secs", 60, 86400}, {"snapshot_max_bytes", 1024, 33554432},
	} {
		cases = append(cases,
			struct {
				name   string
				body   any
				status int
				code   string
				says   string
			}{b.field + " low", ka(b.field, b.low-1), 400, "invalid_request", "cache_keepalive." + b.field},
			struct {
				name   string
				body   any
				status int
				code   string
				says   string
			}{b.field + " high", ka(b.field, b.top+1), 400, "invalid_request", "cache_keepalive." + b.field})
	}
	for _, c := range cases {
		e.unchanged(c.name, func() {
			r := e.do("POST", "/admin/v1/principals", c.body)
			wantErr(t, r, c.status, c.code)
			if c.says != "" {
				wantMessage(t, r, c.says)
			}
		})
	}
}

// P-PR-2: omitted keep-alive fields take their defaults and the value is
// persisted normalised; bounds are inclusive.
func TestCacheKeepaliveNormalised(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("POST", "/admin/v1/principals", map[string]any{"name": "d", "kind": "machine", "cache_keepalive": map[string]any{"enabled": false}})
	got, _ := json.Marshal(r.json(t)["cache_keepalive"])
	const defaults = `{"classifier":{"extra_wait_for_user_tools":[],"treat_end_turn_as_ambiguous":false},"enabled":false,"max_refreshes_per_session":12,"max_total_duration_secs":3600,"refresh_lead_time_1h_secs":120,"refresh_lead_time_5m_secs":30,"snapshot_max_bytes":2097152}`
	if string(got) != defaults {
		t.Fatalf("defaults:\n%s\nwant\n%s", got, defaults)
	}
	low := map[string]any{"enabled": true, "refresh_lead_time_5m_secs": 5, "refresh_lead_time_1h_secs": 5, "max_refreshes_per_session": 1, "max_total_duration_secs": 60, "snapshot_max_bytes": 1024,
		"classifier": map[string]any{"extra_wait_for_user_tools": make64(), "treat_end_turn_as_ambiguous": true, "llm_judge": nil}}
	high := map[string]any{"enabled": true, "refresh_lead_time_5m_secs": 240, "refresh_lead_time_1h_secs": 3540, "max_refreshes_per_session": 1000, "max_total_duration_secs": 86400, "snapshot_max_bytes": 33554432}
	for name, ka := range map[string]map[string]any{"low": low, "high": high} {
		r := e.do("POST", "/admin/v1/principals", map[string]any{"name": name, "kind": "machine", "cache_keepalive": ka})
		if r.status != 201 {
			t.Fatalf("%s bounds: %d %s", name, r.status, r.body)
		}
		persisted := r.json(t)["cache_keepalive"].(map[string]any)
		for k, v := range ka {
			if k != "classifier" && js(persisted[k]) != js(v) {
				t.Fatalf("%s: %s = %v, want %v", name, k, persisted[k], v)
			}
		}
		// GET returns what was persisted, and the snapshot carries it.
		id := r.json(t)["id"].(string)
		g, _ := json.Marshal(e.do("GET", "/admin/v1/principals/"+id, nil).json(t)["cache_keepalive"])
		p, _ := json.Marshal(persisted)
		var snap map[string]any
		json.Unmarshal(e.rt.Current().Principal(id).CacheKeepalive, &snap)
		s, _ := json.Marshal(snap)
		if string(g) != string(p) || string(s) != string(p) {
			t.Fatalf("%s: GET %s, snapshot %s, create %s", name, g, s, p)
		}
	}
	for _, p := range e.do("GET", "/admin/v1/principals", nil).list(t) {
		if p := p.(map[string]any); p["name"] == "low" {
			if tools := p["cache_keepalive"].(map[string]any)["classifier"].(map[string]any)["extra_wait_for_user_tools"].([]any); len(tools) != 64 {
				t.Fatalf("tools %d", len(tools))
			}
		}
	}
}

func make64() []string {
	out := make([]string, 64)
	for i := range out {
		out[i] = fmt.Sprintf("tool_%d", i)
	}
	return out
}

// P-PR-3, P-PR-6, P-PR-7: PUT, PATCH, allowed_models, enable/disable and
// DELETE with their refusals.
func TestPrincipalUpdates(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.principal("taken")
	r := e.do("POST", "/admin/v1/principals", map[string]any{"name": "app", "kind": "machine", "cache_keepalive": map[string]any{"enabled": true}})
	id := r.json(t)["id"].(string)
	path := "/admin/v1/principals/" + id
	judge := map[string]any{"enabled": true, "classifier": map[string]any{"llm_judge": true}}
	e.unchanged("refused updates", func() {
		// P-PR-3 on update.
		wantErr(t, e.do("PUT", path, map[string]any{"name": "app", "kind": "machine", "cache_keepalive": judge}), 400, "unsupported_cache_keepalive_llm_judge")
		wantErr(t, e.do("PATCH", path, map[string]any{"cache_keepalive": judge}), 400, "unsupported_cache_keepalive_llm_judge")
		wantErr(t, e.do("PUT", path, map[string]any{"name": "app", "kind": "machine"}, "If-Match", `"2"`), 409, "stale_revision")
		wantErr(t, e.do("PATCH", path, map[string]any{"enabled": false}, "If-Match", `"2"`), 409, "stale_revision")
		wantErr(t, e.do("PUT", path, map[string]any{"name": "taken", "kind": "machine"}), 409, "conflict")
		wantErr(t, e.do("PATCH", path, map[string]any{"name": "taken"}), 409, "conflict")
		wantErr(t, e.do("PUT", path, map[string]any{"name": "app", "kind": "robot"}), 400, "invalid_request")
		wantErr(t, e.do("PATCH", path, map[string]any{}), 400, "invalid_request")
		wantErr(t, e.do("PATCH", path, map[string]any{"kind": "user"}), 400, "invalid_request")
		wantErr(t, e.do("PATCH", path, map[string]any{"allowed_models": []string{""}}), 400, "invalid_request")
		wantErr(t, e.do("PATCH", path, map[string]any{"default_limits": []any{map[string]any{"kind": "x", "window_secs": 1, "max": 1}}}), 400, "invalid_request")
		wantErr(t, e.do("PUT", "/admin/v1/principals/pr_nope", map[string]any{"name": "z", "kind": "machine"}), 404, "unknown_principal")
		wantErr(t, e.do("PATCH", "/admin/v1/principals/pr_nope", map[string]any{"enabled": false}), 404, "unknown_principal")
		wantErr(t, e.do("PUT", path+"/allowed_models", map[string]any{"allowed_models": []string{"a"}}, "If-Match", `"2"`), 409, "stale_revision")
		wantErr(t, e.do("PUT", path+"/allowed_models", map[string]any{}), 400, "invalid_request")
		wantErr(t, e.do("PUT", path+"/allowed_models", map[string]any{"allowed_models": []string{"a"}, "x": 1}), 400, "invalid_request")
		wantErr(t, e.do("PUT", "/admin/v1/principals/pr_nope/allowed_models", map[string]any{"allowed_models": []string{}}), 404, "unknown_principal")
		wantErr(t, e.do("POST", path+"/disable", nil, "If-Match", `"2"`), 409, "stale_revision")
		wantErr(t, e.do("POST", "/admin/v1/principals/pr_nope/enable", nil), 404, "unknown_principal")
		wantErr(t, e.do("POST", "/admin/v1/principals/pr_nope/disable", nil), 404, "unknown_principal")
		wantErr(t, e.do("DELETE", path, nil, "If-Match", `"2"`), 409, "stale_revision")
		wantErr(t, e.do("DELETE", "/admin/v1/principals/pr_nope", nil), 404, "unknown_principal")
	})
	// P-PR-6: PATCH cache_keepalive null clears it.
	r = e.do("PATCH", path, map[string]any{"cache_keepalive": nil}, "If-Match", `"1"`)
	if r.status != 200 || r.json(t)["cache_keepalive"] != nil || r.json(t)["revision"] != 2.0 || r.header.Get("ETag") != `"2"` {
		t.Fatalf("PATCH null: %d %s", r.status, r.body)
	}
	if e.rt.Current().Principal(id).CacheKeepalive != nil {
		t.Fatal("snapshot keeps the cleared keep-alive")
	}
	// PATCH sets it again, normalised, leaving the other fields alone.
	r = e.do("PATCH", path, map[string]any{"cache_keepalive": map[string]any{"enabled": true, "max_refreshes_per_session": 5}, "default_limits": []any{map[string]any{"kind": "tokens", "window_secs": 60, "max": 9}}})
	p := r.json(t)
	if p["cache_keepalive"].(map[string]any)["max_refreshes_per_session"] != 5.0 || p["cache_keepalive"].(map[string]any)["snapshot_max_bytes"] != 2097152.0 ||
		p["name"] != "app" || p["kind"] != "machine" || len(p["default_limits"].([]any)) != 1 {
		t.Fatalf("PATCH set: %s", r.body)
	}
	r = e.do("PATCH", path, map[string]any{"name": "app2", "enabled": false, "allowed_models": []string{"*"}})
	if p := r.json(t); p["name"] != "app2" || p["enabled"] != false || fmt.Sprint(p["allowed_models"]) != "[*]" || p["cache_keepalive"] == nil {
		t.Fatalf("PATCH fields: %s", r.body)
	}
	// PUT replaces name, kind, models, limits and keep-alive; enabled stays.
	r = e.do("PUT", path, map[string]any{"name": "app3", "kind": "user"}, "If-Match", `W/"4"`)
	if p := r.json(t); r.status != 200 || p["kind"] != "user" || p["enabled"] != false || fmt.Sprint(p["allowed_models"], p["default_limits"], p["cache_keepalive"]) != "[] [] <nil>" || p["revision"] != 5.0 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	// PUT allowed_models.
	r = e.do("PUT", path+"/allowed_models", map[string]any{"allowed_models": []string{"a", "b*"}}, "If-Match", "5")
	if r.status != 200 || fmt.Sprint(r.json(t)["allowed_models"]) != "[a b*]" || r.header.Get("ETag") != `"6"` {
		t.Fatalf("allowed_models: %d %s", r.status, r.body)
	}
	if sp := e.rt.Current().Principal(id); !sp.AllowsModel("b-2") || sp.AllowsModel("c") {
		t.Fatal("snapshot models not refreshed")
	}
	r = e.do("PUT", path+"/allowed_models", map[string]any{"allowed_models": []string{}})
	if r.status != 200 || fmt.Sprint(r.json(t)["allowed_models"]) != "[]" {
		t.Fatalf("empty allowed_models: %d %s", r.status, r.body)
	}
	if r := e.do("POST", path+"/enable", nil, "If-Match", `"7"`); r.status != 200 || r.json(t)["enabled"] != true || r.header.Get("ETag") != `"8"` {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	if r := e.do("POST", path+"/disable", nil); r.status != 200 || r.json(t)["enabled"] != false {
		t.Fatalf("disable: %s", r.body)
	}
	if e.rt.Current().Principal(id).Enabled {
		t.Fatal("snapshot not refreshed after disable")
	}
}

// Deleting a principal takes its keys and chain with it, at once on the
// proxy path.
func TestPrincipalDelete(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.principal("p")["id"].(string)
	k := e.key(id)
	path := "/admin/v1/principals/" + id
	r := e.do("DELETE", path, nil, "If-Match", `"1"`)
	if r.status != 204 || len(r.body) != 0 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if e.rt.Current().Principal(id) != nil || e.rt.Current().KeyByHash(hashOf(k["key"].(string))) != nil {
		t.Fatal("snapshot keeps the deleted principal or its key")
	}
	wantErr(t, e.do("GET", path, nil), 404, "unknown_principal")
	wantErr(t, e.do("GET", path+"/keys", nil), 404, "unknown_principal")
	wantErr(t, e.do("GET", path+"/plugin-chain", nil), 404, "unknown_principal")
	wantErr(t, e.do("DELETE", path, nil), 404, "unknown_principal")
	if ex := e.do("GET", "/admin/v1/export", nil).json(t); len(ex["principals"].([]any)) != 0 {
		t.Fatalf("export after delete: %v", ex)
	}
	e.principal("p") // the name is free again
}

// P-PR-7, P-API-2: concurrent PATCHes of a principal with one If-Match.
func TestPrincipalConcurrentPatch(t *testing.T) {
	t.Parallel()
	e := setup(t)
	path := "/admin/v1/principals/" + e.principal("p")["id"].(string)
	const n = 6
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := send(t, e.srv.URL, "PATCH", path, map[string]any{"allowed_models": []string{fmt.Sprintf("m%d", i)}}, "If-Match", `"1"`)
			var b struct{ Error struct{ Code string } }
			json.Unmarshal(r.body, &b)
			mu.Lock()
			codes[strings.TrimSpace(fmt.Sprint(r.status, " ", b.Error.Code))]++
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	if codes["200"] != 1 || codes["409 stale_revision"] != n-1 {
		t.Fatalf("outcomes %v", codes)
	}
}
