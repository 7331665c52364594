package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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

// text reads sel's text, again when the page redrew the node between
// finding and reading it ("No node with given id found").
func text(ctx context.Context, sel string) string {
	var s string
	EventuallyWithOffset(1, func() error {
		return chromedp.Run(ctx, chromedp.Text(sel, &s, chromedp.ByQuery))
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
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

// pages are the dashboard's sections, in the navigation's order.
var pages = []string{"overview", "upstreams", "principals", "plugins", "scheduler", "traffic", "requests"}

// show navigates to a page and waits until it has rendered.
func show(ctx context.Context, base, page string) {
	run(ctx, chromedp.Navigate(base+"/dashboard/#/"+page),
		chromedp.WaitVisible(fmt.Sprintf(`body[data-page=%q]`, page), chromedp.ByQuery))
}

// display is an element's computed CSS display.
func display(ctx context.Context, sel string) string {
	var d string
	run(ctx, chromedp.Evaluate(fmt.Sprintf(`getComputedStyle(document.querySelector(%q)).display`, sel), &d))
	return d
}

var _ = Describe("Dashboard", func() {
	It("signs in, manages upstreams, principals, keys and plugins, shows traffic and 409s, never shows a secret twice", func() {
		sim := h.StartSim(simKey)
		// The rollup job does not run during the spec: the charts and the
		// overview must show the requests from the events themselves.
		// The sim's price catalog, installed before the traffic, prices it.
		px := h.StartProxy(h.ProxyOptions{Args: []string{"--job-interval", "usage_rollup=1h", "--reconcile-interval", "1s",
			"--price-catalog-url", sim.URL + "/catalog/prices.json", "--job-interval", "price_catalog_fetch=1s"}})
		a := px.Admin()
		ctx := browser()

		// The admin root sends a browser to the dashboard; signed out, only
		// the sign-in shows (the navigation and Sign out are hidden).
		run(ctx, chromedp.Navigate(px.AdminURL+"/"), chromedp.WaitVisible("#token", chromedp.ByID))
		var loc string
		run(ctx, chromedp.Location(&loc))
		Expect(loc).To(Equal(px.AdminURL + "/dashboard/"))
		Expect(display(ctx, "#nav")).To(Equal("none"))
		var signoutShown bool
		run(ctx, chromedp.Evaluate(`document.querySelector("#signout").getClientRects().length > 0`, &signoutShown))
		Expect(signoutShown).To(BeFalse())
		screenshot(ctx, "01-signin")
		run(ctx, chromedp.SendKeys("#token", px.Token, chromedp.ByID), submit("#signin-form"),
			chromedp.WaitVisible("#nav", chromedp.ByID), chromedp.WaitVisible(`body[data-page="overview"]`, chromedp.ByQuery))
		Expect(display(ctx, "#nav")).To(Equal("flex"))
		// A reload keeps the session (the token is in sessionStorage).
		run(ctx, chromedp.Reload(), chromedp.WaitVisible(`body[data-page="overview"]`, chromedp.ByQuery))
		Expect(display(ctx, "#nav")).To(Equal("flex"))

		// Create an API-key upstream.
		show(ctx, px.AdminURL, "upstreams")
		run(ctx, chromedp.SendKeys("#up-name", "sim", chromedp.ByID), chromedp.SendKeys("#up-url", sim.URL, chromedp.ByID),
			chromedp.SendKeys("#up-key", simKey, chromedp.ByID), submit("#upstream-create"))
		waitBanner(ctx, "Upstream sim created")
		run(ctx, chromedp.WaitVisible(`tr[data-upstream="sim"]`, chromedp.ByQuery))
		screenshot(ctx, "02-upstreams")

		// Create a principal and issue a key: shown once, listed at once, then gone.
		show(ctx, px.AdminURL, "principals")
		run(ctx, chromedp.SendKeys("#pr-name", "app", chromedp.ByID), chromedp.SendKeys("#pr-rpm", "120", chromedp.ByID), submit("#principal-create"))
		waitBanner(ctx, "Principal app created")
		// The list re-renders after the banner: read the page, not a row
		// that may be replaced under the query.
		Eventually(func() string { return bodyText(ctx) }, 10*time.Second).Should(ContainSubstring("120 requests / 60s"))
		run(ctx, chromedp.Click(`tr[data-principal="app"] button`, chromedp.ByQuery), chromedp.WaitVisible("#issue-key", chromedp.ByID))
		Expect(text(ctx, "#key-list")).NotTo(ContainSubstring("active"))
		run(ctx, chromedp.Click("#issue-key", chromedp.ByID), chromedp.WaitVisible("#new-key", chromedp.ByID))
		key := text(ctx, "#new-key")
		Expect(key).To(HavePrefix("sk-px-"))
		Expect(bodyText(ctx)).To(ContainSubstring("shown exactly once"))
		// The new key is in the list without a reload.
		Eventually(func() string { return text(ctx, "#key-list") }, 10*time.Second).Should(ContainSubstring("active"))
		screenshot(ctx, "03-key-issued")
		run(ctx, chromedp.Click("#hide-key", chromedp.ByID))
		Eventually(func() string { return bodyText(ctx) }, 10*time.Second).ShouldNot(ContainSubstring(key))
		Expect(text(ctx, "#key-list")).To(ContainSubstring("active"))
		screenshot(ctx, "04-principal")

		// Traffic through the proxy: 27 successes, the first of them from an
		// OpenAI client, and one upstream error.
		Eventually(func() any {
			return a.JSON("GET", "/admin/v1/price-catalog", nil, 200)["installed_version"]
		}, 30*time.Second, 200*time.Millisecond).Should(Equal("v1"))
		const ok = 27
		chat, err := http.NewRequest("POST", px.ProxyURL+"/v1/chat/completions",
			strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hello dashboard"}]}`))
		Expect(err).NotTo(HaveOccurred())
		chat.Header.Set("Authorization", "Bearer "+key)
		chatRes, err := http.DefaultClient.Do(chat)
		Expect(err).NotTo(HaveOccurred())
		chatRes.Body.Close()
		Expect(chatRes.StatusCode).To(Equal(200))
		for i := 1; i < ok; i++ {
			st, _, b := h.Messages(px.ProxyURL, `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hello dashboard"}]}`, "x-api-key", key)
			Expect(st).To(Equal(200), string(b))
		}
		sim.Fault(map[string]any{"status": 500})
		st, _, _ := h.Messages(px.ProxyURL, `{"model":"claude-haiku-4-5","max_tokens":8,"messages":[{"role":"user","content":"fail"}]}`, "x-api-key", key)
		Expect(st).To(BeNumerically(">=", 500))
		clear, _ := http.NewRequest("DELETE", sim.URL+"/_sim/faults", nil)
		res, err := http.DefaultClient.Do(clear)
		Expect(err).NotTo(HaveOccurred())
		res.Body.Close()
		Eventually(func() int {
			return len(getList(a, "/admin/v1/request-events?limit=100"))
		}, 30*time.Second, 200*time.Millisecond).Should(Equal(ok + 1))

		// The overview counts them at once (no rollup has run).
		show(ctx, px.AdminURL, "overview")
		Expect(text(ctx, "#stat-req")).To(ContainSubstring("28"))
		Expect(text(ctx, "#stat-err")).To(ContainSubstring("3.6 %"))
		Expect(bodyText(ctx)).To(And(ContainSubstring("claude-sonnet-4-5"), ContainSubstring("claude-haiku-4-5"), ContainSubstring("Upstream health")))
		Expect(text(ctx, `tr[data-upstream="sim"]`)).To(ContainSubstring("enabled"))
		// The routing column: weight and requests in flight (docs/routing.md).
		Expect(text(ctx, `tr[data-upstream="sim"]`)).To(And(ContainSubstring("weight 1"), ContainSubstring("in flight")))
		// Spend today: the priced requests' cost, exact, and a Spend column.
		Expect(text(ctx, "#stat-spend")).To(MatchRegexp(`\$0\.0\d+`))
		Expect(bodyText(ctx)).To(ContainSubstring("Spend"))
		Expect(text(ctx, "#tracing-note")).To(Equal("Tracing: off."))
		screenshot(ctx, "05-overview")

		// The traffic charts: fixed size, full 24-hour axis, names, the live hour.
		show(ctx, px.AdminURL, "traffic")
		for _, id := range []string{"#chart-requests", "#chart-tokens"} {
			var box map[string]float64
			run(ctx, chromedp.Evaluate(fmt.Sprintf(`(()=>{const r=document.querySelector(%q).getBoundingClientRect();return {w:r.width,h:r.height}})()`, id), &box))
			Expect(box).To(Equal(map[string]float64{"w": 960, "h": 240}))
		}
		var label string
		run(ctx, chromedp.AttributeValue("#chart-requests", "aria-label", &label, nil, chromedp.ByQuery))
		Expect(label).To(Equal("Requests per hour: 28 requests over 24 hours"))
		Expect(text(ctx, "#traffic-legend")).To(ContainSubstring("app → sim"))
		var hourLabels int
		run(ctx, chromedp.Evaluate(`[...document.querySelectorAll("#chart-requests text")].filter(t=>/^\d\d:00$/.test(t.textContent)).length`, &hourLabels))
		Expect(hourLabels).To(Equal(9)) // every third hour of 24, and the current one
		var chartText string            // SVG has no innerText: read its textContent
		run(ctx, chromedp.Evaluate(`document.querySelector("#chart-requests").textContent`, &chartText))
		Expect(chartText).To(ContainSubstring("live"))
		var pageHeight float64
		run(ctx, chromedp.Evaluate(`document.documentElement.scrollHeight`, &pageHeight))
		Expect(pageHeight).To(BeNumerically("<", 1400))
		screenshot(ctx, "06-traffic")

		// The request log: newest first, pages of 25, filters.
		show(ctx, px.AdminURL, "requests")
		rows := func() int {
			var n int
			run(ctx, chromedp.Evaluate(`document.querySelectorAll("tr[data-event]").length`, &n))
			return n
		}
		// All 28 on the default page: the OpenAI client's request, and only
		// its row, says which dialect it spoke.
		Eventually(rows, 10*time.Second).Should(Equal(ok + 1))
		var dialects []string
		run(ctx, chromedp.Evaluate(`[...document.querySelectorAll("tr[data-event] td[data-dialect]")].map(c => c.dataset.dialect + ":" + c.textContent).filter(d => d !== "messages:—")`, &dialects))
		Expect(dialects).To(Equal([]string{"openai:—OpenAI"}))
		run(ctx, chromedp.SetValue("#log-limit", "25", chromedp.ByID), submit("#log-filter"))
		Eventually(rows, 10*time.Second).Should(Equal(25))
		// Each relayed request shows its time to first byte and its cost.
		var timedAndPriced int
		run(ctx, chromedp.Evaluate(`[...document.querySelectorAll("tr[data-event]")].filter(r =>
			/^[0-9,]+ ms$/.test(r.children[9].textContent) && /^\$0\.[0-9]+$/.test(r.lastElementChild.textContent)).length`, &timedAndPriced))
		Expect(timedAndPriced).To(BeNumerically(">=", 24))
		screenshot(ctx, "07-requests")
		run(ctx, chromedp.Click("#log-older", chromedp.ByID))
		Eventually(rows, 10*time.Second).Should(Equal(3))
		Eventually(func() bool {
			var dis bool
			run(ctx, chromedp.Evaluate(`document.querySelector("#log-older").disabled`, &dis))
			return dis
		}, 10*time.Second).Should(BeTrue())
		run(ctx, chromedp.Click("#log-newer", chromedp.ByID))
		Eventually(rows, 10*time.Second).Should(Equal(25))
		run(ctx, chromedp.SetValue("#log-status", "5xx", chromedp.ByID), submit("#log-filter"))
		Eventually(rows, 10*time.Second).Should(Equal(1))
		Expect(text(ctx, "tr[data-event]")).To(And(ContainSubstring("app"), ContainSubstring("claude-haiku-4-5")))
		run(ctx, chromedp.SetValue("#log-status", "", chromedp.ByID), chromedp.SetValue("#log-model", "claude-opus-x", chromedp.ByID), submit("#log-filter"))
		run(ctx, chromedp.WaitVisible("#log-empty", chromedp.ByID))

		// A concurrent change: the edit gets a 409, the latest version is shown, the
		// operator re-applies.
		show(ctx, px.AdminURL, "upstreams")
		run(ctx, chromedp.WaitVisible(`tr[data-upstream="sim"]`, chromedp.ByQuery))
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
		screenshot(ctx, "08-conflict")
		run(ctx, chromedp.Click(".conflict button", chromedp.ByQuery))
		waitBanner(ctx, "Upstream sim-renamed saved")

		// Another host needs the key again: refused without it, saved with it.
		moved := strings.Replace(sim.URL, "127.0.0.1", "localhost", 1)
		run(ctx, chromedp.Click(`tr[data-upstream="sim-renamed"] td:last-child button:nth-child(2)`, chromedp.ByQuery), chromedp.WaitVisible("#edit-key", chromedp.ByID))
		run(ctx, chromedp.SetValue("#edit-url", moved, chromedp.ByID), submit("#upstream-edit"))
		waitBanner(ctx, "credential_required")
		baseURL := func() any {
			for _, u := range getList(a, "/admin/v1/upstreams") {
				if u["name"] == "sim-renamed" {
					return u["base_url"]
				}
			}
			return nil
		}
		Expect(baseURL()).NotTo(Equal(moved))
		run(ctx, chromedp.SetValue("#edit-url", moved, chromedp.ByID), chromedp.SetValue("#edit-key", simKey, chromedp.ByID), submit("#upstream-edit"))
		waitBanner(ctx, "Upstream sim-renamed saved")
		Expect(baseURL()).To(Equal(moved))

		// Upload a plugin, bind it, delete it with its references.
		show(ctx, px.AdminURL, "plugins")
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
		show(ctx, px.AdminURL, "scheduler")
		show(ctx, px.AdminURL, "plugins")
		run(ctx, chromedp.WaitVisible(`tr[data-plugin="pin"]`, chromedp.ByQuery))
		Expect(text(ctx, `tr[data-plugin="pin"]`)).To(ContainSubstring("router"))
		screenshot(ctx, "09-plugins")
		run(ctx, chromedp.Click(`tr[data-plugin="pin"] button`, chromedp.ByQuery), chromedp.WaitVisible("#impact", chromedp.ByID))
		Expect(text(ctx, "#impact")).To(ContainSubstring(pid))
		screenshot(ctx, "10-cascade-impact")
		run(ctx, chromedp.Click("#confirm-delete", chromedp.ByID))
		waitBanner(ctx, "deleted with 1 references")
		Expect(getList(a, "/admin/v1/plugins/registry", "entries")).To(BeEmpty())

		// Scheduler view.
		show(ctx, px.AdminURL, "scheduler")
		run(ctx, chromedp.WaitVisible("#job-filter", chromedp.ByID))
		Expect(bodyText(ctx)).To(ContainSubstring("usage_rollup"))
		screenshot(ctx, "11-scheduler")

		// No page shows the issued key, the upstream's API key or the admin
		// token; each page's picture goes into docs/ when asked for.
		for _, page := range pages {
			show(ctx, px.AdminURL, page)
			var html string
			run(ctx, chromedp.OuterHTML("html", &html, chromedp.ByQuery))
			for _, secret := range []string{key, simKey, px.Token} {
				Expect(strings.Contains(html, secret)).To(BeFalse(), "%s page shows a secret", page)
			}
			docScreenshot(ctx, page)
		}

		// Sign out forgets the session: a reload shows the sign-in again.
		run(ctx, chromedp.Click("#signout", chromedp.ByID), chromedp.WaitVisible("#token", chromedp.ByID))
		run(ctx, chromedp.Reload(), chromedp.WaitVisible("#token", chromedp.ByID))
		Expect(display(ctx, "#nav")).To(Equal("none"))
		docScreenshot(ctx, "signin")
	})
})

// docScreenshot writes docs/img/dashboard-<page>.png when
// UPDATE_SCREENSHOTS=1, so docs/dashboard.md shows the pages as the test
// saw them; CI leaves the tree alone.
func docScreenshot(ctx context.Context, page string) {
	if os.Getenv("UPDATE_SCREENSHOTS") != "1" {
		return
	}
	var png []byte
	run(ctx, chromedp.FullScreenshot(&png, 100))
	dir := filepath.Join(h.ModuleRoot(), "docs", "img")
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	Expect(os.WriteFile(filepath.Join(dir, "dashboard-"+page+".png"), png, 0o644)).To(Succeed())
}

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
