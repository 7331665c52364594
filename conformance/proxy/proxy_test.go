package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
	"github.com/pillarhq/pillar/conformance/harness/mains"
)

// The proxy suite stops and restarts the proxy only gracefully, so it may
// run in-process (-runner=inprocess; CONTRIBUTING.md, "Runners").
var _ = h.AllowInProcess(mains.Table)

func TestProxy(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Proxy conformance")
}

const simKey = "sk-sim-upstream-secret"

const body = `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hello proxy world"}]}`
const streamBody = `{"model":"claude-sonnet-4-5","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hello proxy world"}]}`

// world is one proxy in front of one sim with an upstream, a principal and a key.
type world struct {
	sim       *h.Sim
	px        *h.Proxy
	admin     *h.Admin
	upstream  string
	principal string
	keyID     string
	key       string
}

func newWorld(models ...string) *world {
	if models == nil {
		models = []string{"claude-*"}
	}
	w := &world{sim: h.StartSim(simKey)}
	w.px = h.StartProxy(h.ProxyOptions{})
	w.admin = w.px.Admin()
	w.upstream = w.admin.CreateUpstream("sim", w.sim.URL, simKey)
	w.principal = w.admin.CreatePrincipal("app", models...)
	w.keyID, w.key = w.admin.IssueKey(w.principal)
	return w
}

// providerCalls is what the simulator received, less the metadata_refresh
// job's model listing: the scheduler runs the current tick of every
// periodic job when a replica starts, so that listing can reach the
// provider at any moment after the upstream is created.
func (w *world) providerCalls() []h.Recorded {
	var out []h.Recorded
	for _, r := range w.sim.Requests() {
		if r.Path == "/v1/models" && r.RawQuery == "limit=1000" {
			continue
		}
		out = append(out, r)
	}
	return out
}

var _ = Describe("Listeners", Label("P-LISTEN-1", "P-LISTEN-2", "P-VER-1"), func() {
	It("serves the proxy and the admin API on separate listeners", func() {
		w := newWorld()
		st, _, b := h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).To(Equal(200), string(b))
		// Admin paths do not exist on the proxy listener, and vice versa.
		req, _ := http.NewRequest("GET", w.px.ProxyURL+"/admin/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+w.px.Token)
		res, err := http.DefaultClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		res.Body.Close()
		Expect(res.StatusCode).To(Equal(404))
		st, _, _ = h.Messages(w.px.AdminURL, body, "x-api-key", w.key, "Authorization", "Bearer "+w.px.Token)
		Expect(st).To(Equal(404))
	})

	It("requires the admin token on every admin route", Label("P-API-1"), func() {
		w := newWorld()
		anon := &h.Admin{Base: w.px.AdminURL}
		wrong := &h.Admin{Base: w.px.AdminURL, Token: "nope"}
		for _, p := range []string{"/admin/v1/upstreams", "/admin/v1/principals", "/admin/v1/status", "/admin/v1/export", "/admin/v1/openapi.json", "/metrics"} {
			anon.ExpectError("GET", p, nil, 401, "unauthorized")
			wrong.ExpectError("GET", p, nil, 401, "unauthorized")
		}
		// The proxy key is not an admin credential either.
		(&h.Admin{Base: w.px.AdminURL, Token: w.key}).ExpectError("GET", "/admin/v1/upstreams", nil, 401, "unauthorized")
	})
})

