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
