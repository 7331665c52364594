package agent

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Metrics is the agent's Prometheus collector: each scrape reads every
// pool's capacity and the target's exports afresh (no cached state to go
// stale after a reboot), and the interceptor it returns from Interceptor
// times every gRPC call by method and status code.
type Metrics struct {
	srv *Server
	ops *prometheus.HistogramVec

	total, free, used, healthy, thinMeta, exports, up, fences, stale *prometheus.Desc
}

// NewMetrics registers the agent's series on reg.
func NewMetrics(srv *Server, reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		srv: srv,
		ops: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pillar_agent_operations_seconds",
			Help:    "Duration of agent gRPC calls, by method and gRPC status code.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"method", "grpc_status_code"}),
		total:    prometheus.NewDesc("pillar_agent_pool_total_bytes", "Size of a pool or volume group.", []string{"pool", "kind"}, nil),
		free:     prometheus.NewDesc("pillar_agent_pool_free_bytes", "Free bytes of a pool or volume group.", []string{"pool", "kind"}, nil),
		used:     prometheus.NewDesc("pillar_agent_pool_used_bytes", "Used bytes of a pool or volume group (total minus free).", []string{"pool", "kind"}, nil),
		healthy:  prometheus.NewDesc("pillar_agent_pool_healthy", "1 when the pool is discovered with its configured layout and healthy.", []string{"pool", "kind"}, nil),
		thinMeta: prometheus.NewDesc("pillar_agent_thin_pool_metadata_used_ratio", "Metadata usage of an LVM thin pool, 0 to 1 (full: every thin volume's writes fail).", []string{"pool", "thin_pool"}, nil),
		exports:  prometheus.NewDesc("pillar_agent_exports", "Volumes exported through the kernel NVMe target.", nil, nil),
		up:       prometheus.NewDesc("pillar_agent_target_ready", "1 when the kernel NVMe target's configfs tree is present.", nil, nil),
		fences:   prometheus.NewDesc("pillar_agent_fences_total", "Hosts cut off from an export they could reach (deny: ACL entry removed and live connections dropped).", nil, nil),
		stale:    prometheus.NewDesc("pillar_agent_stale_requests_total", "Export changes refused because they were decided on an older generation of the export than the agent's, by method.", []string{"method"}, nil),
	}
	reg.MustRegister(m.ops, m)
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.total, m.free, m.used, m.healthy, m.thinMeta, m.exports, m.up, m.fences, m.stale} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range m.srv.pools(ctx) {
		kind := strings.ToLower(strings.TrimPrefix(p.GetKind().String(), "BACKEND_KIND_"))
		h := 0.0
		if p.GetHealthy() {
			h = 1
		}
		ch <- prometheus.MustNewConstMetric(m.healthy, prometheus.GaugeValue, h, p.GetName(), kind)
		if !p.GetDiscovered() {
			continue // no capacity to report
		}
		ch <- prometheus.MustNewConstMetric(m.total, prometheus.GaugeValue, float64(p.GetTotalBytes()), p.GetName(), kind)
		ch <- prometheus.MustNewConstMetric(m.free, prometheus.GaugeValue, float64(p.GetFreeBytes()), p.GetName(), kind)
		ch <- prometheus.MustNewConstMetric(m.used, prometheus.GaugeValue, float64(p.GetTotalBytes()-p.GetFreeBytes()), p.GetName(), kind)
		if p.ThinMetadataUsed != nil {
			ch <- prometheus.MustNewConstMetric(m.thinMeta, prometheus.GaugeValue, p.GetThinMetadataUsed(), p.GetName(), p.GetLayout().GetThinPool())
		}
	}
	fences, stale := m.srv.FenceCounts()
	ch <- prometheus.MustNewConstMetric(m.fences, prometheus.CounterValue, float64(fences))
	// Every method that checks a generation, so a rate over zero is zero
	// rather than absent.
	for _, method := range []string{"ExportVolume", "UnexportVolume", "AllowHost", "DenyHost"} {
		ch <- prometheus.MustNewConstMetric(m.stale, prometheus.CounterValue, float64(stale[method]), method)
	}
	ready := m.srv.targetReady()
	up := 0.0
	if ready {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(m.up, prometheus.GaugeValue, up)
	if ready {
		if targets, err := m.srv.exporter.List(); err == nil {
			ch <- prometheus.MustNewConstMetric(m.exports, prometheus.GaugeValue, float64(len(targets)))
		}
	}
}

// Interceptor observes every call in pillar_agent_operations_seconds.
func (m *Metrics) Interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
		m.ops.WithLabelValues(method, status.Code(err).String()).Observe(time.Since(start).Seconds())
		return resp, err
	}
}
