package faults_test

import (
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

// The OAuth credential lifecycle under faults of the provider's token
// endpoint (scheduler/oauth area, issue 18.5 and 18.6).

const oauthFaultKey = "sk-ant-api03-faults-oauth"

const oauthFaultBody = `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hello faults"}]}`

// oauthFaultWorld is one proxy with a short OAuth retry budget and a fast
// watchdog, one sim issuing short-lived tokens, and a connected upstream.
type oauthFaultWorld struct {
	sim         *h.Sim
	px          *h.Proxy
	admin       *h.Admin
	upstream    string
	account     string
	key         string
	connectedAt time.Time
}

func newOAuthFaultWorld(d driver, account string, tokenTTL string, proxyArgs ...string) *oauthFaultWorld {
	w := &oauthFaultWorld{sim: h.StartSimWith([]string{"--oauth-token-ttl", tokenTTL}, oauthFaultKey), account: account}
	// Five refresh attempts 100 ms, 200 ms, 400 ms, 800 ms apart: the
	// retry budget is spent in about 1.5 s; the watchdog ticks every 2 s.
	w.px = h.StartProxy(h.ProxyOptions{DatabaseURL: d.url(), Args: append([]string{
		"--oauth-refresh-retry-base", "100ms", "--job-interval", "oauth_watchdog=2s"}, proxyArgs...)})
	w.admin = w.px.Admin()
	w.upstream = w.admin.CreateOAuthUpstream("subscription", w.sim)
	p := w.admin.CreatePrincipal("app", "claude-*")
	_, w.key = w.admin.IssueKey(p)
	// Warm-up off: its one-token calls would only add noise here.
	_, hd, _ := w.admin.Do("GET", "/admin/v1/upstreams/"+w.upstream, nil)
	w.admin.JSON("PATCH", "/admin/v1/upstreams/"+w.upstream, map[string]any{"warmup_enabled": false}, 200, "If-Match", hd.Get("ETag"))
	w.admin.ConnectOAuth(w.upstream, account)
	w.connectedAt = time.Now()
	return w
}

func (w *oauthFaultWorld) status() map[string]any {
	return w.admin.JSON("GET", "/admin/v1/upstreams/"+w.upstream, nil, 200)["status"].(map[string]any)
}

func (w *oauthFaultWorld) lastApplyError() string {
	s, _ := w.status()["last_apply_error"].(string)
	return s
}

func (w *oauthFaultWorld) refreshFailures() []map[string]any {
	var out []map[string]any
	for _, f := range w.admin.JSON("GET", "/admin/scheduler/failures?job_type=oauth_refresh", nil, 200)["failures"].([]any) {
		out = append(out, f.(map[string]any))
	}
	return out
}

func (w *oauthFaultWorld) refreshKeys() []string {
	var out []string
	for _, j := range w.admin.Jobs("oauth_refresh", "oauth_refresh:"+w.upstream+":") {
		out = append(out, j["idempotency_key"].(string))
	}
	return out
}

// simControl sends one request to the sim's control API and returns the status.
func simControl(method, url, body string) int {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	res.Body.Close()
	return res.StatusCode
}

var _ = Describe("OAuth token endpoint faults", func() {
	for _, d := range drivers {
		It("recovers a token whose refresh outlived its retry budget once the endpoint is back ("+d.name+")", func() {
			w := newOAuthFaultWorld(d, "acct-down-"+d.name, "20s")
			// The token endpoint goes down after the flow: every refresh
			// attempt gets a 503 until the fault is cleared.
			w.sim.Fault(map[string]any{"path": "/v1/oauth/token", "status": 503})

			// Operator: the exhausted refresh is a failure ticket, the
			// upstream's status says so, and the watchdog queued a new
			// attempt under a new key (the old key can never run again).
			Eventually(func() []map[string]any { return w.refreshFailures() }, 40*time.Second, 250*time.Millisecond).ShouldNot(BeEmpty())
			f := w.refreshFailures()[len(w.refreshFailures())-1]
			Expect(f["state"]).To(Equal("Failed"))
			Expect(f["attempt"]).To(BeEquivalentTo(5))
			Expect(f["last_error"]).To(ContainSubstring("503"))
			Eventually(w.lastApplyError, 10*time.Second, 200*time.Millisecond).Should(ContainSubstring("OAuth token refresh failed"))
			Eventually(w.refreshKeys, 20*time.Second, 250*time.Millisecond).Should(ContainElement(HaveSuffix(":retry1")))
			Expect(h.LogEvents(w.px.Proc, "msg", "oauth refresh re-queued after its jobs ended without a new token")).NotTo(BeEmpty())

			// The endpoint comes back: a re-queued refresh succeeds and the
			// failure leaves the status.
			Expect(w.sim.Counter(w.account, "refresh_grants")).To(Equal(0))
			Expect(simControl("DELETE", w.sim.URL+"/_sim/faults", "")).To(Equal(204))
			Eventually(func() int { return w.sim.Counter(w.account, "refresh_grants") }, 30*time.Second, 250*time.Millisecond).Should(BeNumerically(">=", 1))
			Eventually(w.lastApplyError, 10*time.Second, 200*time.Millisecond).Should(BeEmpty())

			// Client: past the first token's expiry, requests succeed with
			// the refreshed one.
			time.Sleep(time.Until(w.connectedAt.Add(21 * time.Second)))
			st, _, b := h.Messages(w.px.ProxyURL, oauthFaultBody, "x-api-key", w.key)
			Expect(st).To(Equal(200), string(b))
			Expect(w.px.RawOutput()).NotTo(ContainSubstring("sk-ant-ort01-sim-"))
		})

		It("takes an upstream whose refresh grant the provider refused out of routing until the OAuth flow is run again ("+d.name+")", func() {
			w := newOAuthFaultWorld(d, "acct-out-"+d.name, "6s")
			Expect(simControl("POST", w.sim.URL+"/_sim/oauth/revoke", `{"account":"`+w.account+`"}`)).To(Equal(204))
			Eventually(w.lastApplyError, 30*time.Second, 200*time.Millisecond).Should(ContainSubstring("run the OAuth flow again"))
			// The refusal is a configuration change: once applied, the
			// snapshot leaves the upstream out.
			waitApplied(w.admin)
			sent := len(w.sim.MessagesWith())

			// The only upstream: a non-retryable error naming its state,
			// streams included, and nothing sent with the revoked token.
			for _, body := range []string{oauthFaultBody, strings.Replace(oauthFaultBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)} {
				st, hd, b := h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
				Expect(st).To(Equal(503), string(b))
				Expect(hd.Get("x-should-retry")).To(Equal("false"))
				Expect(h.AnthropicErrorType(b)).To(Equal("api_error"))
				Expect(string(b)).To(And(ContainSubstring("revoked"), ContainSubstring("run the OAuth flow again")))
			}
			Expect(w.sim.MessagesWith()).To(HaveLen(sent), "a request reached the provider with the revoked token")
			for _, ev := range requestEvents(w.admin, 2) {
				Expect(ev).To(HaveKeyWithValue("error_type", "upstream_credential_revoked"))
				Expect(ev).To(HaveKeyWithValue("upstream_id", w.upstream))
			}

			// Another upstream takes the traffic meanwhile.
			paid := h.StartSim(oauthFaultKey)
			paidID := w.admin.CreateUpstream("paid", paid.URL, oauthFaultKey)
			waitApplied(w.admin)
			st, _, b := h.Messages(w.px.ProxyURL, oauthFaultBody, "x-api-key", w.key)
			Expect(st).To(Equal(200), string(b))
			Expect(requestEvents(w.admin, 3)[0]).To(HaveKeyWithValue("upstream_id", paidID))
			Expect(w.sim.MessagesWith()).To(HaveLen(sent), "a request reached the provider with the revoked token")

			// The flow run again: the subscription is routed to (first) again.
			w.admin.ConnectOAuth(w.upstream, w.account)
			waitApplied(w.admin)
			st, _, b = h.Messages(w.px.ProxyURL, oauthFaultBody, "x-api-key", w.key)
			Expect(st).To(Equal(200), string(b))
			Expect(requestEvents(w.admin, 4)[0]).To(HaveKeyWithValue("upstream_id", w.upstream))
			Expect(w.sim.MessagesWith()).To(HaveLen(sent + 1))
		})

		It("does not re-queue a refresh the provider refused (invalid_grant) and keeps it visible ("+d.name+")", func() {
			w := newOAuthFaultWorld(d, "acct-revoked-"+d.name, "6s")
			// The provider revokes the account's tokens: the refresh (due at
			// half the 6 s lifetime) is refused with invalid_grant.
			Expect(simControl("POST", w.sim.URL+"/_sim/oauth/revoke", `{"account":"`+w.account+`"}`)).To(Equal(204))
			Eventually(func() []map[string]any { return w.refreshFailures() }, 30*time.Second, 250*time.Millisecond).ShouldNot(BeEmpty())
			f := w.refreshFailures()[0]
			Expect(f["state"]).To(Equal("Killed"))
			Expect(f["attempt"]).To(BeEquivalentTo(1))
			Expect(f["last_error"]).To(ContainSubstring("invalid_grant"))
			Eventually(w.lastApplyError, 10*time.Second, 200*time.Millisecond).Should(And(ContainSubstring("invalid_grant"), ContainSubstring("run the OAuth flow again")))
			Expect(h.LogEvents(w.px.Proc, "msg", "oauth refresh refused", "upstream_id", w.upstream)).NotTo(BeEmpty())

			// An unrelated configuration change rebuilds the snapshot; the
			// refusal stays visible.
			w.admin.CreatePrincipal("unrelated", "claude-*")
			// Several watchdog ticks: no new attempt, no new ticket.
			Consistently(w.refreshKeys, 6*time.Second, 500*time.Millisecond).ShouldNot(ContainElement(ContainSubstring(":retry")))
			Expect(w.refreshFailures()).To(HaveLen(1))
			Expect(w.lastApplyError()).To(ContainSubstring("invalid_grant"))

			// Client: the revoked token is refused upstream; the client gets
			// an error in Anthropic's shape, not a silent success.
			st, _, b := h.Messages(w.px.ProxyURL, oauthFaultBody, "x-api-key", w.key)
			Expect(st).To(BeNumerically(">=", 400), string(b))
			Expect(h.AnthropicErrorType(b)).NotTo(HavePrefix("not an Anthropic error"))

			// A new flow connects it again and clears the status.
			w.admin.ConnectOAuth(w.upstream, w.account)
			Eventually(w.lastApplyError, 10*time.Second, 200*time.Millisecond).Should(BeEmpty())
			st, _, b = h.Messages(w.px.ProxyURL, oauthFaultBody, "x-api-key", w.key)
			Expect(st).To(Equal(200), string(b))
			Expect(strings.Contains(w.px.RawOutput(), "sk-ant-oat01-sim-")).To(BeFalse())
		})
	}
})
