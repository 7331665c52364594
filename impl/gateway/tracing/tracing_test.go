package tracing_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pillarhq/pillar/impl/gateway/tracing"
	"github.com/pillarhq/pillar/impl/testing/otlptest"
)

// Off by default: no provider, and a nil provider answers as "trace nothing".
func TestOffIsNil(t *testing.T) {
	t.Parallel()
	p, err := tracing.New(context.Background(), tracing.Defaults(), tracing.Options{})
	if p != nil || err != nil {
		t.Fatalf("%v %v", p, err)
	}
	if p.Tracer() != nil || p.Propagate() || p.Shutdown(context.Background()) != nil {
		t.Fatal("a nil provider must trace nothing")
	}
	var h http.Handler = http.NewServeMux() // comparable, unlike a HandlerFunc
	if got := tracing.Handler(nil, "admin", h); got == nil || got != h {
		t.Fatal("Handler with a nil tracer must return the handler itself")
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	var errs []string
	bad := func(key, format string, a ...any) { errs = append(errs, key) }
	c := tracing.Config{Enabled: true, Protocol: "zipkin", SamplerRatio: -0.1, Endpoint: "collector:4317", Headers: map[string]string{"bad name": "x"}}
	c.Validate("tracing", bad)
	if got := strings.Join(errs, ","); got != "tracing.protocol,tracing.sampler_ratio,tracing.endpoint,tracing.headers" {
		t.Fatalf("errors for %s", got)
	}
	errs = nil
	tracing.Defaults().Validate("tracing", bad)
	good := tracing.Config{Enabled: true, Protocol: "http", SamplerRatio: 0.5, Endpoint: "https://otel.example/v1/traces"}
	good.Validate("tracing", bad)
	if len(errs) > 0 {
		t.Fatalf("valid configurations refused: %v", errs)
	}
}

type failingExporter struct{}

func (failingExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error {
	return errors.New("receiver down")
}
func (failingExporter) Shutdown(context.Context) error { return nil }

// A failed export is counted, with the spans it lost; a good one counts
// the spans exported.
func TestExportFailuresCounted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	p, err := tracing.New(context.Background(), tracing.Config{Enabled: true, SamplerRatio: 1},
		tracing.Options{Exporter: failingExporter{}, Sync: true, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, s := p.Tracer().Start(context.Background(), "x")
		s.End()
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP svc_tracing_export_failures_total OTLP exports that failed.
# TYPE svc_tracing_export_failures_total counter
svc_tracing_export_failures_total 3
# HELP svc_tracing_spans_dropped_total Spans lost because their export failed.
# TYPE svc_tracing_spans_dropped_total counter
svc_tracing_spans_dropped_total 3
# HELP svc_tracing_spans_exported_total Spans the OTLP receiver accepted.
# TYPE svc_tracing_spans_exported_total counter
svc_tracing_spans_exported_total 0
`)); err != nil {
		t.Fatal(err)
	}
}

// The HTTP middleware: a server span per request, renamed for its route,
// with the status and an API error's code; the client's trace continued.
func TestHandlerSpans(t *testing.T) {
	t.Parallel()
	c := otlptest.NewCollector()
	p, err := tracing.New(context.Background(), tracing.Config{Enabled: true, SamplerRatio: 1},
		tracing.Options{Exporter: otlptest.Exporter(c), Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/v1/things/{id}", func(w http.ResponseWriter, r *http.Request) {
		tracing.Route(r.Context(), r.Method, "/admin/v1/things/{id}")
		tracing.ErrorCode(r.Context(), "not_found")
		w.WriteHeader(http.StatusNotFound)
	})
	srv := httptest.NewServer(tracing.Handler(p.Tracer(), "admin", mux))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/admin/v1/things/th_1", nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	spans := c.WaitForTraceID(t, "4bf92f3577b34da6a3ce929d0e0e4736", 1)
	if got, want := otlptest.Tree(spans, "http.response.status_code", "http.route", "error.type", "url.path"),
		"GET /admin/v1/things/{id} (server) http.response.status_code=404 http.route=/admin/v1/things/{id} error.type=not_found url.path=/admin/v1/things/th_1\n"; got != want {
		t.Fatalf("spans:\n%s\nwant:\n%s", got, want)
	}
}

// headerReceiver answers OTLP/HTTP exports and keeps the last one's
// headers.
func headerReceiver(t *testing.T) (*httptest.Server, func() http.Header) {
	var mu sync.Mutex
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(srv.Close)
	return srv, func() http.Header { mu.Lock(); defer mu.Unlock(); return got }
}

func exportOne(t *testing.T, cfg tracing.Config) {
	t.Helper()
	p, err := tracing.New(context.Background(), cfg, tracing.Options{ServiceName: "proxy"})
	if err != nil {
		t.Fatal(err)
	}
	_, s := p.Tracer().Start(context.Background(), "x")
	s.End()
	if err := p.Shutdown(context.Background()); err != nil { // exports what is batched
		t.Fatal(err)
	}
}

// The configured export headers reach the receiver (a collector's
// credentials); without them the SDK's own OTEL_EXPORTER_OTLP_HEADERS
// does, the way the chart passes a Secret through extraEnv.
func TestExportHeaders(t *testing.T) {
	srv, got := headerReceiver(t)
	exportOne(t, tracing.Config{Enabled: true, Protocol: tracing.HTTP, Endpoint: srv.URL, SamplerRatio: 1,
		Headers: map[string]string{"X-Collector-Token": "from-config"}})
	if v := got().Get("X-Collector-Token"); v != "from-config" {
		t.Fatalf("configured header %q", v)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "X-Collector-Token=from-env")
	exportOne(t, tracing.Config{Enabled: true, Protocol: tracing.HTTP, Endpoint: srv.URL, SamplerRatio: 1})
	if v := got().Get("X-Collector-Token"); v != "from-env" {
		t.Fatalf("header from the environment %q", v)
	}
}
