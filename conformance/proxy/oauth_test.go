package proxy_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

// oauthWorld is one proxy, one sim and a connected subscription upstream.
type oauthWorld struct {
	sim       *h.Sim
	px        *h.Proxy
	admin     *h.Admin
	upstream  string
	principal string
	key       string
}

func newOAuthWorld(simArgs []string, proxyArgs ...string) *oauthWorld {
	w := &oauthWorld{sim: h.StartSimWith(simArgs, simKey)}
	w.px = h.StartProxy(h.ProxyOptions{Args: proxyArgs})
	w.admin = w.px.Admin()
	w.upstream = w.admin.CreateOAuthUpstream("subscription", w.sim)
	w.principal = w.admin.CreatePrincipal("app", "claude-*")
	_, w.key = w.admin.IssueKey(w.principal)
	return w
}

// warmups are the one-token requests the sim received.
func (w *oauthWorld) warmups() []h.Recorded {
	return w.sim.MessagesWith(`"max_tokens":1,`)
}

func (w *oauthWorld) upstreamJSON() map[string]any {
	return w.admin.JSON("GET", "/admin/v1/upstreams/"+w.upstream, nil, 200)
}

var _ = Describe("OAuth upstreams", func() {
	It("connects through start, the authorization URL and complete, then routes with the bearer token", Label("P-API-7"), func() {
		w := newOAuthWorld(nil)
		up := w.upstreamJSON()
		Expect(up["warmup_enabled"]).To(BeTrue())
		Expect(up["credential_mode"]).To(BeNil())
		// Before the flow completes the upstream cannot serve.
		st, _, _ := h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).NotTo(Equal(200))

		done := w.admin.ConnectOAuth(w.upstream, "acct-flow")
		Expect(done["credential_mode"]).To(Equal("oauth"))
		Expect(done["has_credential"]).To(BeTrue())
		Expect(w.sim.Counter("acct-flow", "token_grants")).To(Equal(1))

		st, _, b := h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).To(Equal(200), string(b))
		seen := w.sim.MessagesWith("hello proxy world")
		Expect(seen).NotTo(BeEmpty())
		relayed := seen[len(seen)-1]
		Expect(relayed.Header.Get("Authorization")).To(HavePrefix("Bearer sk-ant-oat01-sim-"))
		Expect(relayed.Header.Get("Anthropic-Beta")).To(ContainSubstring("oauth-2025-04-20"))
		Expect(relayed.Header.Get("X-Api-Key")).To(BeEmpty())

		// A forged or reused state is refused and changes nothing.
		w.admin.ExpectError("POST", "/admin/v1/upstreams/"+w.upstream+"/oauth/complete", map[string]any{"state": "forged", "code": "x"}, 400, "invalid_oauth_state")
		// An API-key upstream has no OAuth flow.
		keyUp := w.admin.CreateUpstream("keyed", w.sim.URL, simKey)
		w.admin.ExpectError("POST", "/admin/v1/upstreams/"+keyUp+"/oauth/start", nil, 400, "not_oauth_upstream")

		// Revoke: the credential is gone and the upstream serves no more.
		rv := w.admin.JSON("POST", "/admin/v1/upstreams/"+w.upstream+"/oauth/revoke", nil, 200)
		Expect(rv["credential_mode"]).To(BeNil())
		// No token appears in any log line.
		Expect(w.px.RawOutput()).NotTo(ContainSubstring("sk-ant-oat01-sim-"))
		Expect(w.px.RawOutput()).NotTo(ContainSubstring("sk-ant-ort01-sim-"))
	})

	It("refreshes the token ahead of expiry with the rotated refresh token", Label("P-UP-6"), func() {
		w := newOAuthWorld([]string{"--oauth-token-ttl", "20s"})
		w.admin.ConnectOAuth(w.upstream, "acct-refresh")
		// Refresh runs at half the 20 s lifetime; the old token then expires.
		Eventually(func() int { return w.sim.Counter("acct-refresh", "refresh_grants") }, 30*time.Second, 250*time.Millisecond).Should(BeNumerically(">=", 1))
		time.Sleep(11 * time.Second)
		st, _, b := h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).To(Equal(200), string(b))
		up := w.upstreamJSON()
		Expect(up["spec_revision"]).To(BeEquivalentTo(1), "a background refresh bumped spec_revision")
	})
})

