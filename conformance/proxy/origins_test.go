package proxy_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

// A stored upstream credential goes only to the origins it was given for
// (docs/operations.md, Security): the admin token cannot make the proxy
// send it elsewhere by moving base_url or the token endpoint, nor can an
// upstream by redirecting a background job. Two simulators stand for the
// origin the credential belongs to and for another host.
var _ = Describe("Credentials stay with their origin", func() {
	const otherKey = "sk-sim-other-host-key"

	It("refuses to move an API-key upstream to another origin without its key, and sends a key given with the move only there", func() {
		w := newWorld()
		other := h.StartSim(otherKey)
		up := "/admin/v1/upstreams/" + w.upstream
		w.admin.ExpectError("PATCH", up, map[string]any{"base_url": other.URL}, 400, "credential_required", "If-Match", "*")
		w.admin.ExpectError("PUT", up, map[string]any{"name": "sim", "base_url": other.URL}, 400, "credential_required")
		Expect(w.admin.JSON("GET", up, nil, 200)["base_url"]).To(Equal(w.sim.URL), "a refused move changed the upstream")
		st, _, b := h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).To(Equal(200), string(b))
		Expect(other.Requests()).To(BeEmpty(), "the other host was contacted")

		// With its own key in the same request the move is made, and that
		// key alone reaches the other host, before and after a restart.
		w.admin.JSON("PATCH", up, map[string]any{"base_url": other.URL, "api_key_value": otherKey}, 200, "If-Match", "*")
		served := len(w.sim.MessagesWith())
		for range 2 {
			st, _, b = h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
			Expect(st).To(Equal(200), string(b))
			w.px.Restart()
		}
		Expect(other.MessagesWith()).To(HaveLen(2))
		for _, r := range other.Requests() {
			Expect(r.Header.Get("X-Api-Key")).To(Equal(otherKey), "%s carried another key", r.Path)
		}
		Expect(w.sim.MessagesWith()).To(HaveLen(served), "the old host still served")
	})

	It("refuses to move a connected OAuth upstream's base_url or token endpoint; no token reaches the other host", func() {
		w := newOAuthWorld(nil)
		w.admin.ConnectOAuth(w.upstream, "acct-move")
		other := h.StartSim(otherKey)
		up := "/admin/v1/upstreams/" + w.upstream
		w.admin.ExpectError("PATCH", up, map[string]any{"base_url": other.URL}, 400, "credential_required", "If-Match", "*")
		w.admin.ExpectError("PUT", up, map[string]any{"name": "subscription", "base_url": other.URL}, 400, "credential_required")
		w.admin.ExpectError("PUT", up, map[string]any{"name": "subscription", "base_url": w.sim.URL, "oauth_token_url": other.URL + "/v1/oauth/token"}, 400, "credential_required")
		st, _, b := h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).To(Equal(200), string(b))
		Expect(other.Requests()).To(BeEmpty(), "the other host was contacted")

		// Revoked, the upstream moves; it holds nothing to send until the
		// flow runs again against the new endpoints.
		w.admin.JSON("POST", up+"/oauth/revoke", nil, 200)
		w.admin.JSON("PUT", up, map[string]any{"name": "subscription", "base_url": other.URL, "oauth_token_url": other.URL + "/v1/oauth/token"}, 200)
		st, _, _ = h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).NotTo(Equal(200))
		Expect(other.Requests()).To(BeEmpty(), "a revoked credential reached the other host")
	})

	It("does not follow a redirect to another host with the key in the metadata refresh", func() {
		sim, other := h.StartSim(simKey), h.StartSim(otherKey)
		sim.Fault(map[string]any{"path": "/v1/models", "redirect_to": other.URL})
		px := h.StartProxy(h.ProxyOptions{Args: []string{"--job-interval", "metadata_refresh=1s"}})
		px.Admin().CreateUpstream("sim", sim.URL, simKey)
		// Wait for the refresh to have asked the upstream and failed.
		Eventually(func() float64 {
			return px.Admin().Metric("svc_scheduler_metadata_refresh_status_total", "status", "error")
		}, 60*time.Second, 250*time.Millisecond).
			Should(BeNumerically(">=", 1))
		Expect(other.Requests()).To(BeEmpty(), "the metadata refresh followed the redirect with the key")
		px.Stop()
		Expect(px.Output()).To(ContainSubstring("redirect to another origin refused"))
	})
})
