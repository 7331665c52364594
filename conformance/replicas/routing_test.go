package replicas_test

import (
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
			Eventually(func() bool { return caughtUp(r) }, 5*time.Second, 20*time.Millisecond).Should(BeTrue())
		}
		c.sim.Fault(map[string]any{"path": "/v1/messages", "status": 429, "retry_after": 3600})

		Expect(status(c.replicas[0], key)).To(Equal(200), "the 429 fails over to the spare")
		Expect(c.sim.MessagesWith()).To(HaveLen(1))
		Expect(cooldownOf(c.replicas[0], limited)).NotTo(BeNil())
		// Shared through the database within the sync interval (a second).
		Eventually(func() any { return cooldownOf(c.replicas[1], limited) }, 5*time.Second, 50*time.Millisecond).ShouldNot(BeNil())
		for range 5 {
			Expect(status(c.replicas[1], key)).To(Equal(200))
		}
		Expect(c.sim.MessagesWith()).To(HaveLen(1), "replica 1 sent a request to the cooling account")
		Expect(spare.MessagesWith()).To(HaveLen(6))
	})
})
