package replicas_test

import (
	"encoding/json"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("Coupon claims across replicas", func() {
	It("lets two replicas racing a claim send exactly one provider POST", Label("P-COUPON-2", "P-COUPON-1"), func() {
		c := newCluster(2)
		a := c.replicas[0].Admin()
		c.sim.SetAccount("acct-race", map[string]any{"coupon_available": true})
		up := a.CreateOAuthUpstream("subscription", c.sim)
		a.ConnectOAuth(up, "acct-race")
		Eventually(func() any {
			return a.JSON("GET", "/admin/v1/upstreams/"+up+"/limit-resets", nil, 200)["coupon"].(map[string]any)["available"]
		}, 20*time.Second, 200*time.Millisecond).Should(BeTrue())
		// The claim POST takes a second, so the racers overlap with it.
		c.sim.Fault(map[string]any{"path": "/api/oauth/usage/limit_reset", "count": 1, "latency_ms": 1000})
		type result struct {
			status int
			code   string
		}
		var mu sync.Mutex
		var results []result
		var wg sync.WaitGroup
		for i := 0; i < 6; i++ {
			r := c.replicas[i%2]
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				st, _, b := r.Admin().Do("POST", "/admin/v1/upstreams/"+up+"/limit-resets/claim", nil)
				var e struct{ Error struct{ Code string } }
				_ = json.Unmarshal(b, &e)
				mu.Lock()
				results = append(results, result{st, e.Error.Code})
				mu.Unlock()
			}()
		}
		wg.Wait()
		ok := 0
		for _, r := range results {
			switch r.status {
			case 200:
				ok++
			case 409:
				Expect(r.code).To(BeElementOf("claim_in_progress", "coupon_unavailable"))
			default:
				Fail("unexpected claim answer: " + r.code)
			}
		}
		Expect(ok).To(Equal(1))
		Expect(c.sim.Counter("acct-race", "claim_posts")).To(Equal(1))
		Expect(c.sim.Counter("acct-race", "claims_applied")).To(Equal(1))
		// Both replicas now advertise no coupon.
		for _, r := range c.replicas {
			Expect(r.Admin().JSON("GET", "/admin/v1/upstreams/"+up+"/limit-resets", nil, 200)["coupon"].(map[string]any)["available"]).To(BeFalse())
		}
	})
})

var _ = Describe("Warm-up across replicas", func() {
	It("runs one warm-up per cycle however many replicas push work, and the watchdog recreates dead-lettered work", Label("P-WARM-2", "P-WARM-W2", "P-OPS-1"), func() {
		c := newCluster(3, "--job-interval", "warmup_watchdog=2s")
		a := c.replicas[0].Admin()
		up := a.CreateOAuthUpstream("subscription", c.sim)
		// The provider refuses warm-ups with 401 at first: the attempt fails
		// permanently (dead-lettered).
		c.sim.Fault(map[string]any{"path": "/v1/messages", "count": 1, "status": 401})
		a.ConnectOAuth(up, "acct-wd")
		Eventually(func() int {
			return len(a.JSON("GET", "/admin/scheduler/failures?job_type=adaptive:warmup", nil, 200)["failures"].([]any))
		},
			20*time.Second, 200*time.Millisecond).Should(Equal(1))
		// On a following tick a watchdog creates new work under a new key,
		// which warms the account once.
		Eventually(func() int { return c.sim.Counter("acct-wd", "billable_requests") }, 20*time.Second, 200*time.Millisecond).Should(Equal(1))
		Consistently(func() int { return c.sim.Counter("acct-wd", "billable_requests") }, 5*time.Second, 500*time.Millisecond).Should(Equal(1))
		jobs := a.Jobs("adaptive:warmup", "adaptive:warmup:"+up+":")
		states := map[string]int{}
		for _, j := range jobs {
			states[j["state"].(string)]++
		}
		// A permanent failure ends the job at once (Killed: not retried).
		Expect(states["Failed"]+states["Killed"]).To(Equal(1), "the old terminal row stays: %v", states)
		Expect(states["Done"]).To(Equal(1))
		Expect(states["Pending"]).To(Equal(1), "the next cycle is scheduled once")
	})
})
