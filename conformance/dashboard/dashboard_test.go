package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

func TestDashboard(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Dashboard in a real browser")
}

const simKey = "sk-sim-dashboard-upstream"

// browser starts headless Chromium (Debian's package, installed by
// scripts/setup.sh) driven over the DevTools protocol.
func browser() context.Context {
	path, err := exec.LookPath("chromium")
	if err != nil {
		Fail("chromium is not installed: scripts/setup.sh installs Debian's chromium package")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	DeferCleanup(func() { cancelC(); cancelA() })
	ctx, cancelT := context.WithTimeout(ctx, 4*time.Minute)
	DeferCleanup(cancelT)
	return ctx
}

func artifacts() string {
	dir := os.Getenv("ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(h.ModuleRoot(), "bin", "artifacts", "dashboard")
	}
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	return dir
}

func screenshot(ctx context.Context, name string) {
	var png []byte
	Expect(chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100))).To(Succeed())
	Expect(os.WriteFile(filepath.Join(artifacts(), name+".png"), png, 0o644)).To(Succeed())
}

func run(ctx context.Context, actions ...chromedp.Action) {
	ExpectWithOffset(1, chromedp.Run(ctx, actions...)).To(Succeed())
}

func text(ctx context.Context, sel string) string {
	var s string
	run(ctx, chromedp.Text(sel, &s, chromedp.ByQuery))
	return s
}

func bodyText(ctx context.Context) string { return text(ctx, "body") }

func waitBanner(ctx context.Context, want string) {
	EventuallyWithOffset(1, func() string {
		var s string
		_ = chromedp.Run(ctx, chromedp.Text("#banner", &s, chromedp.ByQuery))
		return s
	}, 20*time.Second, 200*time.Millisecond).Should(ContainSubstring(want))
}

