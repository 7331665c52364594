package replicas_test

import (
	"context"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/jackc/pgx/v5"

	h "github.com/pillarhq/pillar/conformance/harness"
)

var _ = Describe("Principal default_limits across replicas", func() {
	It("enforces one cluster-wide request limit, answers 429 with Retry-After, and keeps counts over a restart", func() {
		c := newCluster(3)
		a := c.replicas[0].Admin()
		a.CreateUpstream("sim", c.sim.URL, simKey)
		m := a.JSON("POST", "/admin/v1/principals", map[string]any{"name": "limited", "kind": "machine", "allowed_models": []string{"*"},
			"default_limits": []any{map[string]any{"kind": "requests", "window_secs": 3600, "max": 6}}}, 201)
		_, key := a.IssueKey(m["id"].(string))
		for _, r := range c.replicas {
			Eventually(func() int { return status(r, key) }, settle, 10*time.Millisecond).Should(Equal(200))
		}
		for _, r := range c.replicas {
			Expect(status(r, key)).To(Equal(200))
		}
		// Six admitted, two through each replica. Each replica adds its
		// counts to the shared window once a second: once the database has
		// all six, and every replica synced again (read the total back),
		// every replica refuses.
		Eventually(func() int64 { return limitTotal(c.db) }, 10*time.Second, 100*time.Millisecond).Should(Equal(int64(6)))
		c.awaitLimitSync()
		for _, r := range c.replicas {
			st, hdr, b := h.Messages(r.ProxyURL, body, "x-api-key", key)
			Expect(st).To(Equal(429))
			Expect(h.AnthropicErrorType(b)).To(Equal("rate_limit_error"))
			ra, err := strconv.Atoi(hdr.Get("Retry-After"))
			Expect(err).NotTo(HaveOccurred())
			Expect(ra).To(BeNumerically(">", 0))
			Expect(ra).To(BeNumerically("<=", 2*3600))
		}
		// A restarted replica reads the shared counts before serving.
		c.replicas[1].Restart()
		Expect(status(c.replicas[1], key)).To(Equal(429))
		// The sim saw only the admitted requests (and the sync probes).
		Expect(c.sim.MessagesWith(`"content":"hi"`)).To(HaveLen(6))
	})
})

// limitTotal sums the shared request counts of every principal.
func limitTotal(db string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	Expect(err).NotTo(HaveOccurred())
	defer conn.Close(context.Background())
	var n int64
	Expect(conn.QueryRow(ctx, "SELECT coalesce(sum(count), 0) FROM limit_windows WHERE kind = 'requests'").Scan(&n)).To(Succeed())
	return n
}
