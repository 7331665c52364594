package proxy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

const simKey2 = "sk-sim-second-upstream"

// pluginWorld is one proxy in front of a sim with two API-key upstreams.
type pluginWorld struct {
	*world
	second string
}

// roomyCall is the plugin call limit of the specs whose plugins behave: the
// default 50 ms is the hostile spec's business, and a starved CI machine can
// pause a well-behaved call that long.
var roomyCall = []string{"--plugin-call-timeout", "2s"}

func newPluginWorld(proxyArgs ...string) *pluginWorld {
	w := &world{sim: h.StartSim(simKey, simKey2)}
	w.px = h.StartProxy(h.ProxyOptions{Args: proxyArgs})
	w.admin = w.px.Admin()
	w.upstream = w.admin.CreateUpstream("first", w.sim.URL, simKey)
	second := w.admin.CreateStandbyUpstream("second", w.sim.URL, simKey2)
	w.principal = w.admin.CreatePrincipal("app", "claude-*")
	w.keyID, w.key = w.admin.IssueKey(w.principal)
	return &pluginWorld{world: w, second: second}
}

func upload(a *h.Admin, name string) map[string]any {
	wasm, err := os.ReadFile(h.Bin("plugins/" + name + ".wasm"))
	Expect(err).NotTo(HaveOccurred())
	st, _, b := a.Do("POST", "/admin/v1/plugins/wasm?name="+name+"&version=1", string(wasm), "Content-Type", "application/wasm")
	Expect(st).To(Equal(201), string(b))
	var m map[string]any
	Expect(jsonUnmarshal(b, &m)).To(Succeed())
	return m
}

// servedBy is the upstream key the sim saw on the last request with marker.
func (w *pluginWorld) servedBy(marker string) string {
	seen := w.sim.MessagesWith(marker)
	if len(seen) == 0 {
		return ""
	}
	return seen[len(seen)-1].Header.Get("X-Api-Key")
}

func ask(w *pluginWorld, model, marker string) (int, []byte) {
	st, _, b := h.Messages(w.px.ProxyURL, fmt.Sprintf(`{"model":%q,"max_tokens":8,"messages":[{"role":"user","content":%q}]}`, model, marker), "x-api-key", w.key)
	return st, b
}

