package proxy_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
	"github.com/pillarhq/pillar/impl/gateway/alerts"
	"github.com/pillarhq/pillar/impl/gateway/webhook"
)

// receiver is an operator's webhook endpoint: it checks each delivery's
// signature under the secret of the path it was sent to and keeps the
// events; the first delivery to /slow hangs until the sender gives up.
type receiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	secrets map[string]string
	events  map[string][]alerts.Event
	bad     []string
	slow    int
}

func newReceiver(secrets map[string]string) *receiver {
	r := &receiver{secrets: secrets, events: map[string][]alerts.Event{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		body, _ := io.ReadAll(q.Body)
		r.mu.Lock()
		if q.URL.Path == "/slow" {
			r.slow++
			if r.slow == 1 {
				r.mu.Unlock()
				<-q.Context().Done() // the sender's attempt timed out
				return
			}
		}
		defer r.mu.Unlock()
		if err := webhook.Verify([]byte(r.secrets[q.URL.Path]), q.Header.Get(webhook.SignatureHeader), body, time.Now(), time.Minute); err != nil {
			r.bad = append(r.bad, q.URL.Path+": "+err.Error())
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var ev alerts.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			r.bad = append(r.bad, q.URL.Path+": "+err.Error())
		}
		r.events[q.URL.Path] = append(r.events[q.URL.Path], ev)
		w.WriteHeader(http.StatusNoContent)
	}))
	DeferCleanup(r.srv.Close)
	return r
}

// got lists the events received at path as "<alert>:<status>".
func (r *receiver) got(path string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []string{}
	for _, e := range r.events[path] {
		out = append(out, e.Alert+":"+e.Status)
	}
	return out
}

