package dashboard_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
	"github.com/pillarhq/pillar/sim/idp"
)

// navShown lists the navigation links the page shows.
func navShown(ctx context.Context) []string {
	var out []string
	run(ctx, chromedp.Evaluate(`[...document.querySelectorAll("nav a")].filter(a => !a.hidden).map(a => a.getAttribute("href"))`, &out))
	return out
}

func exists(ctx context.Context, sel string) bool {
	var ok bool
	run(ctx, chromedp.Evaluate(`document.querySelector(`+"`"+sel+"`"+`) !== null`, &ok))
	return ok
}

// ssoSignIn signs in through the issuer's button and waits for the
// dashboard's first page.
func ssoSignIn(ctx context.Context, base string, is *idp.Issuer, subject string) {
	is.SignInAs(subject)
	run(ctx) // the first Run opens the tab: on ctx, not on a step's shorter one
	step := func(name string, actions ...chromedp.Action) {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Run(sctx, actions...); err != nil {
			var loc string
			_ = chromedp.Run(ctx, chromedp.Location(&loc))
			screenshot(ctx, "sso-failed-"+subject+"-"+name)
			Fail(fmt.Sprintf("sign-in of %s, %s: %v (at %s: %s)", subject, name, err, loc, bodyText(ctx)))
		}
	}
	step("button", chromedp.Navigate(base+"/dashboard/"), chromedp.WaitVisible("#sso-login", chromedp.ByID))
	step("flow", chromedp.Click("#sso-login", chromedp.ByID), chromedp.WaitVisible("#nav", chromedp.ByID),
		chromedp.WaitVisible(`body[data-page]`, chromedp.ByQuery))
}

func signOutUI(ctx context.Context) {
	run(ctx, chromedp.Click("#signout", chromedp.ByID), chromedp.WaitVisible("#sso-login", chromedp.ByID))
}

var _ = Describe("Dashboard sign-in through an OIDC issuer", func() {
	It("signs people in through the issuer and offers each role only what it may do", func() {
		is := idp.New()
		isrv := httptest.NewServer(is)
		DeferCleanup(isrv.Close)
		is.SetIssuer(isrv.URL)
		adminAddr := h.FreeAddr()
		base := "http://" + adminAddr
		is.AddClient(idp.Client{ID: "pillar", Secret: "idp-client-secret", RedirectURIs: []string{base + "/auth/callback"}})
		for sub, g := range map[string]string{"alice": "pillar-admins", "vic": "pillar-viewers", "audrey": "pillar-audit"} {
			is.AddUser(idp.User{Subject: sub, Email: sub + "@example.com", Groups: []string{g}})
		}
		dir := GinkgoT().TempDir()
		cfg := filepath.Join(dir, "proxy.yaml")
		Expect(os.WriteFile(cfg, []byte(`admin:
  auth:
    oidc:
      issuer: `+isrv.URL+`
      client_id: pillar
      client_secret_env: IDP_CLIENT_SECRET
      redirect_url: `+base+`/auth/callback
      roles: {pillar-admins: admin, pillar-viewers: viewer, pillar-audit: auditor}
`), 0o600)).To(Succeed())
		px := h.StartProxy(h.ProxyOptions{Dir: dir, AdminAddr: adminAddr, Args: []string{"--config", cfg}, Env: map[string]string{"IDP_CLIENT_SECRET": "idp-client-secret"}})
		ctx := browser()

		// An admin signs in, sees every section, changes something.
		ssoSignIn(ctx, px.AdminURL, is, "alice")
		Expect(text(ctx, "#who")).To(ContainSubstring("alice@example.com · admin"))
		Expect(navShown(ctx)).To(ContainElements("#/upstreams", "#/requests", "#/audit"))
		show(ctx, px.AdminURL, "principals")
		Expect(exists(ctx, "#principal-create")).To(BeTrue())
		run(ctx, chromedp.SendKeys("#pr-name", "made-by-alice", chromedp.ByID), submit("#principal-create"))
		waitBanner(ctx, "Principal made-by-alice created")
		screenshot(ctx, "sso-01-admin")
		signOutUI(ctx)

		// A viewer reads the same pages without a single control that
		// changes something, and no audit section.
		ssoSignIn(ctx, px.AdminURL, is, "vic")
		Expect(text(ctx, "#who")).To(ContainSubstring("viewer"))
		Expect(navShown(ctx)).NotTo(ContainElement("#/audit"))
		for _, page := range []string{"upstreams", "principals", "plugins"} {
			show(ctx, px.AdminURL, page)
			Expect(exists(ctx, "main form:not([data-read]), main button:not([data-read])")).To(BeFalse(), page)
		}
		Expect(bodyText(ctx)).NotTo(ContainSubstring("Delete"))
		show(ctx, px.AdminURL, "principals")
		Expect(bodyText(ctx)).To(ContainSubstring("made-by-alice"))
		screenshot(ctx, "sso-02-viewer")
		// Opening the audit page by its address is not offered either.
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/#/audit"))
		Eventually(func() string { return bodyText(ctx) }, 10*time.Second).Should(ContainSubstring("not available to your role"))
		signOutUI(ctx)

		// An auditor sees the requests and the audit trail only, and the
		// trail names the admin who made the change, through the issuer.
		ssoSignIn(ctx, px.AdminURL, is, "audrey")
		Expect(navShown(ctx)).To(ConsistOf("#/requests", "#/audit"))
		show(ctx, px.AdminURL, "audit")
		Eventually(func() string { return bodyText(ctx) }, 10*time.Second).Should(And(ContainSubstring("alice"), ContainSubstring("principal"), ContainSubstring(isrv.URL)))
		Expect(strings.Count(bodyText(ctx), "idp-client-secret")).To(BeZero())
		screenshot(ctx, "sso-03-auditor")
		signOutUI(ctx)
	})
})
