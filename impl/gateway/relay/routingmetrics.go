package relay

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/routing"
)

// routingCollector reports each live upstream's routing state when scraped:
// nothing is kept per request for it, the board is read at scrape time.
type routingCollector struct {
	board            *routing.Board
	src              Source
	clock            clock.Clock
	cooldown, flying *prometheus.Desc
}

// NewRoutingCollector returns the collector of the upstreams' live routing
// state (one series each per upstream of the snapshot in force, labelled
// by name, as svc_proxy_upstream_errors_total).
func NewRoutingCollector(b *routing.Board, src Source, clk clock.Clock) prometheus.Collector {
	return &routingCollector{board: b, src: src, clock: clock.Or(clk),
		cooldown: prometheus.NewDesc("svc_proxy_upstream_cooldown_remaining_seconds",
			"Seconds until an upstream cooling down after a 429/529 is routed to again (0: not cooling down), as this replica knows it.", []string{"upstream"}, nil),
		flying: prometheus.NewDesc("svc_proxy_upstream_in_flight",
			"Requests this replica has in flight on an upstream (response being relayed).", []string{"upstream"}, nil),
	}
}

func (c *routingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.cooldown; ch <- c.flying }

func (c *routingCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.src.Current()
	if snap == nil {
		return
	}
	now := c.clock.Now()
	for _, u := range snap.Upstreams {
		st := c.board.Read(u.ID, now)
		left := 0.0
		if !st.CooldownUntil.IsZero() {
			left = st.CooldownUntil.Sub(now).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(c.cooldown, prometheus.GaugeValue, left, u.Name)
		ch <- prometheus.MustNewConstMetric(c.flying, prometheus.GaugeValue, float64(st.InFlight), u.Name)
	}
}
