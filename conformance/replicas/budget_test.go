package replicas_test

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

var _ = Describe("Budgets across replicas", func() {
	It("refuses on every replica once the spend through one of them reached the principal's usd budget", func() {
		c := &cluster{db: h.FreshSchema(), sim: h.StartSim(simKey)}
		token, master := "adm-"+h.RandomHex(12), h.RandomHex(32)
		for i := 0; i < 2; i++ {
			c.replicas = append(c.replicas, h.StartProxy(h.ProxyOptions{DatabaseURL: c.db, Token: token, MasterKey: master, Args: []string{
				"--reconcile-interval", "1s", "--price-catalog-url", c.sim.URL + "/catalog/prices.json", "--job-interval", "price_catalog_fetch=1s"}}))
		}
		a := c.replicas[0].Admin()
		for _, r := range c.replicas {
			Eventually(func() any { return r.Admin().JSON("GET", "/admin/v1/price-catalog", nil, 200)["installed_version"] },
				30*time.Second, 200*time.Millisecond).Should(Equal("v1"))
		}
		a.CreateUpstream("sim", c.sim.URL, simKey)
		// One request of the sim costs tens of micro-dollars: a budget of
		// one nano-dollar is spent by the first.
		m := a.JSON("POST", "/admin/v1/principals", map[string]any{"name": "budgeted", "kind": "machine", "allowed_models": []string{"*"},
			"default_limits": []any{map[string]any{"kind": "usd", "window_secs": 3600, "limit": "0.000000001"}}}, 201)
		_, key := a.IssueKey(m["id"].(string))
		// The suite's body names a model the catalog does not price (no
		// cost, so no spend): this one is priced.
		const priced = `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"spend"}]}`
		var first []byte
		Eventually(func() int {
			st, _, b := h.Messages(c.replicas[0].ProxyURL, priced, "x-api-key", key)
			first = b
			return st
		}, 5*time.Second, 20*time.Millisecond).Should(Equal(200), func() string { return string(first) })
		// The spend reaches the database within a second of being recorded;
		// once every replica synced again (read the total back), the other
		// replica refuses its very first request for this principal.
		Eventually(func() int64 { return usdTotal(c.db) }, 10*time.Second, 100*time.Millisecond).Should(BeNumerically(">", 0))
		time.Sleep(2500 * time.Millisecond)
		for _, r := range []*h.Proxy{c.replicas[1], c.replicas[0]} {
			st, _, b := h.Messages(r.ProxyURL, priced, "x-api-key", key)
			Expect(st).To(Equal(429), string(b))
			Expect(h.AnthropicErrorType(b)).To(Equal("rate_limit_error"))
			Expect(string(b)).To(ContainSubstring("budget"))
		}
	})
})

// usdTotal sums the shared spend windows, in nano-dollars.
func usdTotal(db string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	Expect(err).NotTo(HaveOccurred())
	defer conn.Close(context.Background())
	var n int64
	Expect(conn.QueryRow(ctx, "SELECT coalesce(sum(count), 0) FROM limit_windows WHERE kind = 'usd'").Scan(&n)).To(Succeed())
	return n
}