var _ = Describe("Warm-up", func() {
	It("sends a one-token request after OAuth completes, writes the cycle key and schedules the next cycle", Label("P-WARM-1", "P-WARM-S4", "P-EV-1", "P-UP-5"), func() {
		w := newOAuthWorld(nil)
		Expect(w.warmups()).To(BeEmpty())
		w.admin.ConnectOAuth(w.upstream, "acct-warm")
		Eventually(w.warmups, 20*time.Second, 200*time.Millisecond).Should(HaveLen(1))
		wu := w.warmups()[0]
		Expect(wu.Header.Get("Authorization")).To(HavePrefix("Bearer "))
		Eventually(func() any { return w.upstreamJSON()["status"].(map[string]any)["last_warmup_at_unix_secs"] }, 10*time.Second, 200*time.Millisecond).ShouldNot(BeNil())

		acct := w.sim.Account("acct-warm")
		Expect(acct["five_hour"].(map[string]any)["active"]).To(BeTrue())
		Eventually(func() []map[string]any {
			return h.LogEvents(w.px.Proc, "target", "warmup", "action", "cycle_key_written")
		}, 10*time.Second).Should(HaveLen(1))
		for _, action := range []string{"dispatch_start", "dispatch_result"} {
			evs := h.LogEvents(w.px.Proc, "target", "warmup", "action", action, "upstream_id", w.upstream)
			Expect(evs).To(HaveLen(1), action)
		}
		res := h.LogEvents(w.px.Proc, "target", "warmup", "action", "dispatch_result")[0]
		Expect(res["status"]).To(BeEquivalentTo(200))
		Expect(res["outcome"]).To(Equal("warmed"))
		cycle := h.LogEvents(w.px.Proc, "target", "warmup", "action", "cycle_key_written")[0]["cycle_key"].(string)
		Expect(cycle).To(HavePrefix("5h:"))

		// The next attempt waits for the window's end plus the jitter.
		var reset int64
		fmt.Sscanf(cycle, "5h:%d", &reset)
		jobs := w.admin.Jobs("adaptive:warmup", "adaptive:warmup:"+w.upstream+":")
		var next map[string]any
		for _, j := range jobs {
			if j["idempotency_key"] == fmt.Sprintf("adaptive:warmup:%s:%d", w.upstream, reset) {
				next = j
			}
		}
		Expect(next).NotTo(BeNil(), "jobs: %v", jobs)
		Expect(next["state"]).To(Equal("Pending"))
		delay := int64(next["scheduled_at_unix_secs"].(float64)) - reset
		Expect(delay).To(BeNumerically(">=", 30))
		Expect(delay).To(BeNumerically("<=", 59))
	})

	It("skips without a request when the seven-day window is exhausted and re-warms after its reset", Label("P-WARM-S2", "P-WARM-S3", "P-LIM-2", "P-WARM-R2"), func() {
		w := newOAuthWorld(nil)
		reset := time.Now().Add(30 * time.Hour).Truncate(time.Second).UTC()
		w.sim.SetAccount("acct-7d", map[string]any{"seven_day_utilization": 100, "seven_day_resets_at": reset.Format(time.RFC3339)})
		w.admin.ConnectOAuth(w.upstream, "acct-7d")
		key := fmt.Sprintf("adaptive:warmup:%s:%d", w.upstream, reset.Unix())
		var next map[string]any
		Eventually(func() map[string]any {
			for _, j := range w.admin.Jobs("adaptive:warmup", "adaptive:warmup:"+w.upstream+":") {
				if j["idempotency_key"] == key {
					next = j
				}
			}
			return next
		}, 20*time.Second, 200*time.Millisecond).ShouldNot(BeNil())
		delay := int64(next["scheduled_at_unix_secs"].(float64)) - reset.Unix()
		Expect(delay).To(BeNumerically(">=", 30))
		Expect(delay).To(BeNumerically("<=", 59))
		Expect(w.upstreamJSON()["status"].(map[string]any)["last_warmup_at_unix_secs"]).To(BeNil())
		Expect(h.LogEvents(w.px.Proc, "target", "warmup", "outcome", "seven_day_quota_exhausted")).NotTo(BeEmpty())
		Expect(h.LogEvents(w.px.Proc, "target", "warmup", "action", "cycle_key_written")).To(BeEmpty())
	})

	It("sends nothing for an upstream without OAuth credentials", Label("P-WARM-R1"), func() {
		w := newOAuthWorld(nil, "--job-interval", "warmup_watchdog=1s")
		// The watchdog looked at the upstream: two runs finished after it
		// was created (one may have begun before). An ineligible upstream
		// leaves it nothing to do.
		noops := func() float64 {
			return w.px.Admin().Metric("svc_scheduler_jobs_total", "job_type", "warmup_watchdog", "status", "noop")
		}
		from := noops()
		Eventually(noops, 20*time.Second, 100*time.Millisecond).Should(BeNumerically(">=", from+2))
		Expect(w.px.Admin().Metric("svc_scheduler_jobs_total", "job_type", "warmup_watchdog", "status", "done")).To(BeZero())
		Expect(w.warmups()).To(BeEmpty())
		Expect(w.admin.Jobs("adaptive:warmup", "")).To(BeEmpty())
	})

	It("costs at most one extra one-token call when the replica dies between dispatch and the cycle-key write", Label("P-WARM-S7", "P-WARM-2"), func() {
		w := newOAuthWorld(nil)
		// Warm-up off while connecting, so the failpoint is armed first.
		etag := func() string {
			_, hd, _ := w.admin.Do("GET", "/admin/v1/upstreams/"+w.upstream, nil)
			return hd.Get("ETag")
		}
		w.admin.JSON("PATCH", "/admin/v1/upstreams/"+w.upstream, map[string]any{"warmup_enabled": false}, 200, "If-Match", etag())
		w.admin.ConnectOAuth(w.upstream, "acct-crash")
		w.px.Stop()
		w.px.Opts.Env = map[string]string{"PROXY_FAILPOINTS": "after_dispatch"}
		w.px.Opts.Args = []string{"--scheduler-rescue-after", "3s"}
		w.px.Restart()
		w.admin.JSON("PATCH", "/admin/v1/upstreams/"+w.upstream, map[string]any{"warmup_enabled": true}, 200, "If-Match", etag())
		Eventually(w.px.Exited, 20*time.Second, 100*time.Millisecond).Should(BeTrue(), "the failpoint did not fire")
		Expect(w.warmups()).To(HaveLen(1))
		Expect(h.LogEvents(w.px.Proc, "action", "cycle_key_written")).To(BeEmpty())

		w.px.Opts.Env = nil
		w.px.Restart()
		// The rescued attempt runs again: it either repeats the one-token
		// call and writes the cycle key, or (when the usage poll already saw
		// the window the first call opened) skips without a call. Either way
		// the cycle chain goes on with the next attempt at the window's end.
		Eventually(func() int {
			return len(h.LogEvents(w.px.Proc, "target", "warmup", "action", "cycle_key_written")) +
				len(h.LogEvents(w.px.Proc, "target", "warmup", "outcome", "window_already_active"))
		}, 120*time.Second, 500*time.Millisecond).Should(Equal(1))
		Consistently(w.warmups, 3*time.Second, 500*time.Millisecond).Should(Or(HaveLen(1), HaveLen(2)))
		var next []map[string]any
		for _, j := range w.admin.Jobs("adaptive:warmup", "adaptive:warmup:"+w.upstream+":") {
			if j["state"] == "Pending" {
				next = append(next, j)
			}
		}
		Expect(next).To(HaveLen(1), "the next cycle is scheduled once")
	})
})

