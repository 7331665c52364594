package proxy_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
	"github.com/pillarhq/pillar/impl/testing/otlptest"
)

// tracedProxy starts a proxy exporting its traces over protocol to a real
// OTLP receiver in this process. The batch delay is shortened through
// the SDK's own variable so the spans arrive within the spec.
func tracedProxy(protocol string, args ...string) (*h.Proxy, *otlptest.Collector, string) {
	c := otlptest.NewCollector()
	endpoint := otlptest.StartGRPC(GinkgoT(), c)
	if protocol == "http" {
		endpoint = otlptest.StartHTTP(GinkgoT(), c)
	}
	args = append([]string{"--tracing-enabled", "--tracing-protocol", protocol, "--tracing-endpoint", endpoint,
		"--replica-id", "replica-traced"}, args...)
	px := h.StartProxy(h.ProxyOptions{Args: args, Env: map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "50"}})
	return px, c, endpoint
}

// newTrace is a fresh client trace context: its trace id and traceparent.
func newTrace() (traceID, traceparent string) {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	traceID = hex.EncodeToString(b[:16])
	return traceID, "00-" + traceID + "-" + hex.EncodeToString(b[16:]) + "-01"
}

// spanKeys are the attributes the asserted trees show.
var spanKeys = []string{"http.response.status_code", "pillar.upstream.id", "pillar.attempt", "pillar.failover.reason",
	"error.type", "pillar.limit.kind", "gen_ai.request.model"}

// noSecrets fails when a span attribute carries one of the secrets.
func noSecrets(spans []otlptest.Span, secrets ...string) {
	for _, s := range spans {
		for k, v := range s.Attrs {
			for _, sec := range secrets {
				Expect(v).NotTo(ContainSubstring(sec), "span %s attribute %s", s.Name, k)
			}
		}
	}
}

// childOf finds the span of the trace named name with attribute k=v.
func spanWith(spans []otlptest.Span, name, k, v string) otlptest.Span {
	for _, s := range spans {
		if s.Name == name && s.Attrs[k] == v {
			return s
		}
	}
	Fail(fmt.Sprintf("no %s span with %s=%s in:\n%s", name, k, v, otlptest.Tree(spans, spanKeys...)))
	return otlptest.Span{}
}

