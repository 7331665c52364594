package dashboard_test

import (
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
	"github.com/pillarhq/pillar/sim/provider"
)

var _ = Describe("Dashboard cloud upstreams", func() {
	It("creates a Bedrock upstream with its region, keys and model map, shows the map, edits it, and never shows the secret key", func() {
		sim := h.StartSim(simKey)
		px := h.StartProxy(h.ProxyOptions{})
		a := px.Admin()
		ctx := browser()
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/"), chromedp.WaitVisible("#token", chromedp.ByID),
			chromedp.SendKeys("#token", px.Token, chromedp.ByID), submit("#signin-form"),
			chromedp.WaitVisible(`body[data-page="overview"]`, chromedp.ByQuery))

		show(ctx, px.AdminURL, "upstreams")
		run(ctx, chromedp.SetValue("#up-kind", "bedrock", chromedp.ByID),
			chromedp.Evaluate(`document.querySelector("#up-kind").dispatchEvent(new Event("change"))`, nil),
			chromedp.WaitVisible("#up-aws-id", chromedp.ByID))
		var saShown bool
		run(ctx, chromedp.Evaluate(`document.querySelector("#up-sa").getClientRects().length > 0`, &saShown))
		Expect(saShown).To(BeFalse(), "a Bedrock upstream takes no service account")
		run(ctx, chromedp.SendKeys("#up-name", "bedrock", chromedp.ByID), chromedp.SendKeys("#up-url", sim.URL, chromedp.ByID),
			chromedp.SendKeys("#up-region", "us-east-1", chromedp.ByID),
			chromedp.SendKeys("#up-aws-id", provider.DefaultAWSAccessKeyID, chromedp.ByID),
			chromedp.SendKeys("#up-aws-secret", provider.DefaultAWSSecretAccessKey, chromedp.ByID),
			chromedp.SendKeys("#up-models", "claude-sonnet-4-5=anthropic.claude-sonnet-4-5-20250929-v1:0", chromedp.ByID),
			submit("#upstream-create"))
		waitBanner(ctx, "Upstream bedrock created")
		summary := `[data-cloud-summary="bedrock"]`
		run(ctx, chromedp.WaitVisible(summary, chromedp.ByQuery))
		Expect(text(ctx, summary)).To(And(ContainSubstring("us-east-1"), ContainSubstring("claude-sonnet-4-5 → anthropic.claude-sonnet-4-5-20250929-v1:0")))
		Expect(text(ctx, `tr[data-upstream="bedrock"]`)).To(ContainSubstring("aws_keys"))
		screenshot(ctx, "cloud-01-bedrock")

		// The map is edited in place; the keys stay.
		run(ctx, chromedp.Click(`tr[data-upstream="bedrock"] button:nth-of-type(2)`, chromedp.ByQuery), chromedp.WaitVisible("#edit-models", chromedp.ByID))
		run(ctx, chromedp.SetValue("#edit-models", "claude-haiku-4-5=anthropic.claude-haiku-4-5-20251001-v1:0", chromedp.ByID), submit("#upstream-edit"))
		waitBanner(ctx, "Upstream bedrock saved")
		Eventually(func() string { return bodyText(ctx) }, 10*time.Second).Should(ContainSubstring("claude-haiku-4-5 → anthropic.claude-haiku-4-5-20251001-v1:0"))
		ups := getList(a, "/admin/v1/upstreams")
		Expect(ups).To(HaveLen(1))
		u := ups[0]
		Expect(u["model_map"]).To(Equal(map[string]any{"claude-haiku-4-5": "anthropic.claude-haiku-4-5-20251001-v1:0"}))
		Expect(u["credential_mode"]).To(Equal("aws_keys"))

		var html string
		run(ctx, chromedp.OuterHTML("html", &html, chromedp.ByQuery))
		Expect(strings.Contains(html, provider.DefaultAWSSecretAccessKey)).To(BeFalse(), "the secret key is not left in the page")
	})
})
