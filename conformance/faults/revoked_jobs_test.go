package faults_test

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

// The background jobs after the provider refused an upstream's refresh
// grant: the revoked credential stays out of every one of them, as it is
// out of request routing (docs/resilience.md).

// jobsEnded counts the finished runs of a job type, whatever their end.
func jobsEnded(a *h.Admin, jobType string) float64 {
	GinkgoHelper()
	n := 0.0
	for _, st := range []string{"done", "noop", "skip", "retry", "panicked"} {
		n += a.Metric("svc_scheduler_jobs_total", "job_type", jobType, "status", st)
	}
	return n
}

// credentialed lists the requests that carry a credential of any kind:
// an access token, an API key, or a grant sent to the token endpoint.
func credentialed(rs []h.Recorded) []string {
	var out []string
	for _, r := range rs {
		if r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != "" || strings.HasPrefix(r.Path, "/v1/oauth/token") {
			out = append(out, r.Path)
		}
	}
	return out
}

var _ = Describe("OAuth refresh grant refused: background jobs", func() {
	// The periodic jobs that reach the provider tick every second (the
	// OAuth watchdog every two).
	periodic := []string{"usage_poll", "warmup_watchdog", "metadata_refresh", "oauth_watchdog"}
	for _, d := range drivers {
		It("sends the revoked credential from no background job: usage poll, warm-up, metadata refresh, coupon claim ("+d.name+")", func() {
			w := newOAuthFaultWorld(d, "acct-quiet-"+d.name, "6s",
				"--job-interval", "usage_poll=1s", "--job-interval", "warmup_watchdog=1s", "--job-interval", "metadata_refresh=1s")
			// Connected, the jobs do reach the provider with the token: the
			// observation below can see them.
			Eventually(func() []string { return credentialed(w.sim.Requests()) }, 10*time.Second, 100*time.Millisecond).
				Should(ContainElements("/api/oauth/usage", "/v1/models"))
			Expect(w.status()).To(And(HaveKeyWithValue("routable", true), HaveKeyWithValue("unroutable_reason", BeNil())))

			Expect(simControl("POST", w.sim.URL+"/_sim/oauth/revoke", `{"account":"`+w.account+`"}`)).To(Equal(204))
			Eventually(w.status, 30*time.Second, 200*time.Millisecond).Should(And(
				HaveKeyWithValue("routable", false), HaveKeyWithValue("unroutable_reason", "refresh_refused")))
			waitApplied(w.admin)
			// A run that read the upstream before the refusal may still be
			// in flight: one more finished run of each type closes them.
			settled := map[string]float64{}
			for _, t := range periodic {
				settled[t] = jobsEnded(w.admin, t)
			}
			for _, t := range periodic {
				Eventually(func() float64 { return jobsEnded(w.admin, t) }, 20*time.Second, 100*time.Millisecond).Should(BeNumerically(">", settled[t]), t)
			}
			mark := len(w.sim.Requests())
			for _, t := range periodic {
				settled[t] = jobsEnded(w.admin, t)
			}

			// The operator turns warm-up on (answered as on any connected
			// upstream) and tries the coupon: neither sends anything.
			_, hd, _ := w.admin.Do("GET", "/admin/v1/upstreams/"+w.upstream, nil)
			Expect(w.admin.JSON("PATCH", "/admin/v1/upstreams/"+w.upstream, map[string]any{"warmup_enabled": true}, 200, "If-Match", hd.Get("ETag"))).
				To(HaveKeyWithValue("warmup_enabled", true))
			Eventually(func() float64 {
				return w.admin.Metric("svc_scheduler_jobs_total", "job_type", "adaptive:warmup", "status", "noop")
			}, 20*time.Second, 100*time.Millisecond).
				Should(BeNumerically(">=", 1))
			st, _, b := w.admin.Do("POST", "/admin/v1/upstreams/"+w.upstream+"/limit-resets/claim", nil)
			Expect(st).To(Equal(409), string(b))
			Expect(string(b)).To(And(ContainSubstring(`"coupon_unavailable"`), ContainSubstring("run the OAuth flow again")))

			// Three more finished runs of every periodic job.
			for _, t := range periodic {
				Eventually(func() float64 { return jobsEnded(w.admin, t) }, 30*time.Second, 100*time.Millisecond).Should(BeNumerically(">=", settled[t]+3), t)
			}
			after := w.sim.Requests()[mark:]
			Expect(credentialed(after)).To(BeEmpty(), fmt.Sprintf("%d requests reached the provider with the revoked credential", len(credentialed(after))))
			Expect(w.admin.Metric("svc_scheduler_metadata_refresh_status_total", "status", "refresh_refused")).To(BeNumerically(">=", 3))
			Expect(h.LogEvents(w.px.Proc, "action", "attempt_skipped", "outcome", "refresh_refused", "upstream_id", w.upstream)).NotTo(BeEmpty())

			// The flow run again: the jobs use the new credential.
			w.admin.ConnectOAuth(w.upstream, w.account)
			Eventually(w.status, 10*time.Second, 200*time.Millisecond).Should(HaveKeyWithValue("routable", true))
			Eventually(func() []string { return credentialed(w.sim.Requests()[mark:]) }, 20*time.Second, 100*time.Millisecond).
				Should(ContainElements("/api/oauth/usage", "/v1/models"))
		})
	}
})