var _ = Describe("Proxy path", func() {
	It("relays a request with the upstream's credential, passing Anthropic headers and the query", Label("P-UP-2"), func() {
		w := newWorld()
		for _, auth := range [][]string{{"x-api-key", w.key}, {"Authorization", "Bearer " + w.key}} {
			hdr := append(auth, "anthropic-beta", "prompt-caching-2024-07-31")
			req, _ := http.NewRequest("POST", w.px.ProxyURL+"/v1/messages?beta=true", strings.NewReader(body))
			req.Header.Set("content-type", "application/json")
			req.Header.Set("anthropic-version", "2023-06-01")
			for i := 0; i < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			res, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			var msg struct {
				Type    string
				Content []struct{ Text string }
				Usage   struct {
					InputTokens int `json:"input_tokens"`
				}
			}
			Expect(json.NewDecoder(res.Body).Decode(&msg)).To(Succeed())
			res.Body.Close()
			Expect(res.StatusCode).To(Equal(200))
			Expect(msg.Type).To(Equal("message"))
			Expect(msg.Content[0].Text).To(Equal("hello proxy world"))
			Expect(msg.Usage.InputTokens).To(Equal(3))
		}
		recs := w.providerCalls() // the metadata refresh may list models meanwhile
		Expect(recs).To(HaveLen(2))
		for _, r := range recs {
			Expect(r.Header.Get("X-Api-Key")).To(Equal(simKey))
			Expect(r.Header.Get("Authorization")).To(BeEmpty())
			Expect(r.Header.Get("Anthropic-Version")).To(Equal("2023-06-01"))
			Expect(r.Header.Get("Anthropic-Beta")).To(Equal("prompt-caching-2024-07-31"))
			Expect(r.RawQuery).To(Equal("beta=true"))
			Expect(r.Body).To(Equal(body))
			for _, vs := range r.Header {
				for _, v := range vs {
					Expect(v).NotTo(ContainSubstring(w.key), "the client's key reached the provider")
				}
			}
		}
	})

	It("streams server-sent events through", func() {
		w := newWorld()
		st, hdr, b := h.Messages(w.px.ProxyURL, streamBody, "x-api-key", w.key)
		Expect(st).To(Equal(200))
		Expect(hdr.Get("Content-Type")).To(Equal("text/event-stream"))
		var events []string
		for _, line := range strings.Split(string(b), "\n") {
			if ev, ok := strings.CutPrefix(line, "event: "); ok {
				events = append(events, ev)
			}
		}
		Expect(events).To(HaveExactElements("message_start", "content_block_start", "ping", "content_block_delta",
			"content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"))
	})

	It("counts tokens through the proxy", func() {
		w := newWorld()
		req, _ := http.NewRequest("POST", w.px.ProxyURL+"/v1/messages/count_tokens", strings.NewReader(`{"model":"claude-x","messages":[{"role":"user","content":"a b c d"}]}`))
		req.Header.Set("x-api-key", w.key)
		req.Header.Set("anthropic-version", "2023-06-01")
		res, err := http.DefaultClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		defer res.Body.Close()
		var out struct {
			InputTokens int `json:"input_tokens"`
		}
		Expect(json.NewDecoder(res.Body).Decode(&out)).To(Succeed())
		Expect(out.InputTokens).To(Equal(4))
	})

	It("refuses bad requests in Anthropic's error shape without reaching the provider", func() {
		w := newWorld()
		cases := []struct {
			body   string
			hdr    []string
			status int
			typ    string
		}{
			{body, nil, 401, "authentication_error"},
			{body, []string{"x-api-key", "sk-px-unknown"}, 401, "authentication_error"},
			{`{"model":"gpt-4o","max_tokens":5,"messages":[]}`, []string{"x-api-key", w.key}, 403, "permission_error"},
			{`{not json`, []string{"x-api-key", w.key}, 400, "invalid_request_error"},
			{`{"max_tokens":5,"messages":[]}`, []string{"x-api-key", w.key}, 400, "invalid_request_error"},
		}
		for _, c := range cases {
			st, _, b := h.Messages(w.px.ProxyURL, c.body, c.hdr...)
			Expect(st).To(Equal(c.status), string(b))
			Expect(h.AnthropicErrorType(b)).To(Equal(c.typ))
		}
		req, _ := http.NewRequest("POST", w.px.ProxyURL+"/v1/complete", strings.NewReader(body))
		req.Header.Set("x-api-key", w.key)
		res, err := http.DefaultClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		res.Body.Close()
		Expect(res.StatusCode).To(Equal(404))
		Expect(w.providerCalls()).To(BeEmpty())
	})

	It("answers 503 when no upstream can serve and 502 when the upstream is unreachable", func() {
		w := newWorld()
		w.admin.JSON("POST", "/admin/v1/upstreams/"+w.upstream+"/disable", nil, 200)
		st, _, b := h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).To(Equal(503))
		Expect(h.AnthropicErrorType(b)).To(Equal("api_error"))
		w.admin.JSON("POST", "/admin/v1/upstreams/"+w.upstream+"/enable", nil, 200)
		w.sim.Stop()
		st, _, b = h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).To(Equal(502))
		Expect(h.AnthropicErrorType(b)).To(Equal("api_error"))
	})

	It("falls over to the next upstream when the first is rate limited", func() {
		w := newWorld()
		second := h.StartSim(simKey)
		w.admin.CreateStandbyUpstream("second", second.URL, simKey)
		w.sim.Fault(map[string]any{"path": "/v1/messages", "status": 429})
		st, _, b := h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).To(Equal(200), string(b))
		// Messages only: the metadata job, which runs at start-up, may list
		// a new upstream's models meanwhile.
		Expect(w.sim.MessagesWith()).To(HaveLen(1))
		Expect(second.MessagesWith()).To(HaveLen(1))
	})
})

