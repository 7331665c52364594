package replicas_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

// caughtUp reports whether the replica serves the database's latest configuration.
func caughtUp(p *h.Proxy) bool {
	st := p.Admin().JSON("GET", "/admin/v1/status", nil, 200)
	return st["snapshot"].(map[string]any)["generation"] == st["config_generation"]
}

// cooldownOf is the upstream's cooldown end as the replica knows it (nil: none).
func cooldownOf(p *h.Proxy, id string) any {
	st := p.Admin().JSON("GET", "/admin/v1/status", nil, 200)
	for _, r := range st["routing"].([]any) {
		if m := r.(map[string]any); m["upstream_id"] == id {
			return m["cooldown_until_unix_secs"]
		}
	}
	return nil
}

// routingEntry is the upstream's routing state as the replica knows it.
func routingEntry(p *h.Proxy, id string) map[string]any {
	st := p.Admin().JSON("GET", "/admin/v1/status", nil, 200)
	for _, r := range st["routing"].([]any) {
		if m := r.(map[string]any); m["upstream_id"] == id {
			return m
		}
	}
	return nil
}

// sessionStatus sends a request of Claude Code session sess through p.
func sessionStatus(p *h.Proxy, key, sess, marker string) int {
	st, _, _ := h.Messages(p.ProxyURL, fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":%q}]}`, marker),
		"x-api-key", key, "X-Claude-Code-Session-Id", sess)
	return st
}

var _ = Describe("Routing across replicas", func() {
	It("shares a cooldown learnt by one replica with the other, which then sends the account nothing", func() {
		c := newCluster(2)
		a := c.replicas[0].Admin()
		limited := a.CreateUpstream("limited", c.sim.URL, simKey)
		spare := h.StartSim(simKey)
		a.CreateStandbyUpstream("spare", spare.URL, simKey)
		_, key := a.IssueKey(a.CreatePrincipal("app", "*"))
		// Replica 1 is waited for through its admin API: a request through
		// it would meet the 429 itself.
		for _, r := range c.replicas {
			Eventually(func() bool { return caughtUp(r) }, settle, 20*time.Millisecond).Should(BeTrue())
		}
		c.sim.Fault(map[string]any{"path": "/v1/messages", "status": 429, "retry_after": 3600})

		Expect(status(c.replicas[0], key)).To(Equal(200), "the 429 fails over to the spare")
		Expect(c.sim.MessagesWith()).To(HaveLen(1))
		Expect(cooldownOf(c.replicas[0], limited)).NotTo(BeNil())
		// Shared through the database within the sync interval (a second).
		Eventually(func() any { return cooldownOf(c.replicas[1], limited) }, settle, 50*time.Millisecond).ShouldNot(BeNil())
		for range 5 {
			Expect(status(c.replicas[1], key)).To(Equal(200))
		}
		Expect(c.sim.MessagesWith()).To(HaveLen(1), "replica 1 sent a request to the cooling account")
		Expect(spare.MessagesWith()).To(HaveLen(6))
	})

	It("lands a session's requests through either replica on one account, and a move made on one replica holds on the other", func() {
		c := newCluster(2)
		a := c.replicas[0].Admin()
		sims := []*h.Sim{c.sim, h.StartSim(simKey), h.StartSim(simKey)}
		var ids []string
		for i, s := range sims {
			ids = append(ids, a.CreateUpstream(fmt.Sprintf("account-%d", i), s.URL, simKey))
		}
		_, key := a.IssueKey(a.CreatePrincipal("app", "*"))
		for _, r := range c.replicas {
			Eventually(func() bool { return caughtUp(r) }, settle, 20*time.Millisecond).Should(BeTrue())
		}
		served := func(marker string) []int {
			out := make([]int, len(sims))
			for i, s := range sims {
				out[i] = len(s.MessagesWith(marker))
			}
			return out
		}
		one := func(counts []int) int {
			GinkgoHelper()
			at := -1
			for i, n := range counts {
				if n > 0 {
					Expect(at).To(Equal(-1), "the session's requests went to several accounts: %v", counts)
					at = i
				}
			}
			Expect(at).NotTo(Equal(-1))
			return at
		}
		for i := range 8 {
			Expect(sessionStatus(c.replicas[i%2], key, "sess-replicas", fmt.Sprintf("rep-%d;", i))).To(Equal(200))
		}
		home := one(served("rep-"))

		// The home account is rate limited for two seconds; replica 0
		// meets it, fails over and moves the session.
		sims[home].Fault(map[string]any{"path": "/v1/messages", "status": 429, "retry_after": 2, "count": 1})
		Expect(sessionStatus(c.replicas[0], key, "sess-replicas", "moved-0;")).To(Equal(200))
		moved := served("moved-")
		moved[home] = 0
		next := one(moved)
		// Replica 1 reads the move (and the cooldown) within the sync interval.
		Eventually(func() any { return routingEntry(c.replicas[1], ids[next])["sessions_bound"] }, settle, 50*time.Millisecond).Should(BeEquivalentTo(1))
		// Once the cooldown is over both replicas keep the session where it moved.
		for _, r := range c.replicas {
			Eventually(func() any { return routingEntry(r, ids[home])["cooldown_until_unix_secs"] }, 10*time.Second, 100*time.Millisecond).Should(BeNil())
		}
		for i := range 6 {
			Expect(sessionStatus(c.replicas[i%2], key, "sess-replicas", fmt.Sprintf("after-%d;", i))).To(Equal(200))
		}
		Expect(one(served("after-"))).To(Equal(next))
		Expect(served("after-")[next]).To(Equal(6))
	})
})
