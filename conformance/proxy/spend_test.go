package proxy_test

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

var _ = Describe("Spend and budgets", func() {
	It("prices every request with the fetched catalog, reports it in /admin/v1/usage (JSON and CSV) and refuses a principal past its budget", func() {
		sim := h.StartSim(simKey)
		px := h.StartProxy(h.ProxyOptions{Args: []string{"--reconcile-interval", "1s", "--price-catalog-url", sim.URL + "/catalog/prices.json",
			"--job-interval", "price_catalog_fetch=1s"}})
		a := px.Admin()
		a.CreateUpstream("sim", sim.URL, simKey)
		principal := a.CreatePrincipal("team-a", "claude-*")
		_, key := a.IssueKey(principal)
		Eventually(func() any {
			return a.JSON("GET", "/admin/v1/price-catalog", nil, 200)["installed_version"]
		}, 30*time.Second, 200*time.Millisecond).Should(Equal("v1"))

		// The sim's catalog prices claude-sonnet-4-5 at $3 input, $15
		// output, $3.75 cache write and $0.30 cache read per million tokens.
		st, _, b := h.Messages(px.ProxyURL, body, "x-api-key", key)
		Expect(st).To(Equal(200), string(b))
		var msg struct {
			Usage struct {
				In  int64 `json:"input_tokens"`
				Out int64 `json:"output_tokens"`
				CW  int64 `json:"cache_creation_input_tokens"`
				CR  int64 `json:"cache_read_input_tokens"`
			} `json:"usage"`
		}
		Expect(json.Unmarshal(b, &msg)).To(Succeed())
		u := msg.Usage
		wantNanos := u.In*3000 + u.Out*15000 + u.CW*3750 + u.CR*300
		Expect(wantNanos).To(BeNumerically(">", 0))

		// The event carries its cost and the catalog version.
		var ev map[string]any
		Eventually(func() int {
			evs := a.JSON("GET", "/admin/v1/request-log?principal="+principal, nil, 200)["events"].([]any)
			if len(evs) > 0 {
				ev = evs[0].(map[string]any)
			}
			return len(evs)
		}, 5*time.Second, 100*time.Millisecond).Should(Equal(1))
		Expect(ev["price_version"]).To(Equal("v1"))
		Expect(ev["cost_usd"]).To(Equal(usd(wantNanos)))

		from := time.Now().Add(-time.Hour).Unix()
		rep := a.JSON("GET", fmt.Sprintf("/admin/v1/usage?from=%d&group_by=principal,model", from), nil, 200)
		rows := rep["rows"].([]any)
		Expect(rows).To(HaveLen(1), fmt.Sprint(rep, ev))
		row := rows[0].(map[string]any)
		Expect(row["principal_name"]).To(Equal("team-a"))
		Expect(row["model"]).To(Equal("claude-sonnet-4-5"))
		Expect(row["requests"]).To(BeEquivalentTo(1))
		Expect(row["cost_nanos"]).To(BeEquivalentTo(wantNanos))
		Expect(row["cost_usd"]).To(Equal(usd(wantNanos)))

		st, hdr, b := a.Do("GET", fmt.Sprintf("/admin/v1/usage?from=%d&group_by=model", from), nil, "Accept", "text/csv")
		Expect(st).To(Equal(200), string(b))
		Expect(hdr.Get("Content-Type")).To(HavePrefix("text/csv"))
		recs, err := csv.NewReader(strings.NewReader(string(b))).ReadAll()
		Expect(err).NotTo(HaveOccurred())
		Expect(recs).To(HaveLen(2))
		Expect(recs[0][0]).To(Equal("model"))
		Expect(recs[0]).To(ContainElement("cost_usd"))
		Expect(recs[1][0]).To(Equal("claude-sonnet-4-5"))
		Expect(recs[1]).To(ContainElement(usd(wantNanos)))
		a.ExpectError("GET", "/admin/v1/usage?group_by=team", nil, 400, "invalid_group_by")
		a.ExpectError("GET", "/admin/v1/usage?from=10&to=5", nil, 400, "invalid_time_range")

		Expect(px.Admin().Metric("svc_proxy_spend_usd_total", "principal", "team-a")).To(BeNumerically("~", float64(wantNanos)/1e9, 1e-12))

		// Bad budgets are refused.
		a.ExpectError("PATCH", "/admin/v1/principals/"+principal, map[string]any{"default_limits": []any{
			map[string]any{"kind": "usd", "window_secs": 86400, "limit": 0.0001}}}, 400, "invalid_request")
		a.ExpectError("PATCH", "/admin/v1/principals/"+principal, map[string]any{"default_limits": []any{
			map[string]any{"kind": "usd", "window_secs": 86400, "limit": "-0.0001"}}}, 400, "invalid_budget")
		// A budget of two and a half requests at this price: with each
		// request's cost counted before the next is sent, exactly three
		// are admitted (spend 0, 1 and 2 times the price, under the
		// budget) and the fourth is refused. Spend before the budget was
		// set is not counted.
		budget := wantNanos * 5 / 2
		p := a.JSON("PATCH", "/admin/v1/principals/"+principal, map[string]any{"default_limits": []any{
			map[string]any{"kind": "usd", "window_secs": 86400, "limit": usd(budget)}}}, 200)
		Expect(fmt.Sprint(p["default_limits"])).To(ContainSubstring("limit:" + usd(budget)))
		spent := px.Admin().Metric("svc_proxy_spend_usd_total", "principal", "team-a")
		var refused []byte
		var rh map[string][]string
		admitted := 0
		for range 30 {
			st, hd, b := h.Messages(px.ProxyURL, body, "x-api-key", key)
			if st != 200 {
				Expect(st).To(Equal(429), string(b))
				refused, rh = b, hd
				break
			}
			admitted++
			// The spend metric is fed right after the principal's
			// budget counted the cost: once it moved, the cost is in.
			want := spent + float64(int64(admitted)*wantNanos)/1e9
			Eventually(func() float64 { return px.Admin().Metric("svc_proxy_spend_usd_total", "principal", "team-a") },
				5*time.Second, 20*time.Millisecond).Should(BeNumerically("~", want, 1e-12))
		}
		Expect(admitted).To(Equal(3), "requests admitted under a budget of 2.5 times a request's price")
		Expect(string(refused)).To(ContainSubstring(`"type":"rate_limit_error"`))
		Expect(string(refused)).To(ContainSubstring("budget"))
		Expect(string(refused)).NotTo(ContainSubstring("rate limit"))
		Expect(rh["Retry-After"]).NotTo(BeEmpty())
		Expect(rh["X-Should-Retry"]).To(Equal([]string{"false"})) // a day's budget is no short wait
		Expect(px.Admin().Metric("svc_proxy_principal_limited_total", "kind", "usd")).To(BeEquivalentTo(1))
	})
})

// usd formats nano-dollars as the API does: at least two decimals.
func usd(n int64) string {
	s := strings.TrimRight(fmt.Sprintf("%d.%09d", n/1e9, n%1e9), "0")
	if i := strings.IndexByte(s, '.'); len(s)-i-1 < 2 {
		s += strings.Repeat("0", 2-(len(s)-i-1))
	}
	return s
}
