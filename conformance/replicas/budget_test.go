package replicas_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

var _ = Describe("Budgets across replicas", func() {
	It("admits exactly the requests a usd budget pays for, spent through both replicas, then refuses on every replica", func() {
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
		// The suite's body names a model the catalog does not price (no
		// cost, so no spend): this one is priced.
		const priced = `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"spend"}]}`

		// The price of one request, from an unlimited principal's answer:
		// the sim's catalog prices claude-sonnet-4-5 at $3 input, $15
		// output, $3.75 cache write and $0.30 cache read per million
		// tokens, and the sim answers one body with the same usage.
		_, meterKey := a.IssueKey(a.CreatePrincipal("meter", "*"))
		var price int64
		Eventually(func(g Gomega) int64 {
			st, _, b := h.Messages(c.replicas[0].ProxyURL, priced, "x-api-key", meterKey)
			if st != 200 {
				return 0
			}
			var msg struct {
				Usage struct {
					In  int64 `json:"input_tokens"`
					Out int64 `json:"output_tokens"`
					CW  int64 `json:"cache_creation_input_tokens"`
					CR  int64 `json:"cache_read_input_tokens"`
				} `json:"usage"`
			}
			g.Expect(json.Unmarshal(b, &msg)).To(Succeed())
			u := msg.Usage
			price = u.In*3000 + u.Out*15000 + u.CW*3750 + u.CR*300
			return price
		}, 5*time.Second, 20*time.Millisecond).Should(BeNumerically(">", 0))

		// A budget of two and a half requests: spent through replica 0,
		// then 1, then 0, each request's cost reaching the shared window
		// and every replica reading it back before the next, exactly
		// three are admitted and then both replicas refuse.
		budget := price * 5 / 2
		m := a.JSON("POST", "/admin/v1/principals", map[string]any{"name": "budgeted", "kind": "machine", "allowed_models": []string{"*"},
			"default_limits": []any{map[string]any{"kind": "usd", "window_secs": 86400, "limit": usd(budget)}}}, 201)
		_, key := a.IssueKey(m["id"].(string))
		for _, r := range c.replicas {
			Eventually(func() int { st, _, _ := h.Messages(r.ProxyURL, `{}`, "x-api-key", key); return st },
				5*time.Second, 20*time.Millisecond).Should(Equal(400), "the key reaches every replica")
		}
		for i, r := range []*h.Proxy{c.replicas[0], c.replicas[1], c.replicas[0]} {
			st, _, b := h.Messages(r.ProxyURL, priced, "x-api-key", key)
			Expect(st).To(Equal(200), "request %d: %s", i+1, b)
			Eventually(func() int64 { return usdTotal(c.db) }, 10*time.Second, 100*time.Millisecond).Should(Equal(int64(i+1)*price),
				"the shared window holds the cost of request %d", i+1)
			c.awaitLimitSync()
		}
		for _, r := range []*h.Proxy{c.replicas[1], c.replicas[0]} {
			st, _, b := h.Messages(r.ProxyURL, priced, "x-api-key", key)
			Expect(st).To(Equal(429), string(b))
			Expect(h.AnthropicErrorType(b)).To(Equal("rate_limit_error"))
			Expect(string(b)).To(ContainSubstring("budget"))
		}
		// One metered and three budgeted requests reached the sim.
		Expect(c.sim.MessagesWith(`"content":"spend"`)).To(HaveLen(4))
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

// usd formats nano-dollars as a budget's decimal string.
func usd(n int64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%d.%09d", n/1e9, n%1e9), "0"), ".")
}
