package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/tracing"
	"github.com/pillarhq/pillar/impl/testing/otlptest"
)

// Admin calls are traced; the dashboard's files and scrapes are not.
func TestTraceAdminLeavesDashboardAndMetricsOut(t *testing.T) {
	t.Parallel()
	c := otlptest.NewCollector()
	p, err := tracing.New(context.Background(), tracing.Config{Enabled: true, SamplerRatio: 1},
		tracing.Options{Exporter: otlptest.Exporter(c), Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	h := traceAdmin(p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, path := range []string{"/dashboard/", "/dashboard/app.js", "/metrics", "/admin/v1/status"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
	}
	spans := c.Spans() // the exporter is synchronous: every span has ended
	if len(spans) != 1 || spans[0].Attrs["url.path"] != "/admin/v1/status" {
		t.Fatalf("spans:\n%s", otlptest.Tree(spans, "url.path"))
	}
	if traceAdmin(nil, h) == nil {
		t.Fatal("tracing off must leave the admin handler as it is")
	}
}

// Status shows the export without what may carry a credential: the
// headers, and the endpoint's user information and query.
func TestTracingStatusHidesCredentials(t *testing.T) {
	t.Parallel()
	if got := tracingStatus(tracing.Defaults()); got.Enabled || got.Protocol != "" || got.SamplerRatio != nil {
		t.Fatalf("tracing off shows %+v", got)
	}
	c := tracing.Config{Enabled: true, Protocol: "http", Endpoint: "https://user:pw@otel.example:4318/v1/traces?token=t#f", SamplerRatio: 0.25,
		Headers: map[string]string{"Authorization": "Bearer secret"}}
	got := tracingStatus(c)
	if got.Endpoint != "https://otel.example:4318/v1/traces" || got.Protocol != "http" || *got.SamplerRatio != 0.25 || *got.PropagateTraceparent {
		t.Fatalf("%+v endpoint %q", got, got.Endpoint)
	}
}