var _ = Describe("Alert webhooks", func() {
	It("sends an upstream whose credential is unusable once when it fires and once when it resolves, signed; retries a slow receiver; dead-letters a receiver that is down", func() {
		secrets := map[string]string{"/ok": "whsec-ok-0123456789", "/slow": "whsec-slow-0123456789", "/down": "whsec-down-0123456789"}
		recv := newReceiver(secrets)
		// Nothing listens on port 1, and no listener is ever given it (it is
		// privileged and outside the ephemeral range); a closed listener's
		// port is handed to the next one opened on the machine.
		downURL := "http://127.0.0.1:1/down"

		px := h.StartProxy(h.ProxyOptions{Args: []string{"--alerts-evaluate-interval", "200ms", "--alerts-delivery-timeout", "500ms",
			"--alerts-retry-base", "100ms"}})
		a := px.Admin()
		hook := func(name, url string) string {
			return a.JSON("POST", "/admin/v1/webhooks", map[string]any{"name": name, "url": url, "secret": secrets["/"+name],
				"conditions": []string{alerts.UpstreamCredentialUnusable}}, 201)["id"].(string)
		}
		ok, down := hook("ok", recv.srv.URL+"/ok"), hook("down", downURL)
		hook("slow", recv.srv.URL+"/slow")
		wh := a.JSON("GET", "/admin/v1/webhooks/"+ok, nil, 200)
		Expect(wh).NotTo(HaveKey("secret"))
		Expect(wh["secret_set"]).To(BeTrue())

		// A test send reaches the receiver, signed.
		a.JSON("POST", "/admin/v1/webhooks/"+ok+"/test", nil, 202)
		Eventually(func() []string { return recv.got("/ok") }, 20*time.Second, 50*time.Millisecond).Should(Equal([]string{"test:test"}))

		// An OAuth upstream before its flow holds no credential: missing.
		up := a.JSON("POST", "/admin/v1/upstreams", map[string]any{"name": "max", "kind": "vendor_oauth", "base_url": "https://api.example"}, 201)["id"].(string)
		Eventually(func() []string { return recv.got("/ok") }, 20*time.Second, 50*time.Millisecond).Should(Equal([]string{"test:test", "upstream_credential_unusable:firing"}))
		recv.mu.Lock()
		ev := recv.events["/ok"][1]
		recv.mu.Unlock()
		Expect(ev.Rule).To(Equal("PillarUpstreamCredentialUnusable"))
		Expect(ev.Subject.ID).To(Equal(up))
		Expect(ev.Episode).To(BeEquivalentTo(1))
		Expect(a.JSON("GET", "/admin/v1/alerts", nil, 200)["alerts"]).To(HaveLen(1))

		// Switched off on purpose: the episode resolves, once.
		a.JSON("POST", "/admin/v1/upstreams/"+up+"/disable", nil, 200)
		Eventually(func() []string { return recv.got("/ok") }, 20*time.Second, 50*time.Millisecond).Should(Equal(
			[]string{"test:test", "upstream_credential_unusable:firing", "upstream_credential_unusable:resolved"}))
		Expect(a.JSON("GET", "/admin/v1/alerts", nil, 200)["alerts"]).To(BeEmpty())

		// The slow receiver's first attempt timed out; the retry delivered
		// it (possibly after the resolution, which did not wait for it).
		Eventually(func() []string { return recv.got("/slow") }, 30*time.Second, 50*time.Millisecond).Should(ConsistOf(
			"upstream_credential_unusable:firing", "upstream_credential_unusable:resolved"))

		// The receiver that is down: every attempt failed, both deliveries are dead letters.
		Eventually(func() []any {
			var dead []any
			for _, d := range a.JSON("GET", "/admin/v1/webhooks/"+down+"/deliveries", nil, 200)["deliveries"].([]any) {
				if d.(map[string]any)["dead_letter"] == true {
					dead = append(dead, d)
				}
			}
			return dead
		}, 60*time.Second, 100*time.Millisecond).Should(HaveLen(2))
		for _, d := range a.JSON("GET", "/admin/v1/webhooks/"+down+"/deliveries", nil, 200)["deliveries"].([]any) {
			Expect(d.(map[string]any)["state"]).To(Equal("Failed"))
			Expect(d.(map[string]any)["attempt"]).To(BeEquivalentTo(5))
		}
		failures := a.JSON("GET", "/admin/scheduler/failures?job_type="+webhook.JobType, nil, 200)["failures"].([]any)
		Expect(failures).To(HaveLen(2))
		for _, f := range failures {
			Expect(f.(map[string]any)["idempotency_key"]).To(HavePrefix(down + ":"))
			Expect(f.(map[string]any)["last_error"]).To(ContainSubstring("unreachable"))
			// The address, never the URL: a receiver's path may hold its token.
			Expect(f.(map[string]any)["last_error"]).NotTo(ContainSubstring(downURL))
		}
		Expect(px.Admin().Metric("svc_alert_webhook_deliveries_total", "outcome", alerts.OutcomeDeadLetter)).To(BeEquivalentTo(2))
		Expect(px.Admin().Metric("svc_alert_webhook_deliveries_total", "outcome", alerts.OutcomeDelivered)).To(BeEquivalentTo(5))
		recv.mu.Lock()
		Expect(recv.bad).To(BeEmpty())
		Expect(recv.slow).To(Equal(3)) // the timed-out attempt, then one per change
		recv.mu.Unlock()
	})

	It("sends a principal whose budget is spent, once, to the webhook subscribed to that condition only", func() {
		secrets := map[string]string{"/budget": "whsec-budget-0123456789", "/other": "whsec-other-0123456789"}
		recv := newReceiver(secrets)
		sim := h.StartSim(simKey)
		px := h.StartProxy(h.ProxyOptions{Args: []string{"--alerts-evaluate-interval", "200ms", "--reconcile-interval", "1s", "--price-catalog-url", sim.URL + "/catalog/prices.json",
			"--job-interval", "price_catalog_fetch=1s"}})
		a := px.Admin()
		a.JSON("POST", "/admin/v1/webhooks", map[string]any{"name": "budget", "url": recv.srv.URL + "/budget", "secret": secrets["/budget"],
			"conditions": []string{alerts.PrincipalBudgetExhausted}}, 201)
		a.JSON("POST", "/admin/v1/webhooks", map[string]any{"name": "other", "url": recv.srv.URL + "/other", "secret": secrets["/other"],
			"conditions": []string{alerts.ReplicaConfigBehind}}, 201)
		a.CreateUpstream("sim", sim.URL, simKey)
		principal := a.CreatePrincipal("team-a", "claude-*")
		_, key := a.IssueKey(principal)
		Eventually(func() any {
			return a.JSON("GET", "/admin/v1/price-catalog", nil, 200)["installed_version"]
		}, 30*time.Second, 200*time.Millisecond).Should(Equal("v1"))
		// A budget smaller than one request's price: the first request
		// spends it all.
		a.JSON("PATCH", "/admin/v1/principals/"+principal, map[string]any{"default_limits": []any{
			map[string]any{"kind": "usd", "window_secs": 86400, "limit": "0.000001"}}}, 200)
		st, _, b := h.Messages(px.ProxyURL, body, "x-api-key", key)
		Expect(st).To(Equal(200), string(b))
		Eventually(func() []string { return recv.got("/budget") }, 20*time.Second, 50*time.Millisecond).Should(Equal([]string{"principal_budget_exhausted:firing"}))
		recv.mu.Lock()
		ev := recv.events["/budget"][0]
		recv.mu.Unlock()
		Expect(ev.Rule).To(Equal("PillarPrincipalBudgetExhausted"))
		Expect(ev.Subject).To(Equal(alerts.Subject{Kind: "principal", ID: principal, Name: "team-a"}))
		Expect(*ev.Value).To(BeNumerically(">=", 1))
		// Still spent at three later evaluations: nothing more is sent.
		Expect(px.Admin().Metric("svc_alert_conditions_firing", "condition", alerts.PrincipalBudgetExhausted)).To(BeEquivalentTo(1))
		evals := px.Admin().Metric("svc_alert_evaluations_total")
		Eventually(func() float64 { return px.Admin().Metric("svc_alert_evaluations_total") }, 10*time.Second, 50*time.Millisecond).
			Should(BeNumerically(">=", evals+3))
		Expect(recv.got("/budget")).To(HaveLen(1))
		Expect(px.Admin().Metric("svc_alert_webhook_deliveries_total", "outcome", alerts.OutcomeDelivered)).To(BeEquivalentTo(1))
		Expect(recv.got("/other")).To(BeEmpty())
		recv.mu.Lock()
		Expect(recv.bad).To(BeEmpty())
		recv.mu.Unlock()
	})
})