var _ = Describe("Runtime configuration", Label("P-RUNTIME-1", "P-RUNTIME-2"), func() {
	It("enforces every admin change on the very next request, without a restart", func() {
		w := newWorld()
		ok := func() int { st, _, _ := h.Messages(w.px.ProxyURL, body, "x-api-key", w.key); return st }
		Expect(ok()).To(Equal(200))

		w.admin.JSON("POST", "/admin/v1/principals/"+w.principal+"/disable", nil, 200)
		st, _, b := h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).To(Equal(403))
		Expect(h.AnthropicErrorType(b)).To(Equal("permission_error"))
		w.admin.JSON("POST", "/admin/v1/principals/"+w.principal+"/enable", nil, 200)
		Expect(ok()).To(Equal(200))

		w.admin.JSON("PUT", "/admin/v1/principals/"+w.principal+"/allowed_models", map[string]any{"allowed_models": []string{"claude-haiku-*"}}, 200)
		Expect(ok()).To(Equal(403))
		w.admin.JSON("PUT", "/admin/v1/principals/"+w.principal+"/allowed_models", map[string]any{"allowed_models": []string{"*"}}, 200)
		Expect(ok()).To(Equal(200))

		w.admin.JSON("DELETE", "/admin/v1/principals/"+w.principal+"/keys/"+w.keyID, nil, 200)
		Expect(ok()).To(Equal(401))
		Expect(w.px.Exited()).To(BeFalse())
	})

	It("keeps configuration and keys across a restart", func() {
		w := newWorld()
		w.px.Restart()
		st, _, b := h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).To(Equal(200), string(b))
		ups := w.admin.JSON("GET", "/admin/v1/upstreams/"+w.upstream, nil, 200)
		Expect(ups["name"]).To(Equal("sim"))
		Expect(ups["credential_mode"]).To(Equal("api_key"))
	})
})

