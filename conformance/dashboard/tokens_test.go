package dashboard_test

import (
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

var _ = Describe("Dashboard scoped admin tokens", func() {
	It("lets an admin create a token shown once that works with its role, revoke it, and hides the page from other roles", func() {
		px := h.StartProxy(h.ProxyOptions{})
		a := px.Admin()
		ctx := browser()
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/"), chromedp.WaitVisible("#token", chromedp.ByID),
			chromedp.SendKeys("#token", px.Token, chromedp.ByID), submit("#signin-form"),
			chromedp.WaitVisible(`body[data-page="overview"]`, chromedp.ByQuery))
		Expect(navShown(ctx)).To(ContainElement("#/tokens"))

		// Create a viewer token: its plaintext is shown once, the list has it.
		show(ctx, px.AdminURL, "tokens")
		run(ctx, chromedp.WaitVisible("#admin-token-empty", chromedp.ByID))
		run(ctx, chromedp.SendKeys("#at-name", "ci-viewer", chromedp.ByID), chromedp.SetValue("#at-role", "viewer", chromedp.ByID),
			chromedp.SetValue("#at-expiry", "86400", chromedp.ByID), submit("#admin-token-create"),
			chromedp.WaitVisible("#new-token", chromedp.ByID))
		tok := text(ctx, "#new-token")
		Expect(tok).To(HavePrefix("pat-"))
		Expect(text(ctx, "#issued-token")).To(ContainSubstring("shown exactly once"))
		row := `tr[data-admin-token="ci-viewer"]`
		run(ctx, chromedp.WaitVisible(row, chromedp.ByQuery))
		Expect(text(ctx, row)).To(And(ContainSubstring("viewer"), ContainSubstring("active"), ContainSubstring(tok[:12]), ContainSubstring("break-glass")))
		Expect(text(ctx, row)).NotTo(ContainSubstring(tok))
		screenshot(ctx, "tokens-01-created")

		// The token reads but does not change anything: it is a viewer's.
		bot := &h.Admin{Base: px.AdminURL, Token: tok}
		Expect(bot.JSON("GET", "/admin/v1/me", nil, 200)["role"]).To(Equal("viewer"))
		Expect(status(bot, "GET", "/admin/v1/upstreams")).To(Equal(200))
		bot.ExpectError("POST", "/admin/v1/principals", map[string]any{"name": "by-bot"}, 403, "forbidden")
		Expect(getList(a, "/admin/v1/principals")).To(BeEmpty())

		// Hidden, and not shown again by the page when it is drawn anew.
		run(ctx, chromedp.Click("#hide-token", chromedp.ByID))
		Eventually(func() string { return bodyText(ctx) }, 10*time.Second).ShouldNot(ContainSubstring(tok))
		show(ctx, px.AdminURL, "overview")
		show(ctx, px.AdminURL, "tokens")
		run(ctx, chromedp.WaitVisible(row, chromedp.ByQuery))
		var html string
		run(ctx, chromedp.OuterHTML("html", &html, chromedp.ByQuery))
		Expect(strings.Contains(html, tok)).To(BeFalse())
		docScreenshot(ctx, "tokens")

		// Revoke asks first; Cancel keeps the token working.
		run(ctx, chromedp.Click(row+` button`, chromedp.ByQuery), chromedp.WaitVisible("#confirm-revoke", chromedp.ByID))
		Expect(text(ctx, "#admin-token-revoke")).To(ContainSubstring("Revoke ci-viewer"))
		run(ctx, chromedp.Click("#cancel-revoke", chromedp.ByID))
		Expect(exists(ctx, "#confirm-revoke")).To(BeFalse())
		Expect(status(bot, "GET", "/admin/v1/upstreams")).To(Equal(200))
		run(ctx, chromedp.Click(row+` button`, chromedp.ByQuery), chromedp.WaitVisible("#confirm-revoke", chromedp.ByID))
		screenshot(ctx, "tokens-02-confirm-revoke")
		run(ctx, chromedp.Click("#confirm-revoke", chromedp.ByID))
		waitBanner(ctx, "Token ci-viewer revoked")
		Eventually(func() string { return text(ctx, row) }, 10*time.Second).Should(ContainSubstring("revoked"))
		Expect(exists(ctx, row+` button`)).To(BeFalse())
		bot.ExpectError("GET", "/admin/v1/upstreams", nil, 401, "unauthorized")
		screenshot(ctx, "tokens-03-revoked")

		// A viewer signed in sees no Tokens link, and the address says no.
		viewer := a.JSON("POST", "/admin/v1/admin-tokens", map[string]any{"name": "vic", "role": "viewer", "expires_in_secs": 3600}, 201)["token"].(string)
		run(ctx, chromedp.Click("#signout", chromedp.ByID), chromedp.WaitVisible("#token", chromedp.ByID),
			chromedp.SendKeys("#token", viewer, chromedp.ByID), submit("#signin-form"),
			chromedp.WaitVisible(`body[data-page="overview"]`, chromedp.ByQuery))
		Expect(text(ctx, "#who")).To(ContainSubstring("viewer"))
		Expect(navShown(ctx)).NotTo(ContainElement("#/tokens"))
		Expect(navShown(ctx)).To(ContainElement("#/upstreams"))
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/#/tokens"))
		Eventually(func() string { return bodyText(ctx) }, 10*time.Second).Should(ContainSubstring("not available to your role"))
		Expect(exists(ctx, "#admin-token-create")).To(BeFalse())
	})
})

func status(a *h.Admin, method, path string) int {
	st, _, _ := a.Do(method, path, nil)
	return st
}
