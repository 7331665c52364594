package server

import (
	"context"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// The server hands one clock to every service it builds, so a test that
// injects a clock drives every loop and timestamp with it.
func TestOneClockReachesEveryService(t *testing.T) {
	c := fakeclock.New(time.Time{})
	g, _ := buildTestGateway(t, c)
	g.startScheduler(context.Background())
	t.Cleanup(func() { _ = g.sched.Stop(context.Background()); g.closeSched() })
	for name, got := range map[string]clock.Clock{
		"snapshot": g.rt.Clock, "routing": g.share.Clock, "affinity": g.shareSessions.Clock, "limits": g.lim.Clock,
		"pricing": g.prices.Clock, "keepalive": g.ka.Clock, "oauth": g.subs.Service.Clock, "warmup": g.subs.warmer.Clock,
		"quota": g.subs.quota.Clock, "scheduler": g.sched.Clock, "alerts": g.alerts.Clock,
	} {
		if got != clock.Clock(c) {
			t.Errorf("%s reads %T, not the injected clock", name, got)
		}
	}
}
