package proxy_test

import (
	"bytes"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	h "github.com/pillarhq/pillar/conformance/harness"
)

// accounts is one proxy in front of several simulated provider accounts,
// one sim (and one API-key upstream) each.
type accounts struct {
	px    *h.Proxy
	admin *h.Admin
	sims  []*h.Sim
	ids   []string
	key   string
}

// newAccounts starts len(weights) accounts; weight 0 is standby.
func newAccounts(weights ...int) *accounts {
	a := &accounts{}
	a.px = h.StartProxy(h.ProxyOptions{})
	a.admin = a.px.Admin()
	for i, w := range weights {
		sim := h.StartSim(simKey)
		a.sims = append(a.sims, sim)
		m := a.admin.JSON("POST", "/admin/v1/upstreams", map[string]any{"name": fmt.Sprintf("account-%d", i), "kind": "vendor_api_key",
			"base_url": sim.URL, "api_key_value": simKey, "weight": w}, 201)
		a.ids = append(a.ids, m["id"].(string))
	}
	_, a.key = a.admin.IssueKey(a.admin.CreatePrincipal("agents", "claude-*"))
	return a
}

func (a *accounts) ask(marker string) (int, string, []byte) {
	st, hdr, b := h.Messages(a.px.ProxyURL, fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":%q}]}`, marker), "x-api-key", a.key)
	return st, hdr.Get("Retry-After"), b
}

// served is how many Messages requests each account received.
func (a *accounts) served() []int {
	out := make([]int, len(a.sims))
	for i, s := range a.sims {
		out[i] = len(s.MessagesWith())
	}
	return out
}

// routingOf is the upstream's entry of GET /admin/v1/status's routing.
func (a *accounts) routingOf(id string) map[string]any {
	st := a.admin.JSON("GET", "/admin/v1/status", nil, 200)
	for _, r := range st["routing"].([]any) {
		if m := r.(map[string]any); m["upstream_id"] == id {
			return m
		}
	}
	Fail("no routing entry for " + id)
	return nil
}

// plainMetric is the value of an unlabelled counter or gauge (-1: absent).
func plainMetric(px *h.Proxy, name string) float64 {
	_, _, b := px.Admin().Do("GET", "/metrics", nil)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	Expect(err).NotTo(HaveOccurred())
	f := fams[name]
	if f == nil || len(f.Metric) == 0 {
		return -1
	}
	if c := f.Metric[0].GetCounter(); c != nil {
		return c.GetValue()
	}
	return f.Metric[0].GetGauge().GetValue()
}

var _ = Describe("Routing across accounts", func() {
	It("takes a rate-limited account out of routing until its retry-after, then fails over 502s within the budget", func() {
		// Account 0 takes new work; 1 and 2 are standby, in that order.
		a := newAccounts(1, 0, 0)
		a.sims[0].Fault(map[string]any{"path": "/v1/messages", "status": 429, "retry_after": 3600})

		st, _, b := a.ask("first")
		Expect(st).To(Equal(200), string(b))
		Expect(a.served()).To(Equal([]int{1, 1, 0}), "the 429 failed over to the first standby")
		r := a.routingOf(a.ids[0])
		Expect(r["cooldown_until_unix_secs"]).NotTo(BeNil())
		Expect(plainMetric(a.px, "svc_proxy_upstream_cooldowns_total")).To(Equal(1.0))

		// No request reaches the cooling account, not even to fail over.
		for i := range 8 {
			st, _, b := a.ask(fmt.Sprintf("cooling %d", i))
			Expect(st).To(Equal(200), string(b))
		}
		Expect(a.served()).To(Equal([]int{1, 9, 0}))

		// A failing account (502 before the first byte) fails over to the
		// next; it is not cooled down (no rate limit), so it is tried again.
		a.sims[1].Fault(map[string]any{"path": "/v1/messages", "status": 502})
		for i := range 3 {
			st, _, b := a.ask(fmt.Sprintf("failing %d", i))
			Expect(st).To(Equal(200), string(b))
		}
		Expect(a.served()).To(Equal([]int{1, 12, 3}))
		Expect(a.routingOf(a.ids[1])["cooldown_until_unix_secs"]).To(BeNil())
	})

	It("answers 429 with the earliest cooldown's end when every account is cooling down, sending nothing", func() {
		a := newAccounts(1, 1)
		a.sims[0].Fault(map[string]any{"path": "/v1/messages", "status": 429, "retry_after": 30})
		a.sims[1].Fault(map[string]any{"path": "/v1/messages", "status": 429, "retry_after": 45})
		st, _, _ := a.ask("both limited")
		Expect(st).To(Equal(429), "the last attempt's 429 is the client's")
		Expect(a.served()).To(Equal([]int{1, 1}))

		st, retryAfter, b := a.ask("all cooling")
		Expect(st).To(Equal(429))
		Expect(h.AnthropicErrorType(b)).To(Equal("rate_limit_error"))
		Expect(retryAfter).To(BeElementOf("29", "30"), "the earlier of the two cooldowns")
		Expect(a.served()).To(Equal([]int{1, 1}), "nothing sent to a cooling account")
		Expect(plainMetric(a.px, "svc_proxy_all_upstreams_cooling_total")).To(Equal(1.0))
	})

	It("spreads new requests over equal-weight accounts", func() {
		a := newAccounts(1, 1, 1)
		for i := range 60 {
			st, _, b := a.ask(fmt.Sprintf("spread %d", i))
			Expect(st).To(Equal(200), string(b))
		}
		// Each of three equal accounts gets a third (20); fewer than 5 is
		// a binomial tail below 1e-4, and all sent to one account (the
		// strict order) fails at once.
		for i, n := range a.served() {
			Expect(n).To(BeNumerically(">=", 5), "account %d got %d of 60", i, n)
		}
		Expect(a.served()[0] + a.served()[1] + a.served()[2]).To(Equal(60))
	})
})
