package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/plugins"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
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
	_, file, _, _ := runtime.Caller(0)
	out := filepath.Join(t.TempDir(), name+".wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./fixtures/plugins/"+name)
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..", "..")
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
