// Package tracing owns the proxy's OpenTelemetry trace pipeline: the
// tracer provider, its sampler and OTLP exporter (gRPC or HTTP), the W3C
// trace-context propagator, and the attribute keys the proxy's spans use
// (docs/tracing.md). Tracing is off by default; off, New returns nil and
// every traced component takes a nil tracer as "trace nothing".
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Protocols of the OTLP exporter.
const (
	GRPC = "grpc"
	HTTP = "http"
)

// Config is the tracing section of the proxy's configuration.
type Config struct {
	// Enabled turns tracing on; off, nothing is traced or exported.
	Enabled bool `yaml:"enabled"`
	// Endpoint is the OTLP receiver's URL: http://host:4317 (gRPC) or
	// http://host:4318 (HTTP; the path defaults to /v1/traces). An
	// http:// URL is sent in clear text, https:// over TLS.
	Endpoint string `yaml:"endpoint"`
	// Protocol is grpc or http (OTLP/HTTP with protobuf bodies).
	Protocol string `yaml:"protocol"`
	// SamplerRatio is the share of new traces recorded, 0 to 1; a request
	// carrying a traceparent follows its caller's sampling decision.
	SamplerRatio float64 `yaml:"sampler_ratio"`
	// PropagateTraceparent sends the attempt's traceparent to the
	// upstream; false strips the client's trace context from the
	// outbound request.
	PropagateTraceparent bool `yaml:"propagate_traceparent"`
	// Headers are sent with every export (a collector's credentials):
	// they are never logged nor shown.
	Headers map[string]string `yaml:"headers"`
}

// Defaults: off; when turned on, gRPC to a local collector, every trace.
func Defaults() Config {
	return Config{Protocol: GRPC, Endpoint: "http://localhost:4317", SamplerRatio: 1, PropagateTraceparent: true}
}

// Validate reports each bad setting through bad, keyed under prefix.
func (c Config) Validate(prefix string, bad func(key, format string, a ...any)) {
	switch c.Protocol {
	case GRPC, HTTP:
	default:
		bad(prefix+".protocol", "must be grpc or http, got %q", c.Protocol)
	}
	if c.SamplerRatio < 0 || c.SamplerRatio > 1 {
		bad(prefix+".sampler_ratio", "must be 0 to 1, got %v", c.SamplerRatio)
	}
	if !c.Enabled {
		return
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad(prefix+".endpoint", "must be an http:// or https:// URL with a host, got %q", c.Endpoint)
	}
	for k := range c.Headers {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			bad(prefix+".headers", "%q is not a header name", k)
		}
	}
}

// Options are what New needs besides the configuration.
type Options struct {
	ServiceName string
	Version     string
	ReplicaID   string
	// Registerer takes the exporter's counters (optional).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Exporter replaces the OTLP exporter (tests: an in-memory one).
	Exporter sdktrace.SpanExporter
	// Batch, for tests, exports each span as it ends (false: batched).
	Sync bool
}

// Provider is a running trace pipeline.
type Provider struct {
	tp        *sdktrace.TracerProvider
	tracer    trace.Tracer
	propagate bool
}

// New starts the pipeline cfg describes; nil, nil when tracing is off.
func New(ctx context.Context, cfg Config, o Options) (*Provider, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	exp := o.Exporter
	if exp == nil {
		var err error
		if exp, err = otlpExporter(ctx, cfg); err != nil {
			return nil, err
		}
	}
	exp = &countingExporter{SpanExporter: exp, m: newMetrics(o.Registerer), log: o.Logger}
	res := resource.NewSchemaless(
		attribute.String("service.name", o.ServiceName),
		attribute.String("service.version", o.Version),
		attribute.String("service.instance.id", o.ReplicaID),
	)
	span := sdktrace.WithBatcher(exp)
	if o.Sync {
		span = sdktrace.WithSyncer(exp)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SamplerRatio))),
		span,
	)
	return &Provider{tp: tp, tracer: tp.Tracer("github.com/pillarhq/pillar/impl/gateway"), propagate: cfg.PropagateTraceparent}, nil
}

func otlpExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("tracing.endpoint: %w", err)
	}
	switch cfg.Protocol {
	case HTTP:
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(u.String()), otlptracehttp.WithTimeout(10 * time.Second)}
		if len(cfg.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
		}
		return otlptracehttp.New(ctx, opts...)
	default:
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(u.String()), otlptracegrpc.WithTimeout(10 * time.Second)}
		if len(cfg.Headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(cfg.Headers))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
}

// Tracer is the proxy's tracer; nil on a nil Provider (tracing off).
func (p *Provider) Tracer() trace.Tracer {
	if p == nil {
		return nil
	}
	return p.tracer
}

// Propagate reports whether the upstream gets the attempt's traceparent.
func (p *Provider) Propagate() bool { return p != nil && p.propagate }

// Shutdown exports what is buffered and stops the pipeline.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.Shutdown(ctx)
}

// Propagator reads and writes W3C traceparent and tracestate.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// countingExporter counts what reaches the receiver and what does not.
type countingExporter struct {
	sdktrace.SpanExporter
	m   *metrics
	log *slog.Logger
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.m.failures.Inc()
		e.m.dropped.Add(float64(len(spans)))
		// The error names the endpoint and the gRPC or HTTP status, never
		// the export headers.
		e.log.Warn("trace export failed; spans dropped", "spans", len(spans), "error", err)
		return err
	}
	e.m.exported.Add(float64(len(spans)))
	return nil
}

type metrics struct{ exported, dropped, failures prometheus.Counter }

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		exported: prometheus.NewCounter(prometheus.CounterOpts{Name: "svc_tracing_spans_exported_total", Help: "Spans the OTLP receiver accepted."}),
		dropped:  prometheus.NewCounter(prometheus.CounterOpts{Name: "svc_tracing_spans_dropped_total", Help: "Spans lost because their export failed."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "svc_tracing_export_failures_total", Help: "OTLP exports that failed."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.exported, m.dropped, m.failures} {
			if err := reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
				panic(err)
			}
		}
	}
	return m
}

// ShownEndpoint is the endpoint as status shows it: no user information,
// query or fragment (a collector token may hide there).
func (c Config) ShownEndpoint() string {
	u, err := url.Parse(c.Endpoint)
	if err != nil {
		return ""
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