var _ = Describe("Keys", func() {
	It("returns the plaintext once and never again", Label("P-KEY-1"), func() {
		w := newWorld()
		st, _, list := w.admin.Do("GET", "/admin/v1/principals/"+w.principal+"/keys", nil)
		Expect(st).To(Equal(200))
		Expect(string(list)).NotTo(ContainSubstring(w.key))
		Expect(string(list)).To(ContainSubstring(w.key[:12]))
		_, _, export := w.admin.Do("GET", "/admin/v1/export", nil)
		Expect(string(export)).NotTo(ContainSubstring(w.key))
		Expect(string(export)).NotTo(ContainSubstring(simKey))
	})

	It("rotates a key the way the seed describes, without the server touching the key file", Label("P-KEY-2", "P-KEYFILE-1"), func() {
		w := newWorld()
		keyFile := filepath.Join(GinkgoT().TempDir(), "proxy.key")
		writeKey := func(k string) {
			tmp := keyFile + ".tmp"
			Expect(os.WriteFile(tmp, []byte(k+"\n"), 0o600)).To(Succeed())
			Expect(os.Rename(tmp, keyFile)).To(Succeed())
		}
		writeKey(w.key)
		// 1. issue a replacement; 2. update the key file atomically, 0600.
		newID, newKey := w.admin.IssueKey(w.principal)
		writeKey(newKey)
		info, err := os.Stat(keyFile)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)))
		before := info.ModTime()
		// 3. verify the proxy path with the key read back from the file.
		data, _ := os.ReadFile(keyFile)
		st, _, _ := h.Messages(w.px.ProxyURL, body, "x-api-key", strings.TrimSpace(string(data)))
		Expect(st).To(Equal(200))
		// 4. revoke the old key.
		w.admin.JSON("DELETE", "/admin/v1/principals/"+w.principal+"/keys/"+w.keyID, nil, 200)
		st, _, _ = h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).To(Equal(401))
		st, _, _ = h.Messages(w.px.ProxyURL, body, "x-api-key", newKey)
		Expect(st).To(Equal(200))
		Expect(newID).NotTo(Equal(w.keyID))
		// The server never rewrote the operator's file, across a restart too.
		w.px.Restart()
		after, _ := os.Stat(keyFile)
		Expect(after.ModTime()).To(Equal(before))
		data2, _ := os.ReadFile(keyFile)
		Expect(data2).To(Equal(data))
	})
})

var _ = Describe("Admin API over the wire", func() {
	It("carries revisions in ETag and refuses stale If-Match", Label("P-UP-8", "P-UP-9", "P-API-2", "P-WARM-R2"), func() {
		w := newWorld()
		p := "/admin/v1/upstreams/" + w.upstream
		st, hdr, _ := w.admin.Do("HEAD", p, nil)
		Expect(st).To(Equal(200))
		Expect(hdr.Get("ETag")).To(Equal(`"1"`))
		w.admin.ExpectError("PATCH", p, map[string]any{"warmup_enabled": false}, 428, "precondition_required")
		w.admin.ExpectError("PATCH", p, map[string]any{"warmup_enabled": true}, 400, "warmup_requires_oauth_credentials", "If-Match", `"1"`)
		w.admin.JSON("PATCH", p, map[string]any{"enabled": true}, 200, "If-Match", hdr.Get("ETag"))
		w.admin.ExpectError("PATCH", p, map[string]any{"enabled": false}, 409, "stale_revision", "If-Match", hdr.Get("ETag"))
		w.admin.ExpectError("DELETE", p, nil, 409, "stale_revision", "If-Match", `"1"`)
		w.admin.ExpectError("GET", "/admin/v1/upstreams/up_missing", nil, 404, "upstream_not_found")
		w.admin.ExpectError("GET", "/admin/v1/principals/pr_missing", nil, 404, "unknown_principal")
	})

	It("validates creates with the seed's error codes", Label("P-UP-3", "P-UP-12", "P-PR-3", "P-PR-7"), func() {
		w := newWorld()
		w.admin.ExpectError("POST", "/admin/v1/upstreams", map[string]any{"name": "sim", "kind": "vendor_api_key", "base_url": w.sim.URL, "api_key_value": "x"}, 409, "conflict")
		w.admin.ExpectError("POST", "/admin/v1/upstreams", map[string]any{"name": "b", "kind": "vendor_api_key", "base_url": w.sim.URL, "api_key_value": "x", "api_key_env": "HOME"}, 400, "conflicting_api_key")
		w.admin.ExpectError("POST", "/admin/v1/upstreams", map[string]any{"name": "c", "kind": "vendor_api_key", "base_url": "not a url", "api_key_value": "x"}, 400, "invalid_location")
		w.admin.ExpectError("POST", "/admin/v1/principals", map[string]any{"name": "app", "kind": "machine"}, 409, "conflict")
		w.admin.ExpectError("POST", "/admin/v1/principals", map[string]any{"name": "j", "kind": "machine",
			"cache_keepalive": map[string]any{"enabled": true, "classifier": map[string]any{"llm_judge": map[string]any{}}}}, 400, "unsupported_cache_keepalive_llm_judge")
		chain := w.admin.JSON("GET", "/admin/v1/principals/"+w.principal+"/plugin-chain", nil, 200)
		first := chain["entries"].([]any)[0].(map[string]any)
		Expect(first["builtin"]).To(Equal("subscription_preference"))
		Expect(first["position"]).To(BeEquivalentTo(0))
	})

	It("reads api_key_env from the server's environment", Label("P-UP-2"), func() {
		sim := h.StartSim(simKey)
		px := h.StartProxy(h.ProxyOptions{Env: map[string]string{"PROXY_UPSTREAM_KEY_SIM": simKey}})
		a := px.Admin()
		a.JSON("POST", "/admin/v1/upstreams", map[string]any{"name": "env", "kind": "vendor_api_key", "base_url": sim.URL, "api_key_env": "PROXY_UPSTREAM_KEY_SIM"}, 201)
		pr := a.CreatePrincipal("p", "*")
		_, key := a.IssueKey(pr)
		st, _, b := h.Messages(px.ProxyURL, body, "x-api-key", key)
		Expect(st).To(Equal(200), string(b))
		Expect(sim.Requests()[0].Header.Get("X-Api-Key")).To(Equal(simKey))
		_, _, export := a.Do("GET", "/admin/v1/export", nil)
		Expect(string(export)).NotTo(ContainSubstring("PROXY_UPSTREAM_KEY_SIM"))
		Expect(string(export)).NotTo(ContainSubstring(simKey))
	})
})

