package server

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// The server hands one clock to every service it builds, so a test that
// injects a clock drives every loop and timestamp with it.
func TestOneClockReachesEveryService(t *testing.T) {
	dir := t.TempDir()
	e := env(map[string]string{"PROXY_ADMIN_TOKEN": "adm-token-for-tests"})
	cfg, err := ParseConfig([]string{"--database-url", "sqlite://" + filepath.Join(dir, "p.db"), "--proxy-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.2:0"}, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := fakeclock.New(time.Time{})
	cfg.clock = c
	log := slog.New(slog.DiscardHandler)
	sec, err := loadSecrets(cfg, e)
	if err != nil {
		t.Fatal(err)
	}
	stor, err := openStorage(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	g, err := buildRuntime(context.Background(), cfg, stor, sec.box, e, log)
	if err != nil {
		stor.st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { g.rec.Close(); _ = g.plugs.Close(context.Background()); stor.st.Close() })
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
