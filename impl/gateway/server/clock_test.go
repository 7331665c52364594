package server

import (
	"context"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/relay"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/impl/testing/promtest"
)

// The server hands one clock to every service it builds, so a test that
// injects a clock drives every loop and timestamp with it.
func TestOneClockReachesEveryService(t *testing.T) {
	c := fakeclock.New(time.Time{})
	g, st := buildTestGateway(t, c)
	g.startScheduler(context.Background())
	t.Cleanup(func() { _ = g.sched.Stop(context.Background()); g.closeSched() })
	h := g.handlers(&secrets{box: g.box})
	rh, ok := h.relay.(*relay.Handler)
	if !ok {
		t.Fatalf("the proxy path is served by %T, not the relay", h.relay)
	}
	for name, got := range map[string]clock.Clock{
		"snapshot": g.rt.Clock, "routing": g.share.Clock, "affinity": g.shareSessions.Clock, "limits": g.lim.Clock,
		"pricing": g.prices.Clock, "keepalive": g.ka.Clock, "oauth": g.subs.Service.Clock, "warmup": g.subs.warmer.Clock,
		"quota": g.subs.quota.Clock, "scheduler": g.sched.Clock, "alerts": g.alerts.Clock,
		"store": st.(*sqlstore.Store).Clock, "admission": g.admission.Clock, "upstream caps": g.upstreamCaps.Clock,
		"usage": g.rec.Clock, "plugins": g.plugs.Clock, "relay": rh.Clock,
	} {
		if got != clock.Clock(c) {
			t.Errorf("%s reads %T, not the injected clock", name, got)
		}
	}

	// The routing collector has no field to compare: an upstream cooling
	// down for a minute of the injected clock reports a minute left.
	up, err := st.CreateUpstream(context.Background(), store.UpstreamSpec{Name: "primary", Kind: store.KindVendorAPIKey,
		BaseURL: "https://api.example", Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.rt.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.board.CoolDown(up.ID, c.Now().Add(time.Minute))
	if left := promtest.Value(t, g.reg, "svc_proxy_upstream_cooldown_remaining_seconds", "upstream", "primary"); left != 60 {
		t.Errorf("cooldown remaining %v s on the injected clock, want 60", left)
	}
}