var _ = Describe("Limit resets", Label("P-UP-10"), func() {
	It("returns the stored observation without contacting the provider", func() {
		w := newWorld()
		m := w.admin.JSON("GET", "/admin/v1/upstreams/"+w.upstream+"/limit-resets", nil, 200)
		Expect(m["upstream_id"]).To(Equal(w.upstream))
		Expect(m).To(HaveKeyWithValue("observed", BeFalse()))
		Expect(m["coupon"]).To(HaveKeyWithValue("available", BeFalse()))
		Expect(w.providerCalls()).To(BeEmpty())
		w.admin.ExpectError("GET", "/admin/v1/upstreams/up_missing/limit-resets", nil, 404, "upstream_not_found")
	})
})

var _ = Describe("Official Anthropic SDK", func() {
	It("works unchanged against the proxy, streaming and not", func() {
		w := newWorld()
		c := anthropic.NewClient(option.WithBaseURL(w.px.ProxyURL), option.WithAPIKey(w.key), option.WithMaxRetries(0))
		params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 2,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("one two three"))}}
		msg, err := c.Messages.New(context.Background(), params)
		Expect(err).NotTo(HaveOccurred())
		Expect(msg.Content[0].Text).To(Equal("one two"))
		Expect(string(msg.StopReason)).To(Equal("max_tokens"))

		stream := c.Messages.NewStreaming(context.Background(), params)
		var acc anthropic.Message
		for stream.Next() {
			Expect(acc.Accumulate(stream.Current())).To(Succeed())
		}
		Expect(stream.Err()).NotTo(HaveOccurred())
		Expect(acc.Content[0].Text).To(Equal("one two"))
		Expect(acc.Usage.OutputTokens).To(BeEquivalentTo(2))

		bad := anthropic.NewClient(option.WithBaseURL(w.px.ProxyURL), option.WithAPIKey("sk-px-wrong"), option.WithMaxRetries(0))
		_, err = bad.Messages.New(context.Background(), params)
		var apiErr *anthropic.Error
		Expect(errors.As(err, &apiErr)).To(BeTrue())
		Expect(apiErr.StatusCode).To(Equal(401))
	})
})

