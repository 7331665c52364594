package proxy_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

// countingAccount is a provider account that holds each Messages request
// until the spec lets them go and counts the most it held at once.
type countingAccount struct {
	srv              *httptest.Server
	held, most, hits atomic.Int32
	gate             chan struct{} // closed: requests go
}

func startCountingAccount() *countingAccount {
	c := &countingAccount{gate: make(chan struct{})}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/messages" {
			// The proxy's own calls (a new upstream's check) are not counted.
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"data":[],"has_more":false}`)
			return
		}
		n := c.held.Add(1)
		for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
		}
		c.hits.Add(1)
		<-c.gate
		c.held.Add(-1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"msg_c","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`)
	}))
	DeferCleanup(c.srv.Close)
	DeferCleanup(c.letGo) // before Close: Close waits for held requests
	return c
}

var letGoOnce sync.Map

func (c *countingAccount) letGo() {
	if _, done := letGoOnce.LoadOrStore(c, true); !done {
		close(c.gate)
	}
}

var _ = Describe("Upstream concurrency caps", func() {
	It("never has more than an account's max_in_flight at the account: a burst spills to the other account, then queues, then is served in full", func() {
		accts := []*countingAccount{startCountingAccount(), startCountingAccount()}
		px := h.StartProxy(h.ProxyOptions{})
		admin := px.Admin()
		ids := make([]string, 2)
		for i, c := range accts {
			m := admin.JSON("POST", "/admin/v1/upstreams", map[string]any{"name": fmt.Sprintf("capped-%d", i), "kind": "vendor_api_key",
				"base_url": c.srv.URL, "api_key_value": simKey, "max_in_flight": 2}, 201)
			ids[i] = m["id"].(string)
			Expect(m["max_in_flight"]).To(Equal(float64(2)))
		}
		_, key := admin.IssueKey(admin.CreatePrincipal("fan-out", "claude-*"))
		const n = 8
		statuses := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				statuses[i], _, _ = h.Messages(px.ProxyURL, fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"cap-%d"}]}`, i), "x-api-key", key)
			}()
		}
		// Both accounts full, the rest waiting in the proxy, as status shows.
		queued := func() (total float64) {
			for _, r := range admin.JSON("GET", "/admin/v1/status", nil, 200)["routing"].([]any) {
				total += r.(map[string]any)["queued"].(float64)
			}
			return total
		}
		Eventually(func() int32 { return accts[0].held.Load() + accts[1].held.Load() }, 20*time.Second, 20*time.Millisecond).Should(Equal(int32(4)))
		Eventually(queued, 20*time.Second, 20*time.Millisecond).Should(Equal(float64(n - 4)))
		st := admin.JSON("GET", "/admin/v1/status", nil, 200)
		for _, r := range st["routing"].([]any) {
			Expect(r.(map[string]any)["slots_in_use"]).To(Equal(float64(2)))
		}
		accts[0].letGo()
		accts[1].letGo()
		wg.Wait()
		for i, s := range statuses {
			Expect(s).To(Equal(200), "request %d", i)
		}
		Expect(accts[0].most.Load()).To(BeNumerically("<=", 2))
		Expect(accts[1].most.Load()).To(BeNumerically("<=", 2))
		Expect(accts[0].hits.Load() + accts[1].hits.Load()).To(Equal(int32(n)))
		Expect(px.Admin().Metric("svc_proxy_upstream_cap_total", "reason", "queued")).To(Equal(float64(n - 4)))
		Expect(px.Admin().Metric("svc_proxy_upstream_cap_total", "reason", "refused")).To(Equal(0.0))
	})
})
