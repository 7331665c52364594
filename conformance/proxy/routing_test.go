package proxy_test

import (
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

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

// askSession sends a request of Claude Code session sess.
func (a *accounts) askSession(sess, marker string) int {
	st, _, b := h.Messages(a.px.ProxyURL, fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":%q}]}`, marker),
		"x-api-key", a.key, "X-Claude-Code-Session-Id", sess)
	Expect(st).To(Equal(200), string(b))
	return st
}

// servedWith is how many Messages requests holding marker each account received.
func (a *accounts) servedWith(marker string) []int {
	out := make([]int, len(a.sims))
	for i, s := range a.sims {
		out[i] = len(s.MessagesWith(marker))
	}
	return out
}

// onlyOne is the index of the one account that served n requests, failing
// when they were spread.
func onlyOne(counts []int, n int) int {
	GinkgoHelper()
	at := -1
	for i, c := range counts {
		if c > 0 {
			Expect(at).To(Equal(-1), "a session's requests went to several accounts: %v", counts)
			at = i
		}
	}
	Expect(at).NotTo(Equal(-1))
	Expect(counts[at]).To(Equal(n), "%v", counts)
	return at
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
		Expect(a.px.Admin().Metric("svc_proxy_upstream_cooldowns_total")).To(Equal(1.0))

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
		Expect(a.px.Admin().Metric("svc_proxy_all_upstreams_cooling_total")).To(Equal(1.0))
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

var _ = Describe("Session affinity across accounts", func() {
	It("keeps a session's follow-ups on one account, moves it once when that account cools down, and keeps it there after", func() {
		a := newAccounts(1, 1, 1)
		for i := range 6 {
			a.askSession("sess-aff-1", fmt.Sprintf("aff1-%d", i))
		}
		home := onlyOne(a.servedWith("aff1-"), 6)

		// Its account is rate limited for two seconds: the request fails
		// over, and the session's follow-ups go where it failed over to.
		a.sims[home].Fault(map[string]any{"path": "/v1/messages", "status": 429, "retry_after": 2, "count": 1})
		for i := range 4 {
			a.askSession("sess-aff-1", fmt.Sprintf("aff1-moved-%d", i))
		}
		moved := a.servedWith("aff1-moved-")
		Expect(moved[home]).To(Equal(1), "one request met the 429")
		moved[home] = 0
		next := onlyOne(moved, 4)
		Expect(a.px.Admin().Metric("svc_proxy_affinity_moves_total")).To(Equal(1.0))

		// The cooldown ends; the session stays where its cache now is.
		Eventually(func() any { return a.routingOf(a.ids[home])["cooldown_until_unix_secs"] }, 10*time.Second, 100*time.Millisecond).Should(BeNil())
		for i := range 4 {
			a.askSession("sess-aff-1", fmt.Sprintf("aff1-after-%d", i))
		}
		Expect(onlyOne(a.servedWith("aff1-after-"), 4)).To(Equal(next))
		Expect(a.routingOf(a.ids[next])["sessions_bound"]).To(BeEquivalentTo(1))
		Expect(a.routingOf(a.ids[home])["sessions_bound"]).To(BeEquivalentTo(0))
	})

	It("spreads sessions over equal accounts, each session on one", func() {
		a := newAccounts(1, 1)
		for s := range 64 {
			for i := range 2 {
				a.askSession(fmt.Sprintf("sess-spread-%d", s), fmt.Sprintf("spread-%d-%d;", s, i))
			}
		}
		perAccount := make([]int, 2)
		for s := range 64 {
			perAccount[onlyOne(a.servedWith(fmt.Sprintf("spread-%d-", s)), 2)]++
		}
		// Placement hashes random ids, so the split is Binomial(64, 1/2):
		// either account at 16 or fewer happens about once in 10,000 runs;
		// all on one (the strict order) always fails.
		Expect(perAccount[0]).To(BeNumerically(">", 16), "%v", perAccount)
		Expect(perAccount[1]).To(BeNumerically(">", 16), "%v", perAccount)
	})
})

var _ = Describe("Usage thresholds", func() {
	It("sends new work to the other subscription once one is past its polled 5-hour threshold", func() {
		simA, simB := h.StartSim(simKey), h.StartSim(simKey)
		px := h.StartProxy(h.ProxyOptions{Args: []string{"--job-interval", "usage_poll=1s"}})
		admin := px.Admin()
		a := admin.CreateOAuthUpstream("sub-a", simA)
		b := admin.CreateOAuthUpstream("sub-b", simB)
		admin.JSON("PATCH", "/admin/v1/upstreams/"+a, map[string]any{"max_utilization_5h": 90}, 200, "If-Match", "*")
		admin.ConnectOAuth(a, "acct-thr-a")
		admin.ConnectOAuth(b, "acct-thr-b")
		_, key := admin.IssueKey(admin.CreatePrincipal("agents", "claude-*"))
		simA.SetAccount("acct-thr-a", map[string]any{"five_hour_utilization": 95})
		simB.SetAccount("acct-thr-b", map[string]any{"five_hour_utilization": 10})
		routingOf := func(id string) map[string]any {
			for _, r := range admin.JSON("GET", "/admin/v1/status", nil, 200)["routing"].([]any) {
				if m := r.(map[string]any); m["upstream_id"] == id {
					return m
				}
			}
			return nil
		}
		Eventually(func() any { return routingOf(a)["past_threshold"] }, 20*time.Second, 200*time.Millisecond).Should(BeTrue())
		Expect(routingOf(a)["utilization_5h_percent"]).To(BeNumerically(">=", 95))
		Expect(routingOf(b)["past_threshold"]).To(BeFalse())
		for i := range 12 {
			st, _, body := h.Messages(px.ProxyURL, fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"thr-%d"}]}`, i), "x-api-key", key)
			Expect(st).To(Equal(200), string(body))
		}
		Expect(simA.MessagesWith("thr-")).To(BeEmpty(), "the account past its threshold took new work")
		Expect(simB.MessagesWith("thr-")).To(HaveLen(12))
	})
})

var _ = Describe("Concurrency caps", func() {
	// burst sends 20 parallel requests of a principal capped at 4 in
	// flight, through a proxy started with args, to an account that takes
	// a second over each; it returns the statuses.
	burst := func(args ...string) (statuses []int, retryAfter []string, sim *h.Sim, px *h.Proxy) {
		sim = h.StartSim(simKey)
		px = h.StartProxy(h.ProxyOptions{Args: args})
		admin := px.Admin()
		admin.CreateUpstream("account", sim.URL, simKey)
		id := admin.CreatePrincipal("fan-out", "claude-*")
		admin.JSON("PATCH", "/admin/v1/principals/"+id, map[string]any{"max_in_flight": 4}, 200, "If-Match", "*")
		_, key := admin.IssueKey(id)
		sim.Fault(map[string]any{"path": "/v1/messages", "latency_ms": 1000})
		statuses, retryAfter = make([]int, 20), make([]string, 20)
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				st, hdr, _ := h.Messages(px.ProxyURL, fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"fan-%d"}]}`, i), "x-api-key", key)
				statuses[i], retryAfter[i] = st, hdr.Get("Retry-After")
			}()
		}
		wg.Wait()
		return statuses, retryAfter, sim, px
	}

	It("serves a burst of 20 parallel requests past a cap of 4 from the queue, without a 429", func() {
		statuses, _, sim, px := burst()
		for i, st := range statuses {
			Expect(st).To(Equal(200), "request %d", i)
		}
		Expect(sim.MessagesWith("fan-")).To(HaveLen(20))
		Expect(px.Admin().Metric("svc_proxy_queue_refused_total")).To(Equal(0.0))
		Expect(px.Admin().Metric("svc_proxy_queued_requests")).To(Equal(0.0))
	})

	It("answers the burst past the cap 429 rate_limit_error with retry-after when no request may wait", func() {
		statuses, retryAfter, sim, px := burst("--queue-length", "0")
		served, limited := 0, 0
		for i, st := range statuses {
			switch st {
			case 200:
				served++
			case 429:
				limited++
				Expect(retryAfter[i]).NotTo(BeEmpty())
			default:
				Fail(fmt.Sprintf("request %d: %d", i, st))
			}
		}
		Expect(limited).To(BeNumerically(">", 0))
		Expect(sim.MessagesWith("fan-")).To(HaveLen(served), "a refused request reached the account")
		Expect(px.Admin().Metric("svc_proxy_queue_refused_total")).To(Equal(float64(limited)))
	})
})
