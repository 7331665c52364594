package bench_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/pillarhq/pillar/conformance/bench"
	"github.com/pillarhq/pillar/impl/gateway/relay"
	"github.com/pillarhq/pillar/impl/gateway/tracing"
	"github.com/pillarhq/pillar/impl/testing/cputime"
	"github.com/pillarhq/pillar/impl/testing/otlptest"
)

// BenchmarkProxyPathTracing is BenchmarkProxyPath's gateway with tracing
// off, and on sampling 1 % and 100 % of requests, exported over OTLP/gRPC
// (batched, as bin/proxy exports) to a receiver on loopback in this
// process. cpu-ns/op counts the export and the receiver's decoding too, so
// it bounds tracing's CPU from above; ns/op is the request's own time. The
// "bare" rows give the ratio column its baseline.
func BenchmarkProxyPathTracing(b *testing.B) {
	const upstream = "http://provider.invalid"
	u, _ := url.Parse(upstream)
	for _, v := range []struct {
		name  string
		ratio float64 // < 0: tracing off
	}{{"bare", -1}, {"gateway", -1}, {"gateway-traced-1pct", 0.01}, {"gateway-traced-100pct", 1}} {
		for _, stream := range []bool{false, true} {
			kind := map[bool]string{false: "message", true: "stream"}[stream]
			b.Run(v.name+"/"+kind, func(b *testing.B) {
				h, key := bench.NewBareProxy(u, upstreamKey, memProvider{}), "unused"
				if v.name != "bare" {
					var tracer func(*relay.Options)
					if v.ratio >= 0 {
						p, err := tracing.New(context.Background(), tracing.Config{Enabled: true, Protocol: tracing.GRPC,
							Endpoint: otlptest.StartGRPC(b, otlptest.NewCounter()), SamplerRatio: v.ratio, PropagateTraceparent: true},
							tracing.Options{ServiceName: "bench"})
						if err != nil {
							b.Fatal(err)
						}
						b.Cleanup(func() { _ = p.Shutdown(context.Background()) })
						tracer = func(o *relay.Options) { o.Tracer, o.Propagate = p.Tracer(), p.Propagate() }
					}
					var opts []func(*relay.Options)
					if tracer != nil {
						opts = append(opts, tracer)
					}
					h, key = newGateway(b, upstream, memProvider{}, opts...), gatewayKey
				}
				c := newClient(stream, key)
				if err := c.do(h); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := cputime.Process()
				for b.Loop() {
					if err := c.do(h); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, cpu0)
			})
		}
	}
}
