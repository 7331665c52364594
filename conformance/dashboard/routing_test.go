package dashboard_test

import (
	"net/http"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

var _ = Describe("Dashboard upstream routing state", func() {
	It("shows a viewer that an upstream whose refresh grant was refused is out of routing", func() {
		sim := h.StartSimWith([]string{"--oauth-token-ttl", "4s"}, simKey)
		px := h.StartProxy(h.ProxyOptions{Args: []string{"--oauth-refresh-retry-base", "100ms", "--job-interval", "oauth_watchdog=1s"}})
		a := px.Admin()
		sub := a.CreateOAuthUpstream("sub", sim)
		a.ConnectOAuth(sub, "acct-dash-routing")
		a.CreateUpstream("paid", sim.URL, simKey)
		viewer := a.JSON("POST", "/admin/v1/admin-tokens", map[string]any{"name": "viewer-bot", "role": "viewer", "expires_in_secs": 3600}, 201)["token"].(string)

		ctx := browser()
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/"), chromedp.WaitVisible("#token", chromedp.ByID),
			chromedp.SendKeys("#token", viewer, chromedp.ByID), submit("#signin-form"),
			chromedp.WaitVisible(`body[data-page="overview"]`, chromedp.ByQuery))
		show(ctx, px.AdminURL, "upstreams")
		run(ctx, chromedp.WaitVisible(`tr[data-upstream="sub"]`, chromedp.ByQuery))
		Expect(exists(ctx, `tr[data-upstream="sub"] [data-unroutable]`)).To(BeFalse())

		// The provider revokes the account: the refresh (due at half the
		// token's life) is refused.
		res, err := http.Post(sim.URL+"/_sim/oauth/revoke", "application/json", strings.NewReader(`{"account":"acct-dash-routing"}`))
		Expect(err).NotTo(HaveOccurred())
		res.Body.Close()
		Expect(res.StatusCode).To(Equal(204))
		Eventually(func() any {
			return a.JSON("GET", "/admin/v1/upstreams/"+sub, nil, 200)["status"].(map[string]any)["unroutable_reason"]
		}, 30*time.Second, 200*time.Millisecond).Should(Equal("refresh_refused"))
		// From the upstreams page: each navigation renders anew.
		for _, page := range []string{"overview", "upstreams"} {
			show(ctx, px.AdminURL, page)
			sel := `tr[data-upstream="sub"] [data-unroutable="refresh_refused"]`
			run(ctx, chromedp.WaitVisible(sel, chromedp.ByQuery))
			Expect(text(ctx, sel)).To(And(ContainSubstring("out of routing"), ContainSubstring("run the OAuth flow again")), page)
			Expect(exists(ctx, `tr[data-upstream="paid"] [data-unroutable]`)).To(BeFalse(), page)
		}
	})
})

var _ = Describe("Dashboard routing settings", func() {
	It("lets an admin set an upstream's weight and usage thresholds on its form, shows them in the routing column, and creates a principal with a cap in flight", func() {
		sim := h.StartSim(simKey)
		px := h.StartProxy(h.ProxyOptions{})
		a := px.Admin()
		id := a.CreateUpstream("paid", sim.URL, simKey)
		ctx := browser()
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/"), chromedp.WaitVisible("#token", chromedp.ByID),
			chromedp.SendKeys("#token", px.Token, chromedp.ByID), submit("#signin-form"),
			chromedp.WaitVisible(`body[data-page="overview"]`, chromedp.ByQuery))
		show(ctx, px.AdminURL, "upstreams")
		run(ctx, chromedp.WaitVisible(`tr[data-upstream="paid"]`, chromedp.ByQuery))
		run(ctx, chromedp.Click(`tr[data-upstream="paid"] td:last-child button:nth-child(2)`, chromedp.ByQuery), chromedp.WaitVisible("#edit-weight", chromedp.ByID))
		run(ctx, chromedp.SetValue("#edit-weight", "3", chromedp.ByID), chromedp.SetValue("#edit-max5h", "80", chromedp.ByID),
			chromedp.SetValue("#edit-max7d", "95", chromedp.ByID), submit("#upstream-edit"))
		waitBanner(ctx, "Upstream paid saved")
		u := a.JSON("GET", "/admin/v1/upstreams/"+id, nil, 200)
		Expect(u["weight"]).To(Equal(float64(3)))
		Expect(u["max_utilization_5h"]).To(Equal(float64(80)))
		Expect(u["max_utilization_7d"]).To(Equal(float64(95)))

		// A threshold out of range is refused with the API's code; nothing changes.
		run(ctx, chromedp.Click(`tr[data-upstream="paid"] td:last-child button:nth-child(2)`, chromedp.ByQuery), chromedp.WaitVisible("#edit-max7d", chromedp.ByID))
		run(ctx, chromedp.SetAttributeValue("#edit-max7d", "max", "1000", chromedp.ByID), chromedp.SetValue("#edit-max7d", "150", chromedp.ByID), submit("#upstream-edit"))
		waitBanner(ctx, "invalid_request")
		Expect(a.JSON("GET", "/admin/v1/upstreams/"+id, nil, 200)["max_utilization_7d"]).To(Equal(float64(95)))

		show(ctx, px.AdminURL, "overview")
		run(ctx, chromedp.WaitVisible(`tr[data-upstream="paid"] .thresholds`, chromedp.ByQuery))
		Expect(text(ctx, `tr[data-upstream="paid"] .routing`)).To(And(ContainSubstring("weight 3"), ContainSubstring("0 sessions"),
			ContainSubstring("5h ≤ 80%"), ContainSubstring("7d ≤ 95%")))

		// A principal capped at 4 requests in flight, created from the form.
		show(ctx, px.AdminURL, "principals")
		run(ctx, chromedp.WaitVisible("#pr-cap", chromedp.ByID), chromedp.SendKeys("#pr-name", "fan-out", chromedp.ByID),
			chromedp.SendKeys("#pr-cap", "4", chromedp.ByID), submit("#principal-create"))
		waitBanner(ctx, "Principal fan-out created")
		run(ctx, chromedp.WaitVisible(`tr[data-principal="fan-out"]`, chromedp.ByQuery))
		Expect(text(ctx, `tr[data-principal="fan-out"]`)).To(ContainSubstring("at most 4 in flight"))
		var capped any
		for _, p := range getList(a, "/admin/v1/principals") {
			if p["name"] == "fan-out" {
				capped = p["max_in_flight"]
			}
		}
		Expect(capped).To(Equal(float64(4)))
	})
})
