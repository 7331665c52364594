package server

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/admin"
	"github.com/pillarhq/pillar/impl/gateway/money"
	"github.com/pillarhq/pillar/impl/gateway/pricing"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/tracing"
)

// ---- tracing (issue 37; docs/tracing.md) ----

// bindTracingFlags registers the tracing flags; the returned function
// copies the flags that were set over the file's values.
func bindTracingFlags(fs *flag.FlagSet) func(set map[string]bool, c *tracing.Config) {
	d := tracing.Defaults()
	on := fs.Bool("tracing-enabled", false, "export OpenTelemetry traces of requests, admin calls, jobs and OAuth refreshes over OTLP")
	endpoint := fs.String("tracing-endpoint", d.Endpoint, "OTLP receiver URL: http(s)://host:4317 (grpc) or http(s)://host:4318[/v1/traces] (http)")
	protocol := fs.String("tracing-protocol", d.Protocol, "OTLP transport: grpc or http")
	ratio := fs.Float64("tracing-sampler-ratio", d.SamplerRatio, "share of new traces recorded, 0 to 1 (a client's traceparent decides for its own)")
	propagate := fs.Bool("tracing-propagate-traceparent", d.PropagateTraceparent, "send the attempt's traceparent to the upstream (false: strip the client's)")
	headers := map[string]string{}
	fs.Func("tracing-header", "header sent with every OTLP export, name=value (repeatable; prefer the config file for credentials)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("want name=value, got a value without =")
		}
		headers[k] = val
		return nil
	})
	return func(set map[string]bool, c *tracing.Config) {
		if set["tracing-enabled"] {
			c.Enabled = *on
		}
		if set["tracing-endpoint"] {
			c.Endpoint = *endpoint
		}
		if set["tracing-protocol"] {
			c.Protocol = *protocol
		}
		if set["tracing-sampler-ratio"] {
			c.SamplerRatio = *ratio
		}
		if set["tracing-propagate-traceparent"] {
			c.PropagateTraceparent = *propagate
		}
		for k, v := range headers {
			if c.Headers == nil {
				c.Headers = map[string]string{}
			}
			c.Headers[k] = v
		}
	}
}

// startTracing starts the trace pipeline the configuration asks for (nil
// when tracing is off).
func (g *gateway) startTracing(ctx context.Context) error {
	p, err := tracing.New(ctx, g.cfg.Tracing, tracing.Options{ServiceName: "pillar-proxy", Version: Version, ReplicaID: g.cfg.ReplicaID,
		Registerer: g.reg, Logger: g.log.With("component", "tracing")})
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	g.tracing = p
	return nil
}

// traceCost prices a traced request for its span with the installed
// catalog, without the spend metrics the usage recorder's pricing feeds.
func (g *gateway) traceCost(ev *store.RequestEvent) (money.Nanos, bool) {
	return g.prices.Current().Cost(ev.Model, pricing.Tokens{Input: ev.InputTokens, Output: ev.OutputTokens, CacheWrite: ev.CacheCreationInputTokens,
		CacheWrite1h: ev.CacheCreation1hInputTokens, CacheRead: ev.CacheReadInputTokens})
}

// stopTracing exports the spans still buffered, within a bound.
func stopTracing(p *tracing.Provider) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.Shutdown(ctx) // a receiver that is down loses them; counted in svc_tracing_spans_dropped_total
}

// traceAdmin traces the admin API's calls; the dashboard's files and
// Prometheus scrapes would only bury them, so they are left out.
func traceAdmin(p *tracing.Provider, admin http.Handler) http.Handler {
	if p == nil {
		return admin
	}
	traced := tracing.Handler(p.Tracer(), "admin", admin)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" || r.URL.Path == "/dashboard" || strings.HasPrefix(r.URL.Path, "/dashboard/") {
			admin.ServeHTTP(w, r)
			return
		}
		traced.ServeHTTP(w, r)
	})
}

// tracingStatus is what GET /admin/v1/status shows of the tracing
// configuration: never the export headers.
func tracingStatus(c tracing.Config) admin.TracingStatus {
	if !c.Enabled {
		return admin.TracingStatus{}
	}
	ratio, propagate := c.SamplerRatio, c.PropagateTraceparent
	return admin.TracingStatus{Enabled: true, Protocol: c.Protocol, Endpoint: c.ShownEndpoint(), SamplerRatio: &ratio, PropagateTraceparent: &propagate}
}
