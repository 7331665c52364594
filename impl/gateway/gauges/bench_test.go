package gauges_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/gauges"
	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// BenchmarkCollect is one scrape of the state gauges: 10,000 principals,
// a tenth with a budget, and 20 upstreams, on a real limiter; the
// database reads are a map (their cost is the database's).
func BenchmarkCollect(b *testing.B) {
	cfg := &store.Config{Generation: 7}
	for i := range 20 {
		id := fmt.Sprintf("up_%d", i)
		cfg.Upstreams = append(cfg.Upstreams, store.Upstream{ID: id, Name: "u" + id, Kind: store.KindVendorOAuth, BaseURL: "http://a", Enabled: true,
			Credential: sealed(id, store.KindVendorOAuth, "http://a", `{"access_token":"at"}`), CredentialKind: credential.OAuth})
	}
	for i := range 10_000 {
		p := store.Principal{ID: fmt.Sprintf("pr_%d", i), Name: fmt.Sprintf("p%d", i), Enabled: true}
		if i%10 == 0 {
			p.DefaultLimits = []byte(`[{"kind":"usd","window_secs":86400,"limit":"5.00"}]`)
		}
		cfg.Principals = append(cfg.Principals, p)
	}
	s := snapshot.Build(cfg, opener{}, time.Now())
	lim := limits.New(limits.Options{})
	st := &fakeStore{gen: 7, quotas: map[string]*store.QuotaObservation{}}
	for i := range 20 {
		id := fmt.Sprintf("up_%d", i)
		st.quotas[id] = &store.QuotaObservation{SevenDay: store.QuotaWindow{Utilization: 50, ResetsAt: &resets}}
	}
	c := gauges.New(snaps{s}, st, lim, nil)
	ch := make(chan prometheus.Metric, 1<<14)
	b.ReportAllocs()
	for b.Loop() {
		c.Collect(ch)
		for len(ch) > 0 {
			<-ch
		}
	}
}
