package relay

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/money"
	"github.com/pillarhq/pillar/impl/gateway/routing"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/tracing"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/impl/testing/otlptest"
)

// traced is a relay under test whose spans reach an in-memory collector
// as each ends.
func traced(t *testing.T, s *snapshot.Snapshot, o Options, propagate bool) (*httptest.Server, *otlptest.Collector) {
	return tracedAt(t, s, o, propagate, 1)
}

func tracedAt(t *testing.T, s *snapshot.Snapshot, o Options, propagate bool, ratio float64) (*httptest.Server, *otlptest.Collector) {
	t.Helper()
	c := otlptest.NewCollector()
	p, err := tracing.New(context.Background(), tracing.Config{Enabled: true, SamplerRatio: ratio, PropagateTraceparent: propagate},
		tracing.Options{ServiceName: "proxy", ReplicaID: "r1", Exporter: otlptest.Exporter(c), Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	o.Source, o.Tracer, o.Propagate = fakeSource{s}, p.Tracer(), p.Propagate()
	srv := httptest.NewServer(New(o))
	t.Cleanup(srv.Close)
	return srv, c
}

const (
	clientTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientParent = "00f067aa0ba902b7"
	clientTP     = "00-" + clientTrace + "-" + clientParent + "-01"
)

// treeKeys are the attributes the span trees below show.
var treeKeys = []string{"http.response.status_code", "pillar.upstream.id", "pillar.attempt", "pillar.failover.reason",
	"pillar.cooldown.until", "error.type", "pillar.limit.kind", "gen_ai.request.model", "gen_ai.usage.input_tokens",
	"gen_ai.usage.output_tokens", "pillar.cost_usd"}

func wantTree(t *testing.T, spans []otlptest.Span, want string) {
	t.Helper()
	if got := otlptest.Tree(spans, treeKeys...); got != want {
		t.Fatalf("span tree:\n%s\nwant:\n%s", got, want)
	}
}

// A failover is one request span with an attempt span per upstream tried:
// the first names its status, why the request moved on and the cooldown
// it started; the request's span carries the answer's tokens and cost and
// continues the client's trace, whose context reaches the upstream that
// answered as the child of its attempt.
func TestTraceFailoverSpanTree(t *testing.T) {
	t.Parallel()
	overloaded := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(529)
		io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`)
	}))
	defer overloaded.Close()
	sn := &seen{}
	good := upstreamServer(t, sn, nil)
	oauth := store.Upstream{ID: "up_o", Name: "o", Kind: store.KindVendorOAuth, BaseURL: overloaded.URL, Enabled: true,
		Credential: []byte(`{"access_token":"tok"}`), CredentialKind: "oauth"}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	srv, c := traced(t, fixture(apiKeyUpstream("up_k", good.URL, "sk-upstream"), oauth), Options{
		Clock: fakeclock.New(now), Board: routing.NewBoard(nil),
		TraceCost: func(ev *store.RequestEvent) (money.Nanos, bool) {
			return money.Nanos(ev.InputTokens+ev.OutputTokens) * money.PerDollar / 1000, true
		},
	}, true)
	resp, b := post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good", "traceparent": clientTP},
		`{"model":"claude-test","max_tokens":5}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, b)
	}
	spans := c.WaitForTrace(t, "POST /v1/messages", 3)
	wantTree(t, spans, `POST /v1/messages (server) http.response.status_code=200 pillar.upstream.id=up_k gen_ai.request.model=claude-test gen_ai.usage.input_tokens=5 gen_ai.usage.output_tokens=2 pillar.cost_usd=0.007
  chat (client) error http.response.status_code=529 pillar.upstream.id=up_o pillar.attempt=1 pillar.failover.reason=status_529 pillar.cooldown.until=2026-03-01T12:00:30Z error.type=529
  chat (client) http.response.status_code=200 pillar.upstream.id=up_k pillar.attempt=2
`)
	root, _ := otlptest.Find(spans, "POST /v1/messages")
	if root.TraceID != clientTrace || root.ParentID != clientParent {
		t.Fatalf("request span %s/%s does not continue the client's %s", root.TraceID, root.ParentID, clientTP)
	}
	if root.Resource["service.name"] != "proxy" || root.Resource["service.instance.id"] != "r1" {
		t.Fatalf("resource %v", root.Resource)
	}
	var answered otlptest.Span
	for _, s := range spans {
		if s.Attrs["pillar.upstream.id"] == "up_k" && s.Name == "chat" {
			answered = s
		}
	}
	if got, want := sn.headers[0].Get("Traceparent"), "00-"+clientTrace+"-"+answered.SpanID+"-01"; got != want {
		t.Fatalf("upstream got traceparent %q, want %q (its attempt's span)", got, want)
	}
	for _, s := range spans {
		for k, v := range s.Attrs {
			if strings.Contains(v, "sk-") || strings.Contains(v, "tok") && k != "pillar.upstream.kind" {
				t.Fatalf("span %s attribute %s=%q carries a credential", s.Name, k, v)
			}
		}
	}
}