var _ = Describe("WASM plugins", func() {
	It("routes by an uploaded router plugin and rebinds on every chain change", Label("P-REG-6", "P-REG-1", "P-CHAIN-1", "P-RUNTIME-5"), func() {
		w := newPluginWorld(roomyCall...)
		// Built-in routing: the first upstream.
		st, b := ask(w, "claude-haiku-4-5", "before plugin")
		Expect(st).To(Equal(200), string(b))
		Expect(w.servedBy("before plugin")).To(Equal(simKey))

		reg := upload(w.admin, "modelrouter")
		Expect(reg["slots"]).To(ConsistOf("router"))
		Expect(reg["digest"]).To(HavePrefix("sha256:"))
		entry := w.admin.JSON("POST", "/admin/v1/principals/"+w.principal+"/plugin-chain", map[string]any{
			"slot": "router", "wasm_registry_id": reg["id"], "config": map[string]any{"routes": map[string]any{"claude-haiku": []string{w.second}}}}, 201)
		Expect(w.admin.JSON("GET", "/admin/v1/plugins/registry/"+reg["id"].(string), nil, 200)["refcount"]).To(BeEquivalentTo(1))
		// The very next request goes through the plugin.
		st, b = ask(w, "claude-haiku-4-5", "haiku via plugin")
		Expect(st).To(Equal(200), string(b))
		Expect(w.servedBy("haiku via plugin")).To(Equal(simKey2))
		st, _ = ask(w, "claude-sonnet-4-5", "sonnet via plugin")
		Expect(st).To(Equal(200))
		Expect(w.servedBy("sonnet via plugin")).To(Equal(simKey), "no route: the candidates pass unchanged")

		// A config change takes effect through the snapshot swap.
		w.admin.JSON("PUT", "/admin/v1/plugin-chain-entries/"+entry["id"].(string), map[string]any{
			"config": map[string]any{"routes": map[string]any{"claude-haiku": []string{w.second}}, "default": "refuse"}}, 200)
		st, b = ask(w, "claude-sonnet-4-5", "refused by plugin")
		Expect(st).To(Equal(403), string(b))
		Expect(h.AnthropicErrorType(b)).To(Equal("permission_error"))
		Expect(string(b)).To(ContainSubstring("no route for model claude-sonnet-4-5"))
		Expect(w.servedBy("refused by plugin")).To(BeEmpty())

		// Cascade delete through the API: the chain is back to the built-in.
		refs := w.admin.JSON("GET", "/admin/v1/plugins/registry/"+reg["id"].(string)+"/references", nil, 200)
		w.admin.JSON("DELETE", "/admin/v1/plugins/registry/"+reg["id"].(string)+"?cascade=references", nil, 200,
			"If-Match", `"1"`, "X-Reference-Fingerprint", refs["reference_fingerprint"].(string))
		st, _ = ask(w, "claude-sonnet-4-5", "after cascade")
		Expect(st).To(Equal(200))
		Expect(w.servedBy("after cascade")).To(Equal(simKey))
	})

	// The pin router written in WebAssembly text imports nothing, so the
	// proxy runs it metered (no termination checks, no goroutine per call).
	It("routes by a router plugin without a guest runtime, as by the Go one", Label("P-REG-6"), func() {
		w := newPluginWorld(roomyCall...)
		reg := upload(w.admin, "pinrouterwat")
		Expect(reg["slots"]).To(ConsistOf("router"))
		entry := w.admin.JSON("POST", "/admin/v1/principals/"+w.principal+"/plugin-chain", map[string]any{
			"slot": "router", "wasm_registry_id": reg["id"], "config": map[string]any{"upstream_id": w.second, "fallback": true}}, 201)
		for i := range 3 { // the instance is reused from the second request on
			marker := fmt.Sprintf("pinned %d", i)
			st, b := ask(w, "claude-haiku-4-5", marker)
			Expect(st).To(Equal(200), string(b))
			Expect(w.servedBy(marker)).To(Equal(simKey2))
		}
		// Pinned to an unknown upstream: the candidates pass unchanged.
		w.admin.JSON("PUT", "/admin/v1/plugin-chain-entries/"+entry["id"].(string), map[string]any{
			"config": map[string]any{"upstream_id": "up_unknown"}}, 200)
		st, b := ask(w, "claude-haiku-4-5", "unknown pin")
		Expect(st).To(Equal(200), string(b))
		Expect(w.servedBy("unknown pin")).To(Equal(simKey))
		// ("ok" of the router slot sorts before the warm-up slot's.)
		Expect(w.px.Admin().Metric("svc_plugin_calls_total", "outcome", "ok")).To(BeEquivalentTo(4))
	})

	It("contains hostile plugins: the request fails closed, the process and other principals keep working", Label("P-REG-6"), func() {
		w := newPluginWorld()
		reg := upload(w.admin, "hostile")
		other := w.admin.CreatePrincipal("other", "claude-*")
		_, otherKey := w.admin.IssueKey(other)
		entry := w.admin.JSON("POST", "/admin/v1/principals/"+w.principal+"/plugin-chain", map[string]any{
			"slot": "router", "wasm_registry_id": reg["id"], "config": map[string]any{"mode": "trap"}}, 201)
		rev := entry["revision"]
		for _, mode := range []string{"trap", "loop", "alloc", "garbage", "stranger"} {
			r := w.admin.JSON("PUT", "/admin/v1/plugin-chain-entries/"+entry["id"].(string), map[string]any{"config": map[string]any{"mode": mode}}, 200,
				"If-Match", fmt.Sprintf(`"%v"`, rev))
			rev = r["revision"]
			start := time.Now()
			st, b := ask(w, "claude-sonnet-4-5", "hostile "+mode)
			Expect(st).To(Equal(503), mode+": "+string(b))
			Expect(h.AnthropicErrorType(b)).To(Equal("api_error"))
			Expect(string(b)).To(ContainSubstring("routing failed"))
			Expect(time.Since(start)).To(BeNumerically("<", 5*time.Second), mode)
			Expect(w.servedBy("hostile " + mode)).To(BeEmpty())
			st, _, _ = h.Messages(w.px.ProxyURL, body, "x-api-key", otherKey)
			Expect(st).To(Equal(200), "another principal after "+mode)
		}
		Expect(w.px.Exited()).To(BeFalse())
		Expect(w.px.Admin().Metric("svc_plugin_calls_total", "outcome", "garbage")).To(BeNumerically(">=", 2))
		// A well-behaved mode routes again with the same module.
		w.admin.JSON("PUT", "/admin/v1/plugin-chain-entries/"+entry["id"].(string), map[string]any{"config": map[string]any{"mode": "fine"}}, 200)
		st, b := ask(w, "claude-sonnet-4-5", "fine again")
		Expect(st).To(Equal(200), string(b))
	})

	It("refuses modules that are not plugins", Label("P-REG-6"), func() {
		w := newPluginWorld()
		w.admin.ExpectError("POST", "/admin/v1/plugins/wasm?name=junk", "this is not wasm", 400, "invalid_plugin", "Content-Type", "application/wasm")
		wasm, err := os.ReadFile(h.Bin("proxy"))
		Expect(err).NotTo(HaveOccurred())
		w.admin.ExpectError("POST", "/admin/v1/plugins/wasm?name=elf", string(wasm[:4096]), 400, "invalid_plugin", "Content-Type", "application/wasm")
		Expect(w.admin.JSON("GET", "/admin/v1/plugins/registry", nil, 200)["entries"]).To(BeEmpty())
	})

	It("shapes an upstream's warm-up request with its dialect plugin", func() {
		ow := newOAuthWorld(nil, roomyCall...)
		reg := upload(ow.admin, "dialect")
		Expect(reg["slots"]).To(ConsistOf("warmup_dialect"))
		_, hd, _ := ow.admin.Do("GET", "/admin/v1/upstreams/"+ow.upstream, nil)
		ow.admin.JSON("PATCH", "/admin/v1/upstreams/"+ow.upstream, map[string]any{"warmup_dialect_plugin": reg["id"]}, 200, "If-Match", hd.Get("ETag"))
		ow.admin.ConnectOAuth(ow.upstream, "acct-dialect")
		Eventually(ow.warmups, 20*time.Second, 200*time.Millisecond).Should(HaveLen(1))
		wu := ow.warmups()[0]
		Expect(wu.Body).To(ContainSubstring(`"model":"claude-3-5-haiku-latest"`))
		Expect(wu.Header.Get("X-Warmup-Dialect")).To(Equal("sample"))
		Expect(wu.Header.Get("Authorization")).To(HavePrefix("Bearer "))
	})
})

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
