package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

// Security hardening of issue 19: what the admin token can make the proxy
// read and reach. docs/operations.md, Security.
var _ = Describe("Security", func() {
	It("lets api_key_env name only variables the operator allowed, never the proxy's own, and echoes no secret", Label("P-UP-2"), func() {
		sim := h.StartSim(simKey)
		const other, pasted = "sk-host-secret-not-for-upstreams", "sk-ant-api03-pasted-into-the-wrong-field"
		master := h.RandomHex(32)
		px := h.StartProxy(h.ProxyOptions{MasterKey: master, Args: []string{"--log-level", "debug", "--upstream-key-env-allow", "LISTED_KEY"},
			Env: map[string]string{"PROXY_UPSTREAM_KEY_SIM": simKey, "LISTED_KEY": simKey, "HOST_SECRET": other}})
		a := px.Admin()
		up := func(env string) map[string]any {
			return map[string]any{"name": "u", "kind": "vendor_api_key", "base_url": sim.URL, "api_key_env": env}
		}
		for _, name := range []string{"PROXY_MASTER_KEY", "PROXY_ADMIN_TOKEN", "HOST_SECRET"} {
			st, _, b := a.Do("POST", "/admin/v1/upstreams", up(name))
			Expect(st).To(Equal(400), string(b))
			Expect(string(b)).To(ContainSubstring(`"code":"api_key_env_not_allowed"`))
			Expect(string(b)).NotTo(SatisfyAny(ContainSubstring(master), ContainSubstring(px.Token), ContainSubstring(other)))
		}
		st, _, b := a.Do("POST", "/admin/v1/upstreams", up(pasted))
		Expect(st).To(Equal(400), string(b))
		Expect(string(b)).To(ContainSubstring("not a valid variable name"))
		Expect(string(b)).NotTo(ContainSubstring(pasted))
		_, _, list := a.Do("GET", "/admin/v1/upstreams", nil)
		Expect(strings.TrimSpace(string(list))).To(Equal("[]"), "a refusal stored an upstream")

		// The documented prefix and the listed name work.
		a.JSON("POST", "/admin/v1/upstreams", up("PROXY_UPSTREAM_KEY_SIM"), 201)
		a.JSON("POST", "/admin/v1/upstreams", map[string]any{"name": "listed", "kind": "vendor_api_key", "base_url": sim.URL, "api_key_env": "LISTED_KEY"}, 201)
		pr := a.CreatePrincipal("p", "*")
		_, key := a.IssueKey(pr)
		st, _, b = h.Messages(px.ProxyURL, body, "x-api-key", key)
		Expect(st).To(Equal(200), string(b))
		for _, r := range sim.Requests() {
			Expect(r.Header.Get("X-Api-Key")).To(Equal(simKey))
		}
		px.Stop()
		// The refusals were logged (debug) without the pasted value. The
		// harness redacts the master key and token from Output, so those
		// are checked in the responses above and the upstream's header.
		Expect(px.Output()).To(ContainSubstring("admin request refused"))
		Expect(px.Output()).NotTo(SatisfyAny(ContainSubstring(pasted), ContainSubstring(other)))
	})

	It("refuses metadata, link-local and its own listeners always, and private ranges unless allowed", Label("P-UP-12"), func() {
		sim := h.StartSim(simKey)
		strict := h.StartProxy(h.ProxyOptions{StrictEgress: true})
		open := h.StartProxy(h.ProxyOptions{})
		create := func(px *h.Proxy, base string) (int, string) {
			st, _, b := px.Admin().Do("POST", "/admin/v1/upstreams", map[string]any{"name": "u", "kind": "vendor_api_key", "base_url": base, "api_key_value": "k"})
			return st, string(b)
		}
		always := []string{
			"http://169.254.169.254/latest/meta-data/", "http://2852039166/", "http://0xa9fea9fe/", "http://0251.0376.0251.0376/",
			"http://[::ffff:169.254.169.254]/", "http://[fd00:ec2::254]/", "http://[fe80::1]/", "http://metadata.google.internal/",
			"http://metadata/", "http://0.0.0.0:80/",
		}
		for _, px := range []*h.Proxy{strict, open} {
			for _, base := range append(always, px.ProxyURL, px.AdminURL) {
				st, b := create(px, base)
				Expect(st).To(Equal(400), base+": "+b)
				Expect(b).To(ContainSubstring(`"code":"invalid_location"`), base)
				u, _ := url.Parse(base)
				if u.Host != "metadata" { // the reason itself names metadata host names
					Expect(b).NotTo(ContainSubstring(u.Host), "the refusal repeats the location")
				}
			}
		}
		for _, base := range []string{sim.URL, "http://localhost:1/", "http://10.1.2.3/", "http://192.168.0.1/", "http://100.64.0.1/", "http://[fd12::1]/"} {
			st, b := create(strict, base)
			Expect(st).To(Equal(400), base+": "+b)
			Expect(b).To(ContainSubstring("--allow-private-upstreams"))
		}
		_, _, list := strict.Admin().Do("GET", "/admin/v1/upstreams", nil)
		Expect(strings.TrimSpace(string(list))).To(Equal("[]"), "a refusal stored an upstream")
		st, b := create(open, sim.URL)
		Expect(st).To(Equal(201), b)
		// A public address is accepted (nothing is dialled at create).
		st, b = create(strict, "https://93.184.215.14/")
		Expect(st).To(Equal(201), b)
	})

	// The connect-time check, end to end: an upstream stored while private
	// upstreams were allowed is not dialled once the proxy runs without the
	// flag. Re-resolution of a name that changes its answer is covered by
	// the egress unit tests (TestDialReResolves) with an injected resolver:
	// bin/proxy uses the system resolver, which a spec cannot steer without
	// a DNS server of its own.
	It("checks the destination again when it connects", func() {
		sim := h.StartSim(simKey)
		px := h.StartProxy(h.ProxyOptions{})
		a := px.Admin()
		a.CreateUpstream("sim", sim.URL, simKey)
		pr := a.CreatePrincipal("p", "*")
		_, key := a.IssueKey(pr)
		st, _, b := h.Messages(px.ProxyURL, body, "x-api-key", key)
		Expect(st).To(Equal(200), string(b))
		// The first replica's metadata listing may reach the sim at any
		// moment after the upstream was created: the relay's requests are
		// counted.
		seen := len(sim.MessagesWith())

		px.Opts.StrictEgress = true
		px.Restart()
		st, _, b = h.Messages(px.ProxyURL, body, "x-api-key", key)
		Expect(st).To(BeNumerically(">=", 500), string(b))
		Expect(sim.MessagesWith()).To(HaveLen(seen), "the proxy connected to a destination its policy refuses")
		px.Stop()
		Expect(px.Output()).To(ContainSubstring("destination not allowed"))
	})

	// docs/resilience.md, Headers: what the client sends that never
	// reaches the provider, on a plain answer and on a stream alike.
	It("keeps the client's cookie, credentials, hop-by-hop and client-address headers from the upstream", func() {
		w := newWorld()
		const clientSecret = "client-bearer-not-for-upstreams"
		stripped := map[string]string{
			"Cookie":              "session=client-cookie-not-for-upstreams",
			"Authorization":       "Bearer " + clientSecret,
			"Proxy-Authorization": "Basic Y2xpZW50OnNlY3JldA==",
			"Connection":          "keep-alive, X-Hop-Named",
			"X-Hop-Named":         "named by Connection",
			"Keep-Alive":          "timeout=5",
			"Te":                  "trailers",
			"X-Forwarded-For":     "10.0.0.7",
			"X-Forwarded-Host":    "internal.example",
			"X-Forwarded-Proto":   "http",
			"Forwarded":           "for=10.0.0.7",
			"X-Real-Ip":           "10.0.0.7",
			"Via":                 "1.1 corp-proxy",
		}
		for _, b := range []string{body, streamBody} {
			hdr := []string{"x-api-key", w.key, "anthropic-beta", "client-beta-2025-01-01"}
			for k, v := range stripped {
				hdr = append(hdr, k, v)
			}
			st, _, out := h.Messages(w.px.ProxyURL, b, hdr...)
			Expect(st).To(Equal(200), string(out))
		}
		seen := w.sim.MessagesWith()
		Expect(seen).To(HaveLen(2))
		for i, r := range seen {
			for k := range stripped {
				Expect(r.Header.Values(k)).To(BeEmpty(), "request %d: the upstream saw the client's %s", i, k)
			}
			Expect(fmt.Sprint(r.Header)).NotTo(SatisfyAny(ContainSubstring("client-cookie"), ContainSubstring(clientSecret), ContainSubstring(w.key)))
			// What the client may say to the provider still passes, and
			// the credential is the upstream's own.
			Expect(r.Header.Get("Anthropic-Beta")).To(Equal("client-beta-2025-01-01"))
			Expect(r.Header.Get("X-Api-Key")).To(Equal(simKey))
		}
		Expect(seen[1].Body).To(ContainSubstring(`"stream":true`))
	})

	It("bounds the model name and stored text, and refuses invalid Unicode without changing anything", func() {
		w := newWorld()
		huge := `{"model":"` + strings.Repeat("m", 5_000_007) + `","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
		st, _, b := h.Messages(w.px.ProxyURL, huge, "x-api-key", w.key)
		Expect(st).To(Equal(400), string(b))
		Expect(string(b)).To(ContainSubstring("invalid_request_error"))
		_, _, events := w.admin.Do("GET", "/admin/v1/request-events?limit=10", nil)
		Expect(string(events)).NotTo(ContainSubstring(strings.Repeat("m", 257)))
		Expect(w.sim.MessagesWith()).To(BeEmpty())

		state := func() string {
			_, _, p := w.admin.Do("GET", "/admin/v1/principals/"+w.principal, nil)
			_, _, k := w.admin.Do("GET", "/admin/v1/principals/"+w.principal+"/keys", nil)
			return string(p) + string(k)
		}
		before := state()
		w.admin.ExpectError("PUT", "/admin/v1/principals/"+w.principal+"/allowed_models", map[string]any{"allowed_models": []string{strings.Repeat("m", 257)}}, 400, "invalid_request")
		w.admin.ExpectError("PATCH", "/admin/v1/principals/"+w.principal, `{"name":"lone \ud800 surrogate"}`, 400, "invalid_request")
		w.admin.ExpectError("PATCH", "/admin/v1/principals/"+w.principal, "{\"name\":\"bad \xff byte\"}", 400, "invalid_request")
		w.admin.ExpectError("POST", "/admin/v1/principals/"+w.principal+"/keys", map[string]any{"name": "  "}, 400, "invalid_request")
		Expect(state()).To(Equal(before))
	})
})

// The allowed_models bypass of a key named twice: the proxy read the first
// "model", the provider (like every JSON decoder) the last. Such a body is
// now refused on every endpoint before anything is sent, and an escaped
// key alone is the key it decodes to.
var _ = Describe("Request bodies", func() {
	post := func(w *world, path, body string) (int, []byte) {
		req, err := http.NewRequest("POST", w.px.ProxyURL+path, strings.NewReader(body))
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("content-type", "application/json")
		req.Header.Set("anthropic-version", "2023-06-01")
		req.Header.Set("x-api-key", w.key)
		res, err := http.DefaultClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		Expect(err).NotTo(HaveOccurred())
		return res.StatusCode, b
	}

	It("refuses a body naming a top-level key twice, escaped or not, on messages, count_tokens and streams, and sends nothing upstream", func() {
		w := newWorld("claude-sonnet-4-5")
		dups := []string{
			`{"model":"claude-sonnet-4-5","mod\u0065l":"claude-opus-4-1","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"claude-sonnet-4-5","mod\u0065l":"claude-opus-4-1","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			`{"mod\u0065l":"claude-opus-4-1","model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"claude-sonnet-4-5","model":"claude-opus-4-1","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"claude-sonnet-4-5","max_tokens":16,"stream":false,"stre\u0061m":true,"messages":[{"role":"user","content":"hi"}]}`,
		}
		refused := 0
		for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
			for _, body := range dups {
				st, b := post(w, path, body)
				Expect(st).To(Equal(400), path+" "+body+": "+string(b))
				Expect(h.AnthropicErrorType(b)).To(Equal("invalid_request_error"))
				Expect(string(b)).To(ContainSubstring("twice"))
				refused++
			}
		}
		Expect(w.providerCalls()).To(BeEmpty())

		// An escaped key alone is the key it decodes to: allowed_models
		// applies to the model the provider would read.
		st, b := post(w, "/v1/messages", `{"mod\u0065l":"claude-opus-4-1","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`)
		Expect(st).To(Equal(403), string(b))
		Expect(h.AnthropicErrorType(b)).To(Equal("permission_error"))
		Expect(w.providerCalls()).To(BeEmpty())
		st, b = post(w, "/v1/messages", `{"mod\u0065l":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`)
		Expect(st).To(Equal(200), string(b))
		Expect(w.providerCalls()).To(HaveLen(1))

		// The refusals are the principal's request events: no model, no
		// upstream, no tokens, no cost (nothing metered or budgeted).
		type event struct {
			Status       int
			Model        string          `json:"model"`
			UpstreamID   string          `json:"upstream_id"`
			ErrorType    string          `json:"error_type"`
			InputTokens  int             `json:"input_tokens"`
			OutputTokens int             `json:"output_tokens"`
			CostUSD      json.RawMessage `json:"cost_usd"`
		}
		var evs []event
		Eventually(func(g Gomega) int {
			_, _, raw := w.admin.Do("GET", "/admin/v1/request-events?limit=100", nil)
			evs = nil
			g.Expect(json.Unmarshal(raw, &evs)).To(Succeed())
			return len(evs)
		}, 10*time.Second, 50*time.Millisecond).Should(Equal(refused + 2))
		byStatus := map[int][]event{}
		for _, e := range evs {
			byStatus[e.Status] = append(byStatus[e.Status], e)
		}
		Expect(byStatus[400]).To(HaveLen(refused))
		for _, e := range byStatus[400] {
			Expect(e.ErrorType).To(Equal("invalid_request_error"))
			Expect(e.Model).To(BeEmpty())
			Expect(e.UpstreamID).To(BeEmpty())
			Expect(e.InputTokens + e.OutputTokens).To(BeZero())
			Expect(string(e.CostUSD)).To(Or(Equal("null"), BeEmpty()))
		}
		Expect(byStatus[403]).To(HaveLen(1))
		Expect(byStatus[403][0].Model).To(Equal("claude-opus-4-1"))
		Expect(byStatus[200]).To(HaveLen(1))
		Expect(byStatus[200][0].Model).To(Equal("claude-sonnet-4-5"))
	})
})