// A stream the upstream cuts: the attempt span records the cut as an
// event and an error, the request span the stream_interrupted outcome and
// the tokens read before the cut.
func TestTraceStreamCutSpanTree(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sseEvents(w, 2)
		cut(w)
	}))
	defer up.Close()
	srv, c := traced(t, fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), Options{}, true)
	resp, body, rerr := streamRequest(t, srv.URL)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	wantStreamError(t, body, rerr)
	spans := c.WaitForTrace(t, "POST /v1/messages", 2)
	wantTree(t, spans, `POST /v1/messages (server) error http.response.status_code=200 pillar.upstream.id=up_1 error.type=stream_interrupted gen_ai.request.model=claude-test gen_ai.usage.input_tokens=9 gen_ai.usage.output_tokens=0
  chat (client) error http.response.status_code=200 pillar.upstream.id=up_1 pillar.attempt=1 [stream cut error.type=upstream_cut]
`)
	root, _ := otlptest.Find(spans, "POST /v1/messages")
	if root.Attrs["pillar.time_to_first_byte_ms"] == "" {
		t.Fatalf("no time to first byte on %v", root.Attrs)
	}
}

// A principal over its budget is refused before any upstream is tried:
// the request span alone, naming the usd limit, no attempt span.
func TestTraceBudgetRefusalSpanTree(t *testing.T) {
	t.Parallel()
	sn := &seen{}
	up := upstreamServer(t, sn, nil)
	cfg := fixtureConfig(apiKeyUpstream("up_1", up.URL, "sk-upstream"))
	cfg.Principals[0].DefaultLimits = json.RawMessage(`[{"kind":"usd","window_secs":86400,"limit":"1.00"}]`)
	snap := snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0))
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	lim := limits.New(limits.Options{Clock: fakeclock.New(now)})
	p := snap.Principal("pr_a")
	lim.AddCost(p.ID, p.Limits, 2*money.PerDollar)
	srv, c := traced(t, snap, Options{Limiter: lim}, true)
	resp, b := post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-test","max_tokens":5}`)
	wantAnthropicError(t, resp, b, 429, "rate_limit_error")
	spans := c.WaitForTrace(t, "POST /v1/messages", 1)
	wantTree(t, spans, `POST /v1/messages (server) http.response.status_code=429 error.type=rate_limit_error pillar.limit.kind=usd gen_ai.request.model=claude-test
`)
	if len(sn.headers) != 0 {
		t.Fatalf("the upstream saw %d requests", len(sn.headers))
	}
}

// With propagation off the upstream gets no trace context, not even the
// client's; the proxy's spans still continue the client's trace.
func TestTracePropagationOff(t *testing.T) {
	t.Parallel()
	sn := &seen{}
	up := upstreamServer(t, sn, nil)
	srv, c := traced(t, fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), Options{}, false)
	resp, b := post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good", "traceparent": clientTP, "tracestate": "a=b"},
		`{"model":"claude-test","max_tokens":5}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, b)
	}
	spans := c.WaitForTrace(t, "POST /v1/messages", 2)
	if h := sn.headers[0]; h.Get("Traceparent") != "" || h.Get("Tracestate") != "" {
		t.Fatalf("upstream got trace context %q %q with propagation off", h.Get("Traceparent"), h.Get("Tracestate"))
	}
	if root, _ := otlptest.Find(spans, "POST /v1/messages"); root.TraceID != clientTrace {
		t.Fatalf("request span in trace %s, want the client's %s", root.TraceID, clientTrace)
	}
}

// The sampler decides new traces; a client's sampled traceparent is
// followed whatever the ratio. An unsampled request exports nothing but
// still gives the upstream a trace context (not sampled), as W3C asks.
func TestTraceSamplingFollowsClient(t *testing.T) {
	t.Parallel()
	sn := &seen{}
	up := upstreamServer(t, sn, nil)
	srv, c := tracedAt(t, fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), Options{}, true, 0)
	msg := `{"model":"claude-test","max_tokens":5}`
	if resp, b := post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, msg); resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, b)
	}
	unsampled := sn.headers[0].Get("Traceparent")
	if len(unsampled) != 55 || !strings.HasSuffix(unsampled, "-00") {
		t.Fatalf("unsampled request sent traceparent %q upstream", unsampled)
	}
	if resp, b := post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good", "traceparent": clientTP}, msg); resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, b)
	}
	spans := c.WaitForTraceID(t, clientTrace, 2)
	if len(spans) != 2 || len(c.Spans()) != 2 {
		t.Fatalf("spans %s; all received:\n%s", otlptest.Tree(spans), otlptest.Tree(c.Spans()))
	}
	if tp := sn.headers[1].Get("Traceparent"); !strings.HasPrefix(tp, "00-"+clientTrace+"-") || !strings.HasSuffix(tp, "-01") {
		t.Fatalf("sampled request sent traceparent %q upstream", tp)
	}
}

// A request refused before any principal is known still shows how it
// ended, and carries nothing of the key it sent.
func TestTraceUnauthenticatedSpan(t *testing.T) {
	t.Parallel()
	srv, c := traced(t, fixture(), Options{}, true)
	resp, b := post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-wrong-key", "traceparent": clientTP}, `{"model":"claude-test"}`)
	wantAnthropicError(t, resp, b, 401, "authentication_error")
	spans := c.WaitForTraceID(t, clientTrace, 1)
	wantTree(t, spans, "POST /v1/messages (server) http.response.status_code=401 error.type=authentication_error\n")
	for k, v := range spans[0].Attrs {
		if strings.Contains(v, "sk-wrong") {
			t.Fatalf("attribute %s=%q carries the key", k, v)
		}
	}
}
