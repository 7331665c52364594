package pricing

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pillarhq/pillar/impl/gateway/money"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

type fakeGetter struct{ c *store.PriceCatalog }

func (f *fakeGetter) GetPriceCatalog(context.Context) (*store.PriceCatalog, error) {
	if f.c == nil {
		return nil, store.ErrNotFound
	}
	return f.c, nil
}

// P-TOPO-3: installation is local and follows the stored version.
func TestInstallerFollowsStoredVersion(t *testing.T) {
	t.Parallel()
	g := &fakeGetter{}
	i := NewInstaller(g, service.Options{})
	if ok, err := i.Sync(context.Background()); ok || err != nil || i.Current() != nil {
		t.Fatalf("nothing stored: %v %v", ok, err)
	}
	g.c = &store.PriceCatalog{Version: "v1", Body: json.RawMessage(`{"version":"v1","models":{"m":{"input":3,"output":15}}}`)}
	if ok, err := i.Sync(context.Background()); !ok || err != nil {
		t.Fatalf("install: %v %v", ok, err)
	}
	if c := i.Current(); c.Version != "v1" || c.Models["m"].Output != 15_000_000 {
		t.Fatalf("installed %+v", c)
	}
	if ok, _ := i.Sync(context.Background()); ok {
		t.Fatal("same version installed twice")
	}
	g.c = &store.PriceCatalog{Version: "v2", Body: json.RawMessage(`{"models":{}}`)}
	if ok, _ := i.Sync(context.Background()); !ok || i.Current().Version != "v2" {
		t.Fatal("new version not installed")
	}
}

func installed(t *testing.T, body string) *Catalog {
	t.Helper()
	i := NewInstaller(&fakeGetter{c: &store.PriceCatalog{Version: "v9", Body: json.RawMessage(body)}}, service.Options{})
	if ok, err := i.Sync(context.Background()); !ok || err != nil {
		t.Fatalf("install: %v %v", ok, err)
	}
	return i.Current()
}

// Each token class at its own price, the 1-hour cache writes apart from
// the 5-minute ones, summed exactly and rounded once to nano-dollars.
func TestCostByTokenClass(t *testing.T) {
	t.Parallel()
	c := installed(t, `{"models":{"m":{"input":3,"output":15,"cache_write":3.75,"cache_write_1h":6,"cache_read":0.30}}}`)
	for _, tc := range []struct {
		name string
		tok  Tokens
		want money.Nanos
	}{
		{"input", Tokens{Input: 1000}, 3_000_000},         // 1000 × $3/M = $0.003
		{"output", Tokens{Output: 1000}, 15_000_000},      // $0.015
		{"5m write", Tokens{CacheWrite: 1000}, 3_750_000}, // $0.00375
		{"1h write", Tokens{CacheWrite: 1000, CacheWrite1h: 1000}, 6_000_000},
		{"split writes", Tokens{CacheWrite: 1000, CacheWrite1h: 400}, 600*3750 + 400*6000},
		{"read", Tokens{CacheRead: 1000}, 300_000},
		{"one read token", Tokens{CacheRead: 1}, 300}, // 0.3 nano-dollars: exact, no float
		{"all", Tokens{Input: 1, Output: 1, CacheWrite: 2, CacheWrite1h: 1, CacheRead: 1}, 3000 + 15000 + 3750 + 6000 + 300},
	} {
		if got, ok := c.Cost("m", tc.tok); !ok || got != tc.want {
			t.Errorf("%s: %d %v, want %d", tc.name, got, ok, tc.want)
		}
	}
}

// A catalog without cache prices takes Anthropic's multiples of the input
// price; a model without input or output price, or not in the catalog, has
// no cost (not a zero one), and neither does anything before a catalog.
func TestCostDefaultsAndUnknownModels(t *testing.T) {
	t.Parallel()
	c := installed(t, `{"models":{"m":{"input":1,"output":5},"half":{"input":1}}}`)
	if got, _ := c.Cost("m", Tokens{CacheWrite: 10, CacheWrite1h: 5, CacheRead: 10}); got != 5*1250+5*2000+10*100 {
		t.Fatalf("defaults: %d", got)
	}
	for _, m := range []string{"half", "nope"} {
		if _, ok := c.Cost(m, Tokens{Input: 1}); ok {
			t.Errorf("%s priced", m)
		}
	}
	var none *Catalog
	if _, ok := none.Cost("m", Tokens{Input: 1}); ok {
		t.Fatal("priced without a catalog")
	}
}

