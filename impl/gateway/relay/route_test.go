package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/plugins"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/wat"
	"github.com/tetratelabs/wazero"
)

// wasmCache compiles a module once for every runtime of the package's
// tests: compiling a Go module is slow, under the race detector very.
var wasmCache = wazero.NewCompilationCache()

// sample builds a sample plugin of fixtures/plugins once per test binary.
var sample = struct {
	sync.Mutex
	wasm map[string][]byte
}{wasm: map[string][]byte{}}

func samplePlugin(t testing.TB, name string) []byte {
	t.Helper()
	sample.Lock()
	defer sample.Unlock()
	if w := sample.wasm[name]; w != nil {
		return w
	}
	out := filepath.Join(t.TempDir(), name+".wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./fixtures/plugins/"+name)
	cmd.Dir = filepath.Join("..", "..", "..") // the repository, from go test's working directory
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, b)
	}
	w, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	sample.wasm[name] = w
	return w
}

// pluginChain puts the chain entries after the built-in one of pr_a and
// returns the snapshot and a runtime with the modules compiled.
func pluginChain(t *testing.T, cfg *store.Config, entries ...store.ChainEntry) (*snapshot.Snapshot, *plugins.Runtime) {
	t.Helper()
	rt, err := plugins.New(context.Background(), plugins.Options{CallTimeout: 5 * time.Second, CompilationCache: wasmCache})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	d, _, err := rt.Compile(context.Background(), samplePlugin(t, "modelrouter"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Plugins = append(cfg.Plugins, store.RegistryEntry{ID: "wasm_modelrouter", Name: "modelrouter", Digest: d, Slots: []string{"router"}})
	cfg.Chains = append(cfg.Chains, entries...)
	return snapshot.Build(cfg, plainOpener{}, time.Now()), rt
}

func wasmEntry(id, plugin, config string, pos int64) store.ChainEntry {
	reg := "wasm_" + plugin
	return store.ChainEntry{ID: id, PrincipalID: "pr_a", Slot: "router", WasmRegistryID: &reg, Config: []byte(config), Position: pos, Enabled: true}
}

// A dynamic chain is a pipeline: the built-in orders the usable upstreams,
// each plugin narrows or reorders what it was given; the request goes to
// the first upstream left, and the binding is made once per snapshot.
func TestRoutePipelineWithPlugins(t *testing.T) {
	var sn seen
	srv := upstreamServer(t, &sn, nil)
	cfg := fixtureConfig(apiKeyUpstream("up_1", srv.URL+"/one", "sk-1"), apiKeyUpstream("up_2", srv.URL+"/two", "sk-2"),
		apiKeyUpstream("up_3", srv.URL+"/three", "sk-3"))
	snap, rt := pluginChain(t, cfg,
		wasmEntry("ce_order", "modelrouter", `{"routes":{"claude":["up_3","up_2"]}}`, 1),
		wasmEntry("ce_model", "modelrouter", `{"routes":{"claude-haiku":["up_2","up_1"]},"default":"refuse"}`, 2))
	h := New(Options{Source: fakeSource{snap}, Recorder: &memRecorder{}, Plugins: rt})
	p := snap.Principal("pr_a")
	req, _ := http.NewRequest("POST", "/v1/messages", nil)
	req.Header.Set("Anthropic-Version", "2023-06-01")

	ups, ref, err := h.route(req, snap, p, "claude-haiku-4-5", false)
	// The first plugin left up_3 and up_2; the second keeps up_2 (up_1 was
	// no longer offered).
	if err != nil || ref != nil || len(ups) != 1 || ups[0].ID != "up_2" {
		t.Fatalf("haiku: %v %+v %v", ups, ref, err)
	}
	b := p.Routers[1].Bound.Load()
	if b == nil {
		t.Fatal("the plugin binding was not kept for the snapshot")
	}
	_, ref, err = h.route(req, snap, p, "claude-opus-4", false)
	if err != nil || ref == nil || ref.Status != 403 {
		t.Fatalf("opus: %+v %v", ref, err)
	}
	if p.Routers[1].Bound.Load() != b {
		t.Fatal("a second request bound the plugin again")
	}

	// Through the handler: the request lands on up_2 (whose key the test
	// upstream refuses: the answer is passed back, not failed over).
	ts := httptest.NewServer(h)
	defer ts.Close()
	resp, body := post(t, ts.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-haiku-4-5","max_tokens":1,"messages":[]}`)
	if resp.StatusCode != 401 || len(sn.headers) != 1 || sn.headers[0].Get("X-Api-Key") != "sk-2" {
		t.Fatalf("%d %s, upstream saw %v", resp.StatusCode, body, sn.headers)
	}
	resp, body = post(t, ts.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-opus-4","max_tokens":1,"messages":[]}`)
	wantAnthropicError(t, resp, body, 403, "permission_error")
}

// A plugin that fails fails the request closed (503), naming the plugin.
func TestRouteFailingPluginFailsClosed(t *testing.T) {
	cfg := fixtureConfig(apiKeyUpstream("up_1", "http://upstream.invalid", "sk-1"))
	snap, rt := pluginChain(t, cfg, wasmEntry("ce_bad", "modelrouter", `{"routes":"not an object"}`, 1))
	ts := httptest.NewServer(New(Options{Source: fakeSource{snap}, Recorder: &memRecorder{}, Plugins: rt}))
	defer ts.Close()
	resp, body := post(t, ts.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-haiku-4-5","max_tokens":1,"messages":[]}`)
	wantAnthropicError(t, resp, body, 503, "api_error")
	if want := "routing failed: plugin modelrouter: "; !strings.Contains(body, want) {
		t.Fatalf("body %s lacks %q", body, want)
	}
	// Without a plugin runtime the chain cannot run either.
	ts2 := httptest.NewServer(New(Options{Source: fakeSource{snap}, Recorder: &memRecorder{}}))
	defer ts2.Close()
	ts = ts2
	resp, body = post(t, ts.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-haiku-4-5","max_tokens":1,"messages":[]}`)
	wantAnthropicError(t, resp, body, 503, "api_error")
}

// The chain's leading built-in (precomputed with the snapshot) decides
// what the first plugin is offered; a built-in after a plugin runs on
// that plugin's choice, and the plugin after it is offered what is left.
func TestRouteLeadAndTrailingBuiltins(t *testing.T) {
	cfg := fixtureConfig(apiKeyUpstream("up_1", "http://one.invalid", "sk-1"), apiKeyUpstream("up_2", "http://two.invalid", "sk-2"),
		apiKeyUpstream("up_3", "http://three.invalid", "sk-3"))
	cfg.Chains[0].Config = []byte(`{"upstream_ids":["up_1","up_3"]}`)
	builtin := store.BuiltinSubscriptionPreference
	snap, rt := pluginChain(t, cfg,
		wasmEntry("ce_order", "modelrouter", `{"routes":{"claude":["up_3","up_2","up_1"]}}`, 1),
		store.ChainEntry{ID: "ce_pin", PrincipalID: "pr_a", Slot: "router", Builtin: &builtin, Config: []byte(`{"upstream_id":"up_1"}`), Position: 2, Enabled: true},
		wasmEntry("ce_pass", "modelrouter", `{}`, 3))
	h := New(Options{Source: fakeSource{snap}, Recorder: &memRecorder{}, Plugins: rt})
	p := snap.Principal("pr_a")
	if p.Lead == nil || p.Lead.Next != 1 || len(p.Lead.Candidates) != 2 {
		t.Fatalf("lead %+v", p.Lead)
	}
	req, _ := http.NewRequest("POST", "/v1/messages", nil)
	for _, c := range []struct{ model, want string }{
		// ce_order reorders the lead to up_3, up_1 (up_2 was not offered);
		// ce_pin keeps up_1; ce_pass passes it on.
		{"claude-haiku-4-5", "up_1"},
		{"other", "up_1"},
	} {
		ups, ref, err := h.route(req, snap, p, c.model, false)
		if err != nil || ref != nil || len(ups) != 1 || ups[0].ID != c.want {
			t.Fatalf("%s: %v %+v %v", c.model, ups, ref, err)
		}
	}
	// Without the trailing built-in, the first plugin's order stands.
	cfg.Chains = cfg.Chains[:2]
	snap = snapshot.Build(cfg, plainOpener{}, time.Now())
	ups, _, err := h.route(req, snap, snap.Principal("pr_a"), "claude-haiku-4-5", false)
	if err != nil || len(ups) != 2 || ups[0].ID != "up_3" || ups[1].ID != "up_1" {
		t.Fatalf("%v %v", ups, err)
	}
}

// A one-plugin chain's request allocates nothing to route when the plugin
// (metered WebAssembly text) chooses one upstream: the lead and its
// indexes come with the snapshot, the choice is a window of Usable.
func TestRouteOnePluginAllocatesNothing(t *testing.T) {
	rt, err := plugins.New(context.Background(), plugins.Options{CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	wasm, err := wat.File(filepath.Join("..", "..", "..", "fixtures", "plugins", "pinrouterwat", "pinrouterwat.wat"))
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := rt.Compile(context.Background(), wasm)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fixtureConfig(apiKeyUpstream("up_1", "http://one.invalid", "sk-1"), apiKeyUpstream("up_2", "http://two.invalid", "sk-2"),
		apiKeyUpstream("up_3", "http://three.invalid", "sk-3"))
	cfg.Plugins = []store.RegistryEntry{{ID: "wasm_pinrouterwat", Name: "pin", Digest: d, Slots: []string{"router"}}}
	cfg.Chains = append(cfg.Chains, wasmEntry("ce_pin", "pinrouterwat", `{"upstream_id":"up_2"}`, 1))
	snap := snapshot.Build(cfg, plainOpener{}, time.Now())
	h := New(Options{Source: fakeSource{snap}, Recorder: &memRecorder{}, Plugins: rt})
	p := snap.Principal("pr_a")
	req, _ := http.NewRequest("POST", "/v1/messages", nil)
	var ups []*snapshot.Upstream
	allocs := testing.AllocsPerRun(100, func() {
		if ups, _, err = h.route(req, snap, p, "claude-haiku-4-5", false); err != nil {
			t.Fatal(err)
		}
	})
	if len(ups) != 1 || ups[0].ID != "up_2" || cap(ups) != 1 {
		t.Fatalf("routed to %v (cap %d)", ups, cap(ups))
	}
	if allocs != 0 {
		t.Fatalf("%v allocations a request", allocs)
	}
}
