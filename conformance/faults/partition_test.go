package faults_test

import (
	"net/url"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

const partitionSimKey = "sk-sim-faults-partition"

const partitionBody = `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"partition"}]}`

func partitionStatus(px *h.Proxy, key string) int {
	st, _, _ := h.Messages(px.ProxyURL, partitionBody, "x-api-key", key)
	return st
}

// A replica cut off from PostgreSQL by a network partition (not a stopped
// server: its connections break with RST and new ones are refused) keeps
// serving from its snapshot, tells the operator its storage is unavailable,
// and after the partition heals converges on what changed meanwhile within
// its reconciler period, although the notification of that change was lost.
var _ = Describe("Database partition (PostgreSQL)", func() {
	It("serves from the snapshot while cut off and converges after the heal", Label("P-RUNTIME-2", "P-RUNTIME-4"), func() {
		db := h.FreshSchema()
		u, err := url.Parse(db)
		Expect(err).NotTo(HaveOccurred())
		link := h.StartLink(u.Host)
		behind := *u
		behind.Host = link.Addr

		sim := h.StartSim(partitionSimKey)
		token, master := "adm-"+h.RandomHex(12), h.RandomHex(32)
		direct := h.StartProxy(h.ProxyOptions{DatabaseURL: db, Token: token, MasterKey: master, Args: []string{"--replica-id", "direct"}})
		const period = 2 * time.Second
		cut := h.StartProxy(h.ProxyOptions{DatabaseURL: behind.String(), Token: token, MasterKey: master,
			Args: []string{"--replica-id", "behind-link", "--reconcile-interval", period.String()}})

		a := direct.Admin()
		a.CreateUpstream("sim", sim.URL, partitionSimKey)
		pr := a.CreatePrincipal("app", "*")
		_, key := a.IssueKey(pr)
		Eventually(func() int { return partitionStatus(cut, key) }, 5*time.Second, 50*time.Millisecond).Should(Equal(200))

		link.Cut()
		for i := 0; i < 10; i++ {
			Expect(partitionStatus(cut, key)).To(Equal(200), "the proxy path must not depend on the database")
		}
		Eventually(func() int { st, _, _ := cut.Admin().Do("GET", "/admin/v1/status", nil); return st }, 10*time.Second, 100*time.Millisecond).
			Should(Equal(503), "the operator sees the cut replica's storage as unavailable")
		cut.Admin().ExpectError("GET", "/admin/v1/status", nil, 503, "storage_unavailable")

		// A change made on the other side of the partition: its notification
		// cannot reach the cut replica.
		a.JSON("POST", "/admin/v1/principals/"+pr+"/disable", nil, 200)
		Eventually(func() int { return partitionStatus(direct, key) }, 5*time.Second, 50*time.Millisecond).Should(Equal(403))
		Expect(partitionStatus(cut, key)).To(Equal(200), "the cut replica still serves its last snapshot")

		link.Heal()
		healed := time.Now()
		// Converged within the reconciler period, with slack for the pool
		// to reconnect on a busy machine.
		Eventually(func() int { return partitionStatus(cut, key) }, 4*period+5*time.Second, 50*time.Millisecond).Should(Equal(403))
		GinkgoWriter.Printf("converged %s after the heal\n", time.Since(healed).Round(10*time.Millisecond))
		Eventually(func() int { st, _, _ := cut.Admin().Do("GET", "/admin/v1/status", nil); return st }, 10*time.Second, 100*time.Millisecond).Should(Equal(200))
	})
})