// The meter stamps the catalog's version beside the cost and counts
// unknown models under a bounded label.
func TestMeter(t *testing.T) {
	t.Parallel()
	c := installed(t, `{"models":{"m":{"input":2,"output":10}}}`)
	reg := prometheus.NewPedanticRegistry()
	m := NewMeter(reg, func() *Catalog { return c }, func(id string) string { return "name-" + id })
	ev := store.RequestEvent{PrincipalID: "p", Model: "m", InputTokens: 500_000, OutputTokens: 100_000}
	m.Price(&ev)
	if ev.CostNanos == nil || *ev.CostNanos != 2_000_000_000 || ev.PriceVersion != "v9" {
		t.Fatalf("priced %+v", ev)
	}
	if got := testutil.ToFloat64(m.spend.WithLabelValues("name-p", "m")); got != 2 {
		t.Fatalf("spend %v", got)
	}
	for i := 0; i < MaxUnknownModels+5; i++ {
		u := store.RequestEvent{Model: fmt.Sprintf("x%d", i), InputTokens: 1}
		m.Price(&u)
		if u.CostNanos != nil || u.PriceVersion != "" {
			t.Fatalf("unknown model priced %+v", u)
		}
	}
	if n := testutil.CollectAndCount(m.unknown); n != MaxUnknownModels+1 {
		t.Fatalf("%d unknown-model series, want %d", n, MaxUnknownModels+1)
	}
	if got := testutil.ToFloat64(m.unknown.WithLabelValues("other")); got != 5 {
		t.Fatalf("other: %v", got)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}

// BenchmarkMeterPrice is the per-event cost of pricing on the usage
// recorder's goroutine (off the request path).
func BenchmarkMeterPrice(b *testing.B) {
	i := NewInstaller(&fakeGetter{c: &store.PriceCatalog{Version: "v1", Body: json.RawMessage(`{"models":{"m":{"input":3,"output":15,"cache_write":3.75,"cache_read":0.3}}}`)}}, service.Options{})
	if _, err := i.Sync(context.Background()); err != nil {
		b.Fatal(err)
	}
	m := NewMeter(prometheus.NewRegistry(), i.Current, func(id string) string { return id })
	ev := store.RequestEvent{PrincipalID: "p", Model: "m", InputTokens: 1200, OutputTokens: 300, CacheCreationInputTokens: 4000, CacheCreation1hInputTokens: 1000, CacheReadInputTokens: 20000}
	b.ReportAllocs()
	for b.Loop() {
		e := ev
		m.Price(&e)
	}
}

// fed hands each sync the catalog the test sends.
type fed chan *store.PriceCatalog

func (f fed) GetPriceCatalog(ctx context.Context) (*store.PriceCatalog, error) {
	select {
	case c := <-f:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Run installs at once, then each time the interval passes on the
// injected clock, stamping the catalog with that clock's time.
func TestInstallerRunsOnTheInjectedClock(t *testing.T) {
	t.Parallel()
	c := fakeclock.New(time.Time{})
	g := make(fed)
	i := NewInstaller(g, service.Options{Clock: c})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); i.Run(ctx, time.Hour) }()
	for n, v := range []string{"v1", "v2"} {
		if n > 0 {
			c.Advance(time.Hour)
		}
		g <- &store.PriceCatalog{Version: v, Body: json.RawMessage(`{"models":{}}`)}
		<-c.Armed() // the install before it has returned
		want := fakeclock.Start.Add(time.Duration(n) * time.Hour)
		if cur := i.Current(); cur.Version != v || !cur.InstalledAt.Equal(want) {
			t.Fatalf("installed %s at %v, want %s at %v", cur.Version, cur.InstalledAt, v, want)
		}
	}
	cancel()
	<-done
}