var _ = Describe("Models and health", func() {
	It("lists only the models the principal may use, through the official SDK", func() {
		w := newWorld("claude-haiku-*")
		c := anthropic.NewClient(option.WithBaseURL(w.px.ProxyURL), option.WithAPIKey(w.key), option.WithMaxRetries(0))
		page, err := c.Models.List(context.Background(), anthropic.ModelListParams{})
		Expect(err).NotTo(HaveOccurred())
		Expect(page.Data).To(HaveLen(1))
		Expect(page.Data[0].ID).To(Equal("claude-haiku-4-5"))
		_, err = c.Models.Get(context.Background(), "claude-opus-4-1", anthropic.ModelGetParams{})
		var apiErr *anthropic.Error
		Expect(errors.As(err, &apiErr)).To(BeTrue())
		Expect(apiErr.StatusCode).To(Equal(404))
		// The provider saw the upstream's key, never the principal's.
		for _, r := range w.sim.Requests() {
			Expect(r.Header.Get("X-Api-Key")).To(Equal(simKey))
		}
		res, err := http.Get(w.px.ProxyURL + "/healthz")
		Expect(err).NotTo(HaveOccurred())
		res.Body.Close()
		Expect(res.StatusCode).To(Equal(200))
	})
})

var _ = Describe("Usage", func() {
	It("records every proxied request with its token usage, streaming and not, and refusals of the principal once it is known and enabled", func() {
		w := newWorld()
		h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		h.Messages(w.px.ProxyURL, streamBody, "x-api-key", w.key)
		h.Messages(w.px.ProxyURL, `{"model":"gpt-4o","max_tokens":1,"messages":[]}`, "x-api-key", w.key)
		type event struct {
			PrincipalID  string `json:"principal_id"`
			KeyID        string `json:"key_id"`
			UpstreamID   string `json:"upstream_id"`
			Stream       bool
			Status       int
			InputTokens  int    `json:"input_tokens"`
			OutputTokens int    `json:"output_tokens"`
			Model        string `json:"model"`
			ErrorType    string `json:"error_type"`
		}
		var evs []event
		Eventually(func() int {
			_, _, b := w.admin.Do("GET", "/admin/v1/request-events?limit=10", nil)
			evs = nil
			json.Unmarshal(b, &evs)
			return len(evs)
		}, 10*time.Second, 50*time.Millisecond).Should(Equal(3))
		var ok []event
		for _, e := range evs {
			if e.Status == 403 {
				// The refused model: the principal's, no upstream reached.
				Expect(e.PrincipalID).To(Equal(w.principal))
				Expect(e.Model).To(Equal("gpt-4o"))
				Expect(e.ErrorType).To(Equal("permission_error"))
				Expect(e.UpstreamID).To(BeEmpty())
				continue
			}
			ok = append(ok, e)
		}
		Expect(ok).To(HaveLen(2))
		evs = ok
		for _, e := range evs {
			Expect(e.Status).To(Equal(200))
			Expect(e.PrincipalID).To(Equal(w.principal))
			Expect(e.KeyID).To(Equal(w.keyID))
			Expect(e.UpstreamID).To(Equal(w.upstream))
			Expect(e.InputTokens).To(Equal(3))
			Expect(e.OutputTokens).To(Equal(3))
		}
		Expect(evs[0].Stream).NotTo(Equal(evs[1].Stream))

		// Refused before the principal is known (no key, an unknown key)
		// or while it is disabled: counted in the metrics, no event. The
		// marker after them is recorded; events are written in order, so
		// once it is there the others would be too.
		st, _, b := h.Messages(w.px.ProxyURL, body)
		Expect(st).To(Equal(401), string(b))
		st, _, b = h.Messages(w.px.ProxyURL, body, "x-api-key", "sk-px-unknown")
		Expect(st).To(Equal(401), string(b))
		w.admin.JSON("POST", "/admin/v1/principals/"+w.principal+"/disable", nil, 200)
		st, _, b = h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).To(Equal(403), string(b))
		w.admin.JSON("POST", "/admin/v1/principals/"+w.principal+"/enable", nil, 200)
		st, _, b = h.Messages(w.px.ProxyURL, `{"max_tokens":1,"messages":[]}`, "x-api-key", w.key)
		Expect(st).To(Equal(400), string(b))
		Eventually(func() int {
			_, _, b := w.admin.Do("GET", "/admin/v1/request-events?limit=10", nil)
			evs = nil
			json.Unmarshal(b, &evs)
			return len(evs)
		}, 10*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 4))
		Expect(evs).To(HaveLen(4))
		statuses := []int{}
		for _, e := range evs {
			Expect(e.PrincipalID).To(Equal(w.principal))
			statuses = append(statuses, e.Status)
		}
		Expect(statuses).To(ConsistOf(200, 200, 403, 400))
	})
})

