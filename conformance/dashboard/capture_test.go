package dashboard_test

import (
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

var _ = Describe("Dashboard captured exchanges", func() {
	It("creates a capturing principal from the form, marks its requests in the log, opens the bodies for an auditor and only marks them for a viewer", func() {
		sim := h.StartSim(simKey)
		px := h.StartProxy(h.ProxyOptions{})
		a := px.Admin()
		a.CreateUpstream("paid", sim.URL, simKey)
		ctx := browser()
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/"), chromedp.WaitVisible("#token", chromedp.ByID),
			chromedp.SendKeys("#token", px.Token, chromedp.ByID), submit("#signin-form"),
			chromedp.WaitVisible(`body[data-page="overview"]`, chromedp.ByQuery))

		// Created with the checkbox on: the API has it, the list marks it.
		show(ctx, px.AdminURL, "principals")
		run(ctx, chromedp.WaitVisible("#pr-capture", chromedp.ByID), chromedp.SendKeys("#pr-name", "audited", chromedp.ByID),
			chromedp.Click("#pr-capture", chromedp.ByID), submit("#principal-create"))
		waitBanner(ctx, "Principal audited created")
		run(ctx, chromedp.WaitVisible(`tr[data-principal="audited"] [data-capture="on"]`, chromedp.ByQuery))
		var id string
		for _, p := range getList(a, "/admin/v1/principals") {
			if p["name"] == "audited" {
				id = p["id"].(string)
				Expect(p["capture_exchanges"]).To(BeTrue())
			}
		}
		Expect(id).NotTo(BeEmpty())
		_, key := a.IssueKey(id)
		const prompt = "dashboard-capture-prompt-5e1d"
		st, _, _ := h.Messages(px.ProxyURL, `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"`+prompt+`"}]}`, "x-api-key", key)
		Expect(st).To(Equal(200))
		Eventually(func() any {
			evs := a.JSON("GET", "/admin/v1/request-log", nil, 200)["events"].([]any)
			if len(evs) == 0 {
				return nil
			}
			return evs[0].(map[string]any)["captured"]
		}, 20*time.Second, 200*time.Millisecond).Should(Equal(true))

		// An auditor opens the exchange from the log.
		auditor := a.JSON("POST", "/admin/v1/admin-tokens", map[string]any{"name": "aud", "role": "auditor", "expires_in_secs": 3600}, 201)["token"].(string)
		run(ctx, chromedp.Click("#signout", chromedp.ByID), chromedp.WaitVisible("#token", chromedp.ByID),
			chromedp.SendKeys("#token", auditor, chromedp.ByID), submit("#signin-form"),
			chromedp.WaitVisible(`body[data-page]`, chromedp.ByQuery))
		show(ctx, px.AdminURL, "requests")
		run(ctx, chromedp.WaitVisible(`button[data-exchange]`, chromedp.ByQuery), chromedp.Click(`button[data-exchange]`, chromedp.ByQuery),
			chromedp.WaitVisible("#exchange-request", chromedp.ByID))
		Expect(text(ctx, "#exchange-request")).To(ContainSubstring(prompt))
		Expect(text(ctx, "#exchange-response")).To(ContainSubstring(`"type":"message"`))
		Expect(exists(ctx, "#exchange-truncated")).To(BeFalse())
		screenshot(ctx, "capture-01-auditor-exchange")

		// A viewer sees the marker, but nothing to open.
		viewer := a.JSON("POST", "/admin/v1/admin-tokens", map[string]any{"name": "vic", "role": "viewer", "expires_in_secs": 3600}, 201)["token"].(string)
		run(ctx, chromedp.Click("#signout", chromedp.ByID), chromedp.WaitVisible("#token", chromedp.ByID),
			chromedp.SendKeys("#token", viewer, chromedp.ByID), submit("#signin-form"),
			chromedp.WaitVisible(`body[data-page="overview"]`, chromedp.ByQuery))
		show(ctx, px.AdminURL, "requests")
		run(ctx, chromedp.WaitVisible(`span.captured`, chromedp.ByQuery))
		Expect(exists(ctx, `button[data-exchange]`)).To(BeFalse())
		screenshot(ctx, "capture-02-viewer-marker")
	})
})