var _ = Describe("Dashboard", func() {
	It("signs in, manages upstreams, principals, keys and plugins, shows traffic and 409s, never shows a secret twice", func() {
		sim := h.StartSim(simKey)
		px := h.StartProxy(h.ProxyOptions{Args: []string{"--job-interval", "usage_rollup=2s"}})
		a := px.Admin()
		ctx := browser()

		// Sign in with the admin token.
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/"), chromedp.WaitVisible("#token", chromedp.ByID))
		screenshot(ctx, "01-signin")
		run(ctx, chromedp.SendKeys("#token", px.Token, chromedp.ByID), submit("#signin-form"),
			chromedp.WaitVisible("#nav", chromedp.ByID), chromedp.WaitVisible("#upstream-create", chromedp.ByID))

		// Create an API-key upstream.
		run(ctx, chromedp.SendKeys("#up-name", "sim", chromedp.ByID), chromedp.SendKeys("#up-url", sim.URL, chromedp.ByID),
			chromedp.SendKeys("#up-key", simKey, chromedp.ByID), submit("#upstream-create"))
		waitBanner(ctx, "Upstream sim created")
		run(ctx, chromedp.WaitVisible(`tr[data-upstream="sim"]`, chromedp.ByQuery))
		screenshot(ctx, "02-upstreams")

		// Create a principal and issue a key: shown once, then gone.
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/#/principals"), chromedp.WaitVisible("#principal-create", chromedp.ByID))
		run(ctx, chromedp.SendKeys("#pr-name", "app", chromedp.ByID), chromedp.SendKeys("#pr-rpm", "120", chromedp.ByID), submit("#principal-create"))
		waitBanner(ctx, "Principal app created")
		// The list re-renders after the banner: read the page, not a row
		// that may be replaced under the query.
		Eventually(func() string { return bodyText(ctx) }, 10*time.Second).Should(ContainSubstring("120 requests / 60s"))
		run(ctx, chromedp.Click(`tr[data-principal="app"] button`, chromedp.ByQuery), chromedp.WaitVisible("#issue-key", chromedp.ByID),
			chromedp.Click("#issue-key", chromedp.ByID), chromedp.WaitVisible("#new-key", chromedp.ByID))
		key := text(ctx, "#new-key")
		Expect(key).To(HavePrefix("sk-px-"))
		Expect(bodyText(ctx)).To(ContainSubstring("shown exactly once"))
		screenshot(ctx, "03-key-issued")
		run(ctx, chromedp.Click("#hide-key", chromedp.ByID))
		Eventually(func() string { return bodyText(ctx) }, 10*time.Second).ShouldNot(ContainSubstring(key))
		screenshot(ctx, "04-principal")

		// Use the key through the proxy; the request shows in the traffic view.
		st, _, b := h.Messages(px.ProxyURL, `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hello dashboard"}]}`, "x-api-key", key)
		Expect(st).To(Equal(200), string(b))
		Eventually(func() string {
			run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/#/traffic"), chromedp.Reload())
			run(ctx, chromedp.SendKeys("#token", px.Token, chromedp.ByID), submit("#signin-form"), chromedp.WaitVisible("#nav", chromedp.ByID))
			time.Sleep(300 * time.Millisecond)
			return bodyText(ctx)
		}, 60*time.Second, time.Second).Should(And(ContainSubstring("claude-sonnet-4-5"), ContainSubstring("Requests per hour")))
		Expect(bodyText(ctx)).NotTo(ContainSubstring("No rollups yet"))
		screenshot(ctx, "05-traffic")

		// A concurrent change: the edit gets a 409, the latest version is shown, the
		// operator re-applies.
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/#/upstreams"), chromedp.WaitVisible(`tr[data-upstream="sim"]`, chromedp.ByQuery))
		run(ctx, chromedp.Click(`tr[data-upstream="sim"] td:last-child button:nth-child(2)`, chromedp.ByQuery), chromedp.WaitVisible("#edit-name", chromedp.ByID))
		var id string
		for _, u := range getList(a, "/admin/v1/upstreams") {
			if u["name"] == "sim" {
				id = u["id"].(string)
			}
		}
		_, hd, _ := a.Do("GET", "/admin/v1/upstreams/"+id, nil)
		a.JSON("PATCH", "/admin/v1/upstreams/"+id, map[string]any{"base_url": sim.URL + "/"}, 200, "If-Match", hd.Get("ETag"))
		run(ctx, chromedp.SetValue("#edit-name", "sim-renamed", chromedp.ByID), submit("#upstream-edit"))
		waitBanner(ctx, "stale_revision")
		run(ctx, chromedp.WaitVisible(".conflict", chromedp.ByQuery))
		Expect(text(ctx, ".conflict")).To(ContainSubstring("changed since you read it"))
		screenshot(ctx, "06-conflict")
		run(ctx, chromedp.Click(".conflict button", chromedp.ByQuery))
		waitBanner(ctx, "Upstream sim-renamed saved")

		// Upload a plugin, bind it, delete it with its references.
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/#/plugins"), chromedp.WaitVisible("#plugin-upload", chromedp.ByID))
		run(ctx, chromedp.SetUploadFiles("#plugin-file", []string{h.Bin("plugins/pinrouter.wasm")}, chromedp.ByID),
			chromedp.SendKeys("#plugin-name", "pin", chromedp.ByID), chromedp.SendKeys("#plugin-version", "1", chromedp.ByID),
			submit("#plugin-upload"))
		waitBanner(ctx, "Plugin uploaded")
		run(ctx, chromedp.WaitVisible(`tr[data-plugin="pin"]`, chromedp.ByQuery))
		reg := getList(a, "/admin/v1/plugins/registry", "entries")[0]
		var pid string
		for _, p := range getList(a, "/admin/v1/principals") {
			if p["name"] == "app" {
				pid = p["id"].(string)
			}
		}
		a.JSON("POST", "/admin/v1/principals/"+pid+"/plugin-chain", map[string]any{"slot": "router", "wasm_registry_id": reg["id"]}, 201)
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/#/scheduler"), chromedp.Navigate(px.AdminURL+"/dashboard/#/plugins"),
			chromedp.WaitVisible(`tr[data-plugin="pin"]`, chromedp.ByQuery))
		Expect(text(ctx, `tr[data-plugin="pin"]`)).To(ContainSubstring("router"))
		screenshot(ctx, "07-plugins")
		run(ctx, chromedp.Click(`tr[data-plugin="pin"] button`, chromedp.ByQuery), chromedp.WaitVisible("#impact", chromedp.ByID))
		Expect(text(ctx, "#impact")).To(ContainSubstring(pid))
		screenshot(ctx, "08-cascade-impact")
		run(ctx, chromedp.Click("#confirm-delete", chromedp.ByID))
		waitBanner(ctx, "deleted with 1 references")
		Expect(getList(a, "/admin/v1/plugins/registry", "entries")).To(BeEmpty())

		// Scheduler view.
		run(ctx, chromedp.Navigate(px.AdminURL+"/dashboard/#/scheduler"), chromedp.WaitVisible("#job-filter", chromedp.ByID))
		Expect(bodyText(ctx)).To(ContainSubstring("usage_rollup"))
		screenshot(ctx, "09-scheduler")

		// No page shows the issued key, the upstream's API key or the admin token.
		for _, page := range []string{"upstreams", "principals", "plugins", "scheduler", "traffic"} {
			run(ctx, chromedp.Navigate(fmt.Sprintf("%s/dashboard/#/%s", px.AdminURL, page)))
			time.Sleep(300 * time.Millisecond)
			var html string
			run(ctx, chromedp.OuterHTML("html", &html, chromedp.ByQuery))
			for _, secret := range []string{key, simKey, px.Token} {
				Expect(strings.Contains(html, secret)).To(BeFalse(), "%s page shows a secret", page)
			}
		}
	})
})

func getList(a *h.Admin, path string, field ...string) []map[string]any {
	st, _, b := a.Do("GET", path, nil)
	Expect(st).To(Equal(200))
	var raw any
	Expect(jsonUnmarshal(b, &raw)).To(Succeed())
	if len(field) > 0 {
		raw = raw.(map[string]any)[field[0]]
	}
	var out []map[string]any
	for _, x := range raw.([]any) {
		out = append(out, x.(map[string]any))
	}
	return out
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// submit clicks a form's submit button: the page handles the submit event
// (form.submit() would bypass it).
func submit(form string) chromedp.Action {
	return chromedp.Click(form+` button[type="submit"]`, chromedp.ByQuery)
}