var _ = Describe("OpenTelemetry traces", func() {
	It("exports a failover as a request span over one attempt span per upstream tried, over gRPC, and passes the client's trace to the upstream", func() {
		px, c, endpoint := tracedProxy("grpc")
		a := px.Admin()
		sims := []*h.Sim{h.StartSim(simKey), h.StartSim(simKey)}
		var ids []string
		for i, w := range []int{1, 0} { // the second is a standby: the order is fixed
			m := a.JSON("POST", "/admin/v1/upstreams", map[string]any{"name": fmt.Sprintf("account-%d", i), "kind": "vendor_api_key",
				"base_url": sims[i].URL, "api_key_value": simKey, "weight": w}, 201)
			ids = append(ids, m["id"].(string))
		}
		_, key := a.IssueKey(a.CreatePrincipal("agents", "claude-*"))
		sims[0].Fault(map[string]any{"path": "/v1/messages", "status": 529, "retry_after": 30, "count": 1})

		traceID, tp := newTrace()
		st, _, b := h.Messages(px.ProxyURL, body, "x-api-key", key, "traceparent", tp)
		Expect(st).To(Equal(200), string(b))
		spans := c.WaitForTraceID(GinkgoT(), traceID, 3)
		Expect(otlptest.Tree(spans, spanKeys...)).To(Equal(fmt.Sprintf(
			`POST /v1/messages (server) http.response.status_code=200 pillar.upstream.id=%[2]s gen_ai.request.model=claude-sonnet-4-5
  chat (client) error http.response.status_code=529 pillar.upstream.id=%[1]s pillar.attempt=1 pillar.failover.reason=status_529 error.type=529
  chat (client) http.response.status_code=200 pillar.upstream.id=%[2]s pillar.attempt=2
`, ids[0], ids[1])))
		root := spanWith(spans, "POST /v1/messages", "pillar.upstream.id", ids[1])
		Expect(root.Resource).To(HaveKeyWithValue("service.name", "pillar-proxy"))
		Expect(root.Resource).To(HaveKeyWithValue("service.instance.id", "replica-traced"))
		Expect(root.ParentID).To(Equal(strings.Split(tp, "-")[2]), "the request span continues the client's")
		Expect(root.Attrs).To(HaveKey("pillar.time_to_first_byte_ms"))
		in, _ := strconv.Atoi(root.Attrs["gen_ai.usage.input_tokens"])
		Expect(in).To(BeNumerically(">", 0), "tokens on the request span: %v", root.Attrs)
		Expect(root.Attrs).To(HaveKey("gen_ai.usage.output_tokens"))
		first := spanWith(spans, "chat", "pillar.upstream.id", ids[0])
		Expect(first.Attrs).To(HaveKey("pillar.cooldown.until"))
		// Each upstream got its own attempt as the parent of the trace.
		for i, sim := range sims {
			att := spanWith(spans, "chat", "pillar.upstream.id", ids[i])
			recs := sim.MessagesWith("hello proxy world")
			Expect(recs).To(HaveLen(1))
			Expect(recs[0].Header.Get("Traceparent")).To(Equal("00-" + traceID + "-" + att.SpanID + "-01"))
		}
		noSecrets(spans, simKey, key, "hello proxy world")
		Expect(a.JSON("GET", "/admin/v1/status", nil, 200)["tracing"]).To(Equal(map[string]any{"enabled": true, "protocol": "grpc",
			"endpoint": endpoint, "sampler_ratio": 1.0, "propagate_traceparent": true}))

		// Durable jobs are traced: the replica runs the current tick of
		// every periodic job when it starts.
		jobs := c.WaitFor(GinkgoT(), func(all []otlptest.Span) bool {
			_, ok := otlptest.Find(all, "job metadata_refresh")
			return ok
		})
		job, _ := otlptest.Find(jobs, "job metadata_refresh")
		Expect(job.Kind).To(Equal("internal"))
		Expect(job.Attrs).To(HaveKeyWithValue("pillar.job.kind", "metadata_refresh"))
		Expect(job.Attrs).To(HaveKey("pillar.outcome"))

		// The admin API is traced too, named for its route.
		adminTrace, adminTP := newTrace()
		st, _, b = a.Do("GET", "/admin/v1/upstreams/"+ids[0], nil, "traceparent", adminTP)
		Expect(st).To(Equal(200), string(b))
		adminSpans := c.WaitForTraceID(GinkgoT(), adminTrace, 1)
		Expect(otlptest.Tree(adminSpans, "http.response.status_code", "http.route")).To(Equal(
			"GET /admin/v1/upstreams/{id} (server) http.response.status_code=200 http.route=/admin/v1/upstreams/{id}\n"))
	})

	It("exports a stream the upstream cuts as a failed request over an attempt span with the cut, over HTTP", func() {
		px, c, _ := tracedProxy("http")
		sim := h.StartSim(simKey)
		a := px.Admin()
		up := a.CreateUpstream("sim", sim.URL, simKey)
		_, key := a.IssueKey(a.CreatePrincipal("app", "claude-*"))
		sim.Fault(map[string]any{"path": "/v1/messages", "drop_after_events": 3, "count": 1})

		traceID, tp := newTrace()
		st, _, b := h.Messages(px.ProxyURL, streamBody, "x-api-key", key, "traceparent", tp)
		Expect(st).To(Equal(200))
		Expect(string(b)).To(ContainSubstring("event: error"))
		spans := c.WaitForTraceID(GinkgoT(), traceID, 2)
		Expect(otlptest.Tree(spans, spanKeys...)).To(Equal(fmt.Sprintf(
			`POST /v1/messages (server) error http.response.status_code=200 pillar.upstream.id=%[1]s error.type=stream_interrupted gen_ai.request.model=claude-sonnet-4-5
  chat (client) error http.response.status_code=200 pillar.upstream.id=%[1]s pillar.attempt=1 [stream cut error.type=upstream_cut]
`, up)))
		noSecrets(spans, simKey, key, "hello proxy world")
	})

	It("exports a budget refusal as the request span alone, naming the usd limit, with the admitted request's cost", func() {
		sim := h.StartSim(simKey)
		px, c, _ := tracedProxy("grpc", "--reconcile-interval", "1s", "--price-catalog-url", sim.URL+"/catalog/prices.json", "--job-interval", "price_catalog_fetch=1s")
		a := px.Admin()
		a.CreateUpstream("sim", sim.URL, simKey)
		principal := a.CreatePrincipal("team-a", "claude-*")
		_, key := a.IssueKey(principal)
		Eventually(func() any {
			return a.JSON("GET", "/admin/v1/price-catalog", nil, 200)["installed_version"]
		}, 30*time.Second, 200*time.Millisecond).Should(Equal("v1"))
		a.JSON("PATCH", "/admin/v1/principals/"+principal, map[string]any{"default_limits": []any{
			map[string]any{"kind": "usd", "window_secs": 86400, "limit": "0.000001"}}}, 200)

		// The first request is admitted and priced; the budget counts its
		// cost once the recorder has it, then refuses.
		paidTrace, paidTP := newTrace()
		st, _, b := h.Messages(px.ProxyURL, body, "x-api-key", key, "traceparent", paidTP)
		Expect(st).To(Equal(200), string(b))
		var refusedTrace string
		Eventually(func() int {
			id, tp := newTrace()
			st, _, _ := h.Messages(px.ProxyURL, body, "x-api-key", key, "traceparent", tp)
			refusedTrace = id
			return st
		}, 10*time.Second, 100*time.Millisecond).Should(Equal(429))
		spans := c.WaitForTraceID(GinkgoT(), refusedTrace, 1)
		Expect(otlptest.Tree(spans, spanKeys...)).To(Equal(
			"POST /v1/messages (server) http.response.status_code=429 error.type=rate_limit_error pillar.limit.kind=usd gen_ai.request.model=claude-sonnet-4-5\n"))
		paid := c.WaitForTraceID(GinkgoT(), paidTrace, 2)
		root := spanWith(paid, "POST /v1/messages", "http.response.status_code", "200")
		cost, err := strconv.ParseFloat(root.Attrs["pillar.cost_usd"], 64)
		Expect(err).NotTo(HaveOccurred(), "cost on the admitted request's span: %v", root.Attrs)
		Expect(cost).To(BeNumerically(">", 0))
	})

	It("exports an OAuth token refresh under the span of the job that ran it", func() {
		c := otlptest.NewCollector()
		endpoint := otlptest.StartGRPC(GinkgoT(), c)
		// Refresh runs at half the 20 s lifetime.
		w := newOAuthWorld([]string{"--oauth-token-ttl", "20s"}, "--tracing-enabled", "--tracing-endpoint", endpoint)
		w.admin.ConnectOAuth(w.upstream, "acct-traced")
		spans := c.WaitFor(GinkgoT(), func(all []otlptest.Span) bool {
			for _, s := range all {
				if s.Name == "oauth refresh" && s.Attrs["pillar.upstream.id"] == w.upstream {
					return true
				}
			}
			return false
		})
		refresh := spanWith(spans, "oauth refresh", "pillar.upstream.id", w.upstream)
		Expect(refresh.Attrs).To(HaveKeyWithValue("pillar.outcome", "refreshed"))
		Expect(refresh.Error).To(BeFalse())
		job := c.WaitForTraceID(GinkgoT(), refresh.TraceID, 2)
		Expect(otlptest.Tree(job, "pillar.outcome")).To(Equal("job oauth_refresh (internal) pillar.outcome=done\n  oauth refresh (internal) pillar.outcome=refreshed\n"))
		noSecrets(job, simKey, "acct-traced")
	})

	It("keeps the client's trace context from the upstream when propagation is off", func() {
		px, c, _ := tracedProxy("http", "--tracing-propagate-traceparent=false")
		sim := h.StartSim(simKey)
		a := px.Admin()
		a.CreateUpstream("sim", sim.URL, simKey)
		_, key := a.IssueKey(a.CreatePrincipal("app", "claude-*"))
		traceID, tp := newTrace()
		st, _, b := h.Messages(px.ProxyURL, body, "x-api-key", key, "traceparent", tp, "tracestate", "vendor=1")
		Expect(st).To(Equal(200), string(b))
		c.WaitForTraceID(GinkgoT(), traceID, 2)
		recs := sim.MessagesWith("hello proxy world")
		Expect(recs).To(HaveLen(1))
		Expect(recs[0].Header.Get("Traceparent")).To(BeEmpty())
		Expect(recs[0].Header.Get("Tracestate")).To(BeEmpty())
	})
})