var _ = Describe("Usage poll and coupons", func() {
	It("polls once per upstream with cedar_ember=1, resolves the identity once and serves the stored observation", Label("P-USAGE-1", "P-USAGE-2", "P-USAGE-3", "P-USAGE-4", "P-UP-10"), func() {
		w := newOAuthWorld(nil, "--job-interval", "usage_poll=2s")
		obs := w.admin.JSON("GET", "/admin/v1/upstreams/"+w.upstream+"/limit-resets", nil, 200)
		Expect(obs["observed"]).To(BeFalse())
		Expect(obs["coupon"].(map[string]any)["available"]).To(BeFalse())

		w.sim.SetAccount("acct-poll", map[string]any{"coupon_available": true, "extra_usage_enabled": true})
		w.admin.ConnectOAuth(w.upstream, "acct-poll")
		Eventually(func() int { return w.sim.Counter("acct-poll", "usage_polls") }, 20*time.Second, 250*time.Millisecond).Should(BeNumerically(">=", 3))
		acct := w.sim.Account("acct-poll")
		Expect(acct["skip_spend_seen"]).To(BeFalse())
		Expect(acct["profile_requests"]).To(BeEquivalentTo(1), "identity resolved more than once for one credential version")
		for _, r := range w.sim.Requests() {
			if r.Path == "/api/oauth/usage" {
				Expect(r.RawQuery).To(Equal("cedar_ember=1"))
			}
		}
		obs = w.admin.JSON("GET", "/admin/v1/upstreams/"+w.upstream+"/limit-resets", nil, 200)
		Expect(obs["observed"]).To(BeTrue())
		Expect(obs["stale"]).To(BeFalse())
		Expect(obs["account_uuid"]).To(Equal(acct["uuid"]))
		Expect(obs["coupon"].(map[string]any)["available"]).To(BeTrue())
		Expect(obs["extra_usage"]).NotTo(BeNil())
		Expect(obs).To(HaveKey("five_hour"))
		Expect(obs).To(HaveKey("seven_day"))

		// Reading the observation never contacts the provider.
		polls := w.sim.Counter("acct-poll", "usage_polls")
		w.admin.JSON("GET", "/admin/v1/upstreams/"+w.upstream+"/limit-resets", nil, 200)
		Expect(w.sim.Counter("acct-poll", "usage_polls") - polls).To(BeNumerically("<=", 1)) // at most the background tick
	})

	It("claims a coupon with one provider POST and queues a poll", Label("P-COUPON-1", "P-COUPON-3"), func() {
		w := newOAuthWorld(nil, "--job-interval", "usage_poll=1h")
		w.sim.SetAccount("acct-claim", map[string]any{"coupon_available": true, "five_hour_utilization": 90})
		w.admin.ConnectOAuth(w.upstream, "acct-claim")
		Eventually(func() any {
			return w.admin.JSON("GET", "/admin/v1/upstreams/"+w.upstream+"/limit-resets", nil, 200)["coupon"].(map[string]any)["available"]
		}, 20*time.Second, 250*time.Millisecond).Should(BeTrue())
		polls := w.sim.Counter("acct-claim", "usage_polls")
		res := w.admin.JSON("POST", "/admin/v1/upstreams/"+w.upstream+"/limit-resets/claim", nil, 200)
		Expect(res["outcome"]).To(Equal("reset"))
		Expect(w.sim.Counter("acct-claim", "claims_applied")).To(Equal(1))
		Expect(w.sim.Counter("acct-claim", "claim_posts")).To(Equal(1))
		Expect(w.sim.Account("acct-claim")["five_hour"].(map[string]any)["utilization"]).To(BeEquivalentTo(0))
		// The successful reset queued a poll.
		Eventually(func() int { return w.sim.Counter("acct-claim", "usage_polls") }, 10*time.Second, 200*time.Millisecond).Should(BeNumerically(">", polls))
		w.admin.ExpectError("POST", "/admin/v1/upstreams/"+w.upstream+"/limit-resets/claim", nil, 409, "coupon_unavailable")
		Expect(w.sim.Counter("acct-claim", "claim_posts")).To(Equal(1))
	})

	It("keeps the fence when the claim's answer is lost and never repeats the POST", Label("P-COUPON-4"), func() {
		w := newOAuthWorld(nil, "--job-interval", "usage_poll=1s")
		w.sim.SetAccount("acct-lost", map[string]any{"coupon_available": true})
		w.admin.ConnectOAuth(w.upstream, "acct-lost")
		Eventually(func() any {
			return w.admin.JSON("GET", "/admin/v1/upstreams/"+w.upstream+"/limit-resets", nil, 200)["coupon"].(map[string]any)["available"]
		}, 20*time.Second, 250*time.Millisecond).Should(BeTrue())
		w.sim.Fault(map[string]any{"path": "/api/oauth/usage/limit_reset", "count": 1, "lost_response": true})
		w.admin.ExpectError("POST", "/admin/v1/upstreams/"+w.upstream+"/limit-resets/claim", nil, 502, "claim_outcome_unknown")
		// Polls keep running; within the recovery delay the fence holds.
		Consistently(func() map[string]any {
			return w.admin.JSON("GET", "/admin/v1/upstreams/"+w.upstream+"/limit-resets", nil, 200)["fence"].(map[string]any)
		}, 4*time.Second, 500*time.Millisecond).Should(HaveKeyWithValue("state", "claiming"))
		w.admin.ExpectError("POST", "/admin/v1/upstreams/"+w.upstream+"/limit-resets/claim", nil, 409, "coupon_unavailable")
		Expect(w.sim.Counter("acct-lost", "claim_posts")).To(Equal(1))
	})
})

var _ = Describe("Subscription routing", func() {
	It("prefers the subscription and falls back to an API-key upstream when its windows are exhausted", func() {
		w := newOAuthWorld(nil)
		w.admin.CreateUpstream("keyed", w.sim.URL, simKey)
		w.admin.ConnectOAuth(w.upstream, "acct-route")
		st, _, b := h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).To(Equal(200), string(b))
		last := func() h.Recorded {
			seen := w.sim.MessagesWith("hello proxy world")
			Expect(seen).NotTo(BeEmpty())
			return seen[len(seen)-1]
		}
		Expect(last().Header.Get("Authorization")).To(HavePrefix("Bearer "))
		w.sim.SetAccount("acct-route", map[string]any{"seven_day_utilization": 100})
		st, _, b = h.Messages(w.px.ProxyURL, body, "x-api-key", w.key)
		Expect(st).To(Equal(200), string(b))
		Expect(last().Header.Get("X-Api-Key")).To(Equal(simKey))
	})
})
