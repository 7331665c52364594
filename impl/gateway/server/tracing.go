package server

import (
	"context"
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

// ---- tracing (docs/tracing.md) ----

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