var _ = Describe("Secrets", func() {
	It("never writes a credential to the logs, even at debug level", func() {
		sim := h.StartSim(simKey)
		px := h.StartProxy(h.ProxyOptions{Args: []string{"--log-level", "debug"}, Env: map[string]string{"PROXY_UPSTREAM_KEY_SIM": "sk-env-secret-value"}})
		a := px.Admin()
		a.CreateUpstream("literal", sim.URL, simKey)
		a.JSON("POST", "/admin/v1/upstreams", map[string]any{"name": "env", "kind": "vendor_api_key", "base_url": "http://127.0.0.1:1", "api_key_env": "PROXY_UPSTREAM_KEY_SIM"}, 201)
		pr := a.CreatePrincipal("p", "*")
		_, key := a.IssueKey(pr)
		h.Messages(px.ProxyURL, body, "x-api-key", key)
		h.Messages(px.ProxyURL, streamBody, "Authorization", "Bearer "+key)
		h.Messages(px.ProxyURL, body, "x-api-key", key+"x")
		sim.Fault(map[string]any{"status": 500})
		h.Messages(px.ProxyURL, body, "x-api-key", key)
		(&h.Admin{Base: px.AdminURL, Token: px.Token + "x"}).Do("GET", "/admin/v1/status", nil)
		px.Stop()
		out := px.RawOutput()
		Expect(out).To(ContainSubstring(`"msg":"listening"`))
		for _, secret := range []string{simKey, "sk-env-secret-value", key, px.Token} {
			Expect(out).NotTo(ContainSubstring(secret))
		}
	})
})

var _ = Describe("Metrics", func() {
	It("exposes the proxy's request counters in Prometheus text format", func() {
		w := newWorld()
		for i := 0; i < 3; i++ {
			h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		}
		h.Messages(w.px.ProxyURL, body, "x-api-key", "sk-px-bad")
		// An answered request is counted after its last byte is written
		// (off the client's path), so the last one may lag the scrape; a
		// refusal is counted before it is written.
		Eventually(func() float64 { return w.admin.Metric("svc_proxy_requests_total", "code", "200") }, 30*time.Second, 20*time.Millisecond).
			Should(Equal(3.0))
		Expect(w.admin.Metric("svc_proxy_requests_total", "code", "401")).To(Equal(1.0))
	})
})

var _ = Describe("Status", func() {
	It("reports the snapshot and the storage driver", Label("P-API-3"), func() {
		w := newWorld()
		s := w.admin.JSON("GET", "/admin/v1/status", nil, 200)
		Expect(s["driver"]).To(Equal("sqlite"))
		snap := s["snapshot"].(map[string]any)
		Expect(snap["keys"]).To(BeEquivalentTo(1))
		Expect(snap["generation"]).To(Equal(s["config_generation"]))
	})
})
