package replicas_test

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/postgres"
)

// probeBody is what a sync probe sends; the specs count the sim's requests
// without it.
const probeBody = `{"model":"claude-x","max_tokens":4,"messages":[{"role":"user","content":"sync probe"}]}`

// awaitLimitSync returns once every replica has synced its limit windows
// (added its counts and read the cluster's totals back) after the call
// began, so a spec waits on that event rather than on a sleep. It creates
// a probe principal allowed 1,000 requests an hour, waits until every
// replica knows its key, then adds 10,000 requests to the probe's shared
// window behind the replicas' backs. A replica refuses the probe only
// once a sync read that row back: its own probe requests, a handful, stay
// far below the limit. That sync's read also sees every count committed
// before the row was added, which is what the caller waits for.
func (c *cluster) awaitLimitSync() {
	a := c.replicas[0].Admin()
	m := a.JSON("POST", "/admin/v1/principals", map[string]any{"name": "sync-probe-" + h.RandomHex(4), "kind": "machine", "allowed_models": []string{"*"},
		"default_limits": []any{map[string]any{"kind": "requests", "window_secs": 3600, "max": 1000}}}, 201)
	id := m["id"].(string)
	_, key := a.IssueKey(id)
	probe := func(r *h.Proxy) func() int {
		return func() int {
			st, _, _ := h.Messages(r.ProxyURL, probeBody, "x-api-key", key)
			return st
		}
	}
	for _, r := range c.replicas {
		Eventually(probe(r), 10*time.Second, 50*time.Millisecond).Should(Equal(200), "the probe key reaches every replica")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := postgres.Open(ctx, c.db, postgres.Options{MaxConns: 1})
	Expect(err).NotTo(HaveOccurred())
	defer st.Close()
	now := time.Now()
	start := now.Unix() - now.Unix()%3600
	_, err = st.SyncLimitWindows(ctx, []store.LimitWindow{{PrincipalID: id, Kind: "requests", WindowSecs: 3600, Start: start, Count: 10000}}, now)
	Expect(err).NotTo(HaveOccurred())
	var wg sync.WaitGroup
	for _, r := range c.replicas {
		wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer wg.Done()
			Eventually(probe(r), 10*time.Second, 100*time.Millisecond).Should(Equal(429), "a replica read the shared windows back")
		}()
	}
	wg.Wait()
}
