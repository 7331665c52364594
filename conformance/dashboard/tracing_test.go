package dashboard_test

import (
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
	"github.com/pillarhq/pillar/impl/testing/otlptest"
)

var _ = Describe("Dashboard tracing note", func() {
	It("says on the overview that this replica exports traces, where and how many", func() {
		endpoint := otlptest.StartHTTP(GinkgoT(), otlptest.NewCollector())
		px := h.StartProxy(h.ProxyOptions{Args: []string{"--tracing-enabled", "--tracing-protocol", "http", "--tracing-endpoint", endpoint,
			"--tracing-sampler-ratio", "0.05"}})
		ctx := browser()
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/"), chromedp.WaitVisible("#token", chromedp.ByID))
		run(ctx, chromedp.SendKeys("#token", px.Token, chromedp.ByID), submit("#signin-form"),
			chromedp.WaitVisible(`body[data-page="overview"]`, chromedp.ByQuery))
		Eventually(func() string { return text(ctx, "#tracing-note") }, 10*time.Second).Should(
			Equal("Tracing: on, OTLP/http to " + endpoint + ", 5% of new traces sampled, traceparent passed upstream."))
		screenshot(ctx, "tracing-overview")
	})
})
