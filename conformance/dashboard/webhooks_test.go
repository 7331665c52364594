package dashboard_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
	"github.com/pillarhq/pillar/impl/gateway/webhook"
)

var _ = Describe("Dashboard alert webhooks", func() {
	It("lets an operator create a webhook with a write-only secret, send it a signed test and see the delivery; viewers get no page", func() {
		const secret = "whsec-dashboard-0123"
		var mu sync.Mutex
		var verified []error
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			verified = append(verified, webhook.Verify([]byte(secret), r.Header.Get(webhook.SignatureHeader), b, time.Now(), time.Minute))
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		}))
		DeferCleanup(recv.Close)
		px := h.StartProxy(h.ProxyOptions{})
		a := px.Admin()
		operator := a.JSON("POST", "/admin/v1/admin-tokens", map[string]any{"name": "op", "role": "operator", "expires_in_secs": 3600}, 201)["token"].(string)
		ctx := browser()
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/"), chromedp.WaitVisible("#token", chromedp.ByID),
			chromedp.SendKeys("#token", operator, chromedp.ByID), submit("#signin-form"),
			chromedp.WaitVisible(`body[data-page="overview"]`, chromedp.ByQuery))
		Expect(navShown(ctx)).To(ContainElement("#/webhooks"))
		show(ctx, px.AdminURL, "webhooks")
		run(ctx, chromedp.WaitVisible("#webhook-empty", chromedp.ByID), chromedp.WaitVisible("#alerts-none", chromedp.ByID))

		run(ctx, chromedp.SendKeys("#wh-name", "ops", chromedp.ByID), chromedp.SendKeys("#wh-url", recv.URL+"/hook", chromedp.ByID),
			chromedp.SendKeys("#wh-secret", secret, chromedp.ByID),
			chromedp.Click(`input[data-condition="principal_budget_exhausted"]`, chromedp.ByQuery), submit("#webhook-form"))
		waitBanner(ctx, "Webhook ops saved")
		row := `tr[data-webhook="ops"]`
		run(ctx, chromedp.WaitVisible(row, chromedp.ByQuery))
		Expect(text(ctx, row)).To(And(ContainSubstring("principal_budget_exhausted"), ContainSubstring(recv.URL)))
		ws := getList(a, "/admin/v1/webhooks", "webhooks")
		Expect(ws).To(HaveLen(1))
		Expect(ws[0]["secret_set"]).To(BeTrue())
		var html string
		run(ctx, chromedp.OuterHTML("html", &html, chromedp.ByQuery))
		Expect(html).NotTo(ContainSubstring(secret))

		// Send test: the receiver gets it signed; the delivery is listed.
		run(ctx, chromedp.Click(row+` button:nth-of-type(3)`, chromedp.ByQuery))
		waitBanner(ctx, "A test event is on its way to ops")
		Eventually(func() []error { mu.Lock(); defer mu.Unlock(); return append([]error(nil), verified...) }, 20*time.Second).Should(Equal([]error{nil}))
		Eventually(func() string {
			run(ctx, chromedp.Click(row+` button:nth-of-type(1)`, chromedp.ByQuery))
			return text(ctx, "#webhook-deliveries")
		}, 20*time.Second, 200*time.Millisecond).Should(And(ContainSubstring("test:"), ContainSubstring("Done")))
		docScreenshot(ctx, "webhooks")

		// A viewer gets no Webhooks link, and the address says no.
		viewer := a.JSON("POST", "/admin/v1/admin-tokens", map[string]any{"name": "vic", "role": "viewer", "expires_in_secs": 3600}, 201)["token"].(string)
		run(ctx, chromedp.Click("#signout", chromedp.ByID), chromedp.WaitVisible("#token", chromedp.ByID),
			chromedp.SendKeys("#token", viewer, chromedp.ByID), submit("#signin-form"),
			chromedp.WaitVisible(`body[data-page="overview"]`, chromedp.ByQuery))
		Expect(navShown(ctx)).NotTo(ContainElement("#/webhooks"))
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/#/webhooks"))
		Eventually(func() string { return bodyText(ctx) }, 10*time.Second).Should(ContainSubstring("not available to your role"))
	})
})
